"""REST endpoints for tool-call decisions, approval policies and exchange plans. Thin: parse,
call one service, render."""

from collections.abc import Callable

from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_view
from rest_framework.response import Response
from rest_framework.views import APIView

from agentportal.problems import Problem
from agentportal.schema import ids_from, link, problems
from approvals import plans, selectors
from approvals.gate import attention, services
from approvals.gate.decision_request import DecisionRequest
from approvals.gate.policies import PolicyRules, policy_tool_names, policy_update
from approvals.models import Approval, ApprovalStatus, Ticket, TicketStatus
from approvals.plan_serializers import (
    TicketConfirmSerializer,
    TicketDecideSerializer,
    TicketPageSerializer,
    TicketReviseSerializer,
    TicketSerializer,
)
from approvals.request_shapes import decision_bodies, ticket_decide_bodies, ticket_revise_bodies
from approvals.serializers import (
    ApprovalPageSerializer,
    ApprovalSerializer,
    DecisionOnApprovalSerializer,
    DecisionResultSerializer,
    DecisionSerializer,
    PolicyListSerializer,
    PolicyRulesSerializer,
    PolicySerializer,
)
from runs.api import cursor_parameter, filtered_page, principal_of, run_or_404
from runs.selectors import run_for
from runs.serializers import RunSerializer

# What deciding a pending call can meet besides a bad body: the run or the call moved on.
DECISION_PROBLEMS = problems(
    "interrupt_mismatch",
    "already_decided",
    "same_approver",
    "arguments_changed",
    "not_waiting",
    "run_finished",
    "interrupt_expired",
    "snapshot_invalid",
    "snapshot_version_unsupported",
)
# A command on a plan: it moved on since the version the caller saw, or is not at that step.
TICKET_PROBLEMS = problems("version_conflict", "invalid_transition", "interrupt_expired")

# Where the ids a path takes come from, for the schema's links (`agentportal.schema.link`).
APPROVAL_FROM = (
    link("approvals_list", 200, interrupt_id="$response.body#/results/0/interrupt_id"),
    link("runs_resume", 200, interrupt_id="$response.body#/approval/interrupt_id"),
)
APPROVAL_SEEN = link("approvals_retrieve", 200, interrupt_id="$response.body#/interrupt_id")
RESUME_FROM = ids_from(
    link(
        "approvals_list",
        200,
        run_id="$response.body#/results/0/run_id",
        body={"interrupt_id": "$response.body#/results/0/interrupt_id"},
    ),
    link(
        "approvals_retrieve",
        200,
        run_id="$response.body#/run_id",
        body={"interrupt_id": "$response.body#/interrupt_id"},
    ),
)
TICKET_FROM = ids_from(
    link("tickets_list", 200, ticket_id="$response.body#/results/0/id"),
    *(
        link(f"tickets_{command}", 200, ticket_id="$response.body#/id")
        for command in ("confirm", "revise", "decide")
    ),
)
# A command names the proposal version it saw.
TICKET_COMMAND_FROM = ids_from(
    link(
        "tickets_list",
        200,
        ticket_id="$response.body#/results/0/id",
        body={"proposal_version": "$response.body#/results/0/proposal/version"},
    ),
    link(
        "tickets_retrieve",
        200,
        ticket_id="$response.body#/id",
        body={"proposal_version": "$response.body#/proposal/version"},
    ),
)
POLICY_FROM = (link("policies_list", 200, tool_name="$response.body#/results/0/tool_name"),)


def supervisor_or_403(request):
    principal = principal_of(request)
    if not (principal.can_supervise or principal.is_service):
        raise Problem(403, "permission_denied", "Only supervisors and service keys do this.")
    return principal


def approval_or_404(request, interrupt_id):
    """An approval of a run the caller can see: another customer's is not found."""
    principal = principal_of(request)
    approval = selectors.approval_for(principal, interrupt_id)
    if approval is None or run_for(principal, approval.run_id) is None:
        raise Problem(404, "not_found", "No such approval.")
    return approval


