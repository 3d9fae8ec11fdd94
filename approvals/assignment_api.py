"""REST for who is on a call: assign it to a supervisor or an approver group of its shop,
unassign it, or claim it; and the shop's approver groups (approvals.gate.assignment). Thin:
parse, call one service, render."""

from drf_spectacular.utils import extend_schema
from rest_framework.response import Response
from rest_framework.views import APIView

from agentportal.schema import ids_from, problems
from approvals.api import (
    APPROVAL_FROM,
    APPROVAL_SEEN,
    approval_or_404,
    policy_editor_or_403,
    supervisor_or_403,
)
from approvals.gate import assignment
from approvals.models import ApproverGroup
from approvals.serializers import (
    ApprovalSerializer,
    ApproverGroupListSerializer,
    ApproverGroupRequestSerializer,
    ApproverGroupSerializer,
    AssignRequestSerializer,
)


class ApprovalAssignView(APIView):
    @extend_schema(
        operation_id="approvals_assign",
        request=AssignRequestSerializer,
        responses=ApprovalSerializer,
        extensions=problems(
            "already_decided", "invalid_transition", "run_finished", "interrupt_expired"
        )
        | ids_from(*APPROVAL_FROM, APPROVAL_SEEN),
    )
    def post(self, request, interrupt_id):
        approval = approval_or_404(request, interrupt_id)
        principal = supervisor_or_403(request)
        body = AssignRequestSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        assigned = assignment.approval_assign(
            approval=approval,
            principal=principal,
            assignee=assignment.assignee_find(
                merchant=approval.merchant, username=data.get("user"), group=data.get("group")
            ),
            claim=data["claim"],
        )
        return Response(ApprovalSerializer(assigned).data)


class ApproverGroupsView(APIView):
    @extend_schema(operation_id="groups_list", responses=ApproverGroupListSerializer)
    def get(self, request):
        principal = supervisor_or_403(request)
        groups = (
            ApproverGroup.objects.filter(merchant=principal.merchant)
            .prefetch_related("members")
            .order_by("name")
        )
        return Response({"results": ApproverGroupSerializer(groups, many=True).data})


class ApproverGroupDetailView(APIView):
    @extend_schema(
        operation_id="groups_set",
        request=ApproverGroupRequestSerializer,
        responses=ApproverGroupSerializer,
    )
    def put(self, request, name):
        principal = policy_editor_or_403(request)
        body = ApproverGroupRequestSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        group = assignment.approver_group_set(
            merchant=principal.merchant, name=name, usernames=body.validated_data["members"]
        )
        return Response(ApproverGroupSerializer(group).data)
