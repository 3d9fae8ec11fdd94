"""REST for who is on a call: assign it to a supervisor or an approver group of its shop,
unassign it, or claim it (approvals.gate.assignment). Thin: parse, call one service, render."""

from drf_spectacular.utils import extend_schema
from rest_framework.response import Response
from rest_framework.views import APIView

from agentportal.schema import ids_from, problems
from approvals.api import APPROVAL_FROM, APPROVAL_SEEN, approval_or_404, supervisor_or_403
from approvals.gate import assignment
from approvals.serializers import ApprovalSerializer, AssignRequestSerializer


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