def _decide(request, run, serializer_class, interrupt_id=None):
    principal = supervisor_or_403(request)
    serializer = serializer_class(data=request.data)
    serializer.is_valid(raise_exception=True)
    data = serializer.validated_data
    if interrupt_id is not None and data.get("interrupt_id", interrupt_id) != interrupt_id:
        raise Problem(409, "interrupt_mismatch", "The body names another interrupt.")
    run, approval = services.approval_decide(
        run=run,
        principal=principal,
        request=DecisionRequest(
            interrupt_id=interrupt_id or data["interrupt_id"],
            decision=data["decision"],
            tool_args=data.get("tool_args"),
            reason=data.get("reason", ""),
            args_digest=data.get("args_digest"),
        ),
    )
    return Response({"run": RunSerializer(run).data, "approval": ApprovalSerializer(approval).data})


class RunResumeView(APIView):
    @extend_schema(
        operation_id="runs_resume",
        request=decision_bodies(name="Decision", interrupt_id_required=True),
        responses=DecisionResultSerializer,
        extensions=DECISION_PROBLEMS | RESUME_FROM,
    )
    def post(self, request, run_id):
        return _decide(request, run_or_404(request, run_id), DecisionSerializer)


class ApprovalsView(APIView):
    @extend_schema(
        operation_id="approvals_list",
        parameters=[
            OpenApiParameter("status", str, enum=list(ApprovalStatus.values)),
            OpenApiParameter("tool", str),
            cursor_parameter(Approval),
        ],
        responses=ApprovalPageSerializer,
    )
    def get(self, request):
        approvals = selectors.approvals_visible_to(supervisor_or_403(request))
        page, next_cursor = filtered_page(
            request, approvals, statuses=ApprovalStatus.values, tool="tool_name"
        )
        return Response({"results": ApprovalSerializer(page, many=True).data, "next": next_cursor})


class ApprovalDetailView(APIView):
    @extend_schema(
        operation_id="approvals_retrieve",
        responses=ApprovalSerializer,
        extensions=ids_from(
            *APPROVAL_FROM,
            link("approvals_decide", 200, interrupt_id="$response.body#/approval/interrupt_id"),
        ),
    )
    def get(self, request, interrupt_id):
        approval = approval_or_404(request, interrupt_id)
        principal = supervisor_or_403(request)
        if principal.can_supervise:
            attention.approval_seen_record(approval=approval, user=principal.user)
        return Response(ApprovalSerializer(approval).data)


class ApprovalDecisionView(APIView):
    @extend_schema(
        operation_id="approvals_decide",
        request=decision_bodies(name="DecisionOnApproval", interrupt_id_required=False),
        responses=DecisionResultSerializer,
        extensions=DECISION_PROBLEMS | ids_from(*APPROVAL_FROM, APPROVAL_SEEN),
    )
    def post(self, request, interrupt_id):
        approval = approval_or_404(request, interrupt_id)
        return _decide(
            request, approval.run, DecisionOnApprovalSerializer, interrupt_id=interrupt_id
        )


# --- approval policies -----------------------------------------------------------------------

# (The URLs are loaded once the apps are ready, so the tools are registered by then.)
TOOL_NAME = OpenApiParameter(
    "tool_name",
    str,
    OpenApiParameter.PATH,
    enum=policy_tool_names(),
    description="A tool whose calls wait for approval, such as `issue_refund`.",
)


def policy_editor_or_403(request):
    """A shop's rules are its operators' and its integrations' to read and set; supervisors
    decide the calls under them, customers never see them. Checked before anything is looked
    up, so the answer says nothing about which policies exist."""
    principal = principal_of(request)
    if not (principal.is_operator or principal.is_service):
        raise Problem(
            403, "permission_denied", "Only the shop's operators and service keys do this."
        )
    return principal


class PoliciesView(APIView):
    @extend_schema(operation_id="policies_list", responses=PolicyListSerializer)
    def get(self, request):
        principal = policy_editor_or_403(request)
        policies = selectors.policies_of(merchant=principal.merchant)
        return Response({"results": PolicySerializer(policies, many=True).data})


class PolicyDetailView(APIView):
    @extend_schema(
        operation_id="policies_retrieve",
        parameters=[TOOL_NAME],
        responses=PolicySerializer,
        extensions=ids_from(
            *POLICY_FROM, link("policies_update", 200, tool_name="$response.body#/tool_name")
        ),
    )
    def get(self, request, tool_name):
        principal = policy_editor_or_403(request)
        policy = selectors.policy_of(merchant=principal.merchant, tool_name=tool_name)
        if policy is None:
            raise Problem(404, "not_found", "This shop has no policy for this tool.")
        return Response(PolicySerializer(policy).data)

    @extend_schema(
        operation_id="policies_update",
        parameters=[TOOL_NAME],
        request=PolicyRulesSerializer,
        responses=PolicySerializer,
        extensions=ids_from(
            *POLICY_FROM, link("policies_retrieve", 200, tool_name="$response.body#/tool_name")
        ),
    )
    def put(self, request, tool_name):
        principal = policy_editor_or_403(request)
        serializer = PolicyRulesSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        policy = policy_update(
            merchant=principal.merchant,
            tool_name=tool_name,
            rules=PolicyRules(**serializer.validated_data),
            user=principal.user,
        )
        return Response(PolicySerializer(policy).data)


# --- tickets (exchange plans) -----------------------------------------------------------------


def ticket_or_404(request, ticket_id):
    ticket = selectors.ticket_for(principal_of(request), ticket_id)
    if ticket is None:
        raise Problem(404, "not_found", "No such ticket.")
    return ticket


def _ticket_response(request, ticket_id) -> Response:
    ticket = ticket_or_404(request, ticket_id)
    return Response(TicketSerializer(ticket, context={"principal": principal_of(request)}).data)


class TicketsView(APIView):
    @extend_schema(
        operation_id="tickets_list",
        parameters=[
            OpenApiParameter("status", str, enum=list(TicketStatus.values)),
            cursor_parameter(Ticket),
        ],
        responses=TicketPageSerializer,
    )
    def get(self, request):
        tickets = selectors.tickets_visible_to(principal_of(request))
        page, next_cursor = filtered_page(request, tickets, statuses=TicketStatus.values)
        context = {"principal": principal_of(request)}
        return Response(
            {
                "results": TicketSerializer(page, many=True, context=context).data,
                "next": next_cursor,
            }
        )


class TicketDetailView(APIView):
    @extend_schema(
        operation_id="tickets_retrieve", responses=TicketSerializer, extensions=TICKET_FROM
    )
    def get(self, request, ticket_id):
        return _ticket_response(request, ticket_id)


class _TicketCommandView(APIView):
    """A command on a ticket, checked in the API's order: not visible 404, a role that may
    not 403, a bad body 400; then the one service that decides."""

    serializer_class: type
    command: Callable[..., object]

    def role_check(self, ticket, principal) -> None:
        """Nothing here: the service tells the roles apart (a customer's revision or a
        supervisor's)."""

    def post(self, request, ticket_id):
        principal = principal_of(request)
        ticket = ticket_or_404(request, ticket_id)
        self.role_check(ticket, principal)
        serializer = self.serializer_class(data=request.data)
        serializer.is_valid(raise_exception=True)
        type(self).command(ticket=ticket, principal=principal, **serializer.validated_data)
        return _ticket_response(request, ticket_id)


@extend_schema_view(
    post=extend_schema(
        operation_id="tickets_confirm",
        request=TicketConfirmSerializer,
        responses=TicketSerializer,
        extensions=TICKET_PROBLEMS | TICKET_COMMAND_FROM,
    )
)
class TicketConfirmView(_TicketCommandView):
    serializer_class = TicketConfirmSerializer
    command = plans.ticket_confirm

    def role_check(self, ticket, principal) -> None:
        plans.ticket_owner_check(ticket, principal, "confirm")


@extend_schema_view(
    post=extend_schema(
        operation_id="tickets_revise",
        request=ticket_revise_bodies(),
        responses=TicketSerializer,
        extensions=TICKET_PROBLEMS | TICKET_COMMAND_FROM,
    )
)
class TicketReviseView(_TicketCommandView):
    serializer_class = TicketReviseSerializer
    command = plans.ticket_revise


@extend_schema_view(
    post=extend_schema(
        operation_id="tickets_decide",
        request=ticket_decide_bodies(),
        responses=TicketSerializer,
        extensions=TICKET_PROBLEMS | TICKET_COMMAND_FROM,
    )
)
class TicketDecideView(_TicketCommandView):
    serializer_class = TicketDecideSerializer
    command = plans.ticket_decide

    def role_check(self, ticket, principal) -> None:
        plans.plan_supervisor_check(principal, "decide")
