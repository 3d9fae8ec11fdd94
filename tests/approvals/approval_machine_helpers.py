"""What the approval state machine (test_approval_state_machine) checks: the invariants of
DESIGN 6.1 and 6.1.1 that must hold after every step, and the answers approval_decide must
give, in the order of its checks.
"""

import re
from decimal import Decimal

from django.db.models import Sum
from django.utils import timezone
from hypothesis.stateful import RuleBasedStateMachine, invariant

from agentportal.models import Merchant
from agentportal.principals import Principal
from approvals.gate.decision_request import DecisionRequest
from approvals.gate.policies import call_requirement
from approvals.models import (
    Approval,
    ApprovalStatus,
    ApprovalVote,
    Delivery,
    Order,
    Refund,
    args_digest,
)
from runs.models import FINISHED_STATUSES, AgentRun, RunEvent, RunStatus, ToolExecution
from runs.snapshot import TRANSITIONS, CallStatus, snapshot_parse
from runs.tools import TOOLS

# What a customer is told when money moved, with the amount that moved.
MONEY_MOVED = re.compile(r"(?:Done: a refund of|We refunded) (\d+\.\d{2})")


class ApprovalInvariants(RuleBasedStateMachine):
    """The invariants, over the runs the machine made and what it saw of them: ApprovalMachine
    (test_approval_state_machine) derives from this class and keeps that state."""

    shop: Merchant
    runs: list
    approval_seen: dict[int, str]
    stopped: dict
    run_seen: dict

    # --- invariants ----------------------------------------------------------------------

    @invariant()
    def a_finished_run_owns_nothing_open_and_a_stopped_one_moves_no_more_money(self):
        finished = AgentRun.objects.filter(pk__in=self.runs, status__in=FINISHED_STATUSES)
        assert not Approval.objects.filter(
            run__in=finished,
            status__in=[ApprovalStatus.PENDING_APPROVAL, ApprovalStatus.APPROVED_EXECUTING],
        ).exists()
        for run_id, refunds in self.stopped.items():
            paid = Refund.objects.filter(idempotency_key__startswith=f"agent:{run_id}:").count()
            assert paid == refunds

    @invariant()
    def snapshots_valid_and_agree_with_approvals(self):
        for run in AgentRun.objects.filter(pk__in=self.runs):
            if run.state_snapshot is None:
                assert not Approval.objects.filter(run=run).exists()
                assert run.status != RunStatus.WAITING_APPROVAL
                continue
            call = snapshot_parse(run.state_snapshot).pending_tool_call
            approval = Approval.objects.get(interrupt_id=call.interrupt_id)
            assert approval.run_id == run.pk
            assert approval.status == call.status, (approval.status, call.status, run.status)
            assert (run.status == RunStatus.WAITING_APPROVAL) == (
                call.status == CallStatus.PENDING_APPROVAL
            ), (run.status, call.status)
            if call.status in (CallStatus.APPROVED_EXECUTING, CallStatus.EXECUTED):
                assert call.tool_args == approval.approved_args

    @invariant()
    def approval_statuses_move_only_along_allowed_transitions(self):
        approvals = Approval.objects.filter(run_id__in=self.runs)
        for pk, status, by_policy in approvals.values_list("pk", "status", "decided_by_policy"):
            # A call the policy approves is created approved.
            before = self.approval_seen.get(
                pk,
                ApprovalStatus.APPROVED_EXECUTING if by_policy else ApprovalStatus.PENDING_APPROVAL,
            )
            assert status == before or status in TRANSITIONS.get(before, set()), (before, status)
            self.approval_seen[pk] = status

    @invariant()
    def finished_runs_stay_finished_and_timelines_stay_whole(self):
        for run in AgentRun.objects.filter(pk__in=self.runs):
            before = self.run_seen.get(run.pk)
            if before in FINISHED_STATUSES:
                assert run.status == before
            self.run_seen[run.pk] = run.status
            types = list(
                RunEvent.objects.filter(run=run).order_by("seq").values_list("type", flat=True)
            )
            assert len(types) == run.last_event_seq
            assert list(
                RunEvent.objects.filter(run=run).order_by("seq").values_list("seq", flat=True)
            ) == list(range(1, run.last_event_seq + 1))
            if run.status in FINISHED_STATUSES:
                assert (
                    types[-1]
                    == {
                        RunStatus.COMPLETED: "run.completed",
                        RunStatus.FAILED: "run.failed",
                        RunStatus.CANCELLED: "run.cancelled",
                    }[run.status]
                )

    @invariant()
    def no_call_runs_with_arguments_its_policy_did_not_see_approved(self):
        """Every approved call's arguments were approved by as many people as its policy
        version asks for those exact arguments (or by the policy alone when they are under
        its auto-approval limit), each vote naming those arguments' digest; four eyes are
        completed by a person, with one service key's vote at most."""
        approved = Approval.objects.filter(
            run_id__in=self.runs,
            status__in=[
                ApprovalStatus.APPROVED_EXECUTING,
                ApprovalStatus.EXECUTED,
                ApprovalStatus.FAILED,
            ],
        )
        for approval in approved:
            arguments = approval.approved_args
            digest = args_digest(arguments)
            assert approval.args_digest == digest
            if approval.executed_args is not None:
                assert approval.executed_args == arguments
            needs = call_requirement(
                version=approval.policy_version, arguments=arguments, now=timezone.now()
            )
            if approval.decided_by_policy:
                assert needs.auto_approve and arguments == approval.proposed_args
                continue
            votes = list(ApprovalVote.objects.filter(approval=approval, args_digest=digest))
            voters = {vote.voter for vote in votes}
            assert len(voters) == len(votes) >= needs.required_approvals >= 1
            assert approval.required_approvals == needs.required_approvals
            if needs.required_approvals > 1:
                assert sum(vote.user_id is None for vote in votes) <= 1
                assert approval.decided_by_id is not None

    @invariant()
    def refunds_are_the_successful_executions_once_per_key(self):
        approvals = Approval.objects.filter(run_id__in=self.runs)
        executed = {
            a.tool_execution_key: a for a in approvals.filter(status=ApprovalStatus.EXECUTED)
        }
        keys = list(Refund.objects.values_list("idempotency_key", flat=True))
        assert len(keys) == len(set(keys))
        assert set(keys) == set(executed)
        for refund in Refund.objects.select_related("order"):
            approved = executed[refund.idempotency_key].approved_args
            assert refund.amount == Decimal(approved["amount"])
            assert refund.order.number == approved["order_id"]
        for key, approval in executed.items():
            assert approval.executed_args == approval.approved_args
            assert ToolExecution.objects.filter(idempotency_key=key).count() == 1
        for order in Order.objects.filter(merchant=self.shop):
            paid = Refund.objects.filter(order=order).aggregate(total=Sum("amount"))["total"]
            assert order.refunded == (paid or Decimal("0.00"))
            assert order.refunded <= order.total

    @invariant()
    def nobody_is_told_that_money_moved_when_it_did_not(self):
        paid = {
            run_id: {
                f"{refund.amount:.2f}"
                for refund in Refund.objects.filter(idempotency_key__startswith=f"agent:{run_id}:")
            }
            for run_id in self.runs
        }
        for run in AgentRun.objects.filter(pk__in=self.runs):
            said = [run.result or ""]
            said += RunEvent.objects.filter(run=run, type="message.assistant").values_list(
                "data__text", flat=True
            )
            for text in said:
                assert set(MONEY_MOVED.findall(text or "")) <= paid[run.pk], (text, paid[run.pk])
        for email in Delivery.objects.filter(merchant=self.shop, event__startswith="customer."):
            claimed = set(MONEY_MOVED.findall(email.payload["body"]))
            assert claimed <= set().union(*paid.values()), email.payload["body"]


def expected_outcome(status: str, run: AgentRun, due: bool):
    """What approval_decide must answer, in the order of checks of DESIGN 6.1."""
    if status == CallStatus.EXPIRED:
        return (410, "interrupt_expired")
    if status in CallStatus.DECIDED:
        return (409, "already_decided")
    if status == CallStatus.CANCELLED or run.status in FINISHED_STATUSES:
        return (409, "run_finished")
    if run.status != RunStatus.WAITING_APPROVAL:
        return (409, "not_waiting")
    if due:
        return (410, "interrupt_expired")
    return "decided"


def expected_vote(approval: Approval, request: DecisionRequest, principal: Principal):
    """What a decision on a pending call that is not due must come to (DESIGN 6.1.1): counted
    for the arguments on the table only when its decider saw them, needing what the policy
    version asks of the arguments that would execute, from distinct people."""
    if request.decision == "reject":
        return "decided"
    table = approval.digest_on_the_table
    votes = ApprovalVote.objects.filter(approval=approval)
    if request.args_digest is not None and request.args_digest != table:
        return (409, "arguments_changed")
    if request.args_digest is None and request.decision == "approve" and votes.exists():
        return (409, "arguments_changed")
    arguments = (
        TOOLS["issue_refund"].args_model.model_validate(request.tool_args).model_dump(mode="json")
        if request.decision == "revise"
        else approval.arguments_on_the_table
    )
    required = call_requirement(
        version=approval.policy_version, arguments=arguments, now=timezone.now()
    ).required_approvals
    round_votes = votes.filter(args_digest=args_digest(arguments))
    me = f"user:{principal.user.pk}" if principal.user else f"key:{principal.api_key.pk}"
    if round_votes.filter(voter=me).exists():
        return (409, "same_approver")
    given = round_votes.count() + 1
    if principal.user is None and required > 1:
        if round_votes.filter(user__isnull=True).exists():
            return (409, "same_approver")
        if given >= required:
            return (403, "permission_denied")
    return "decided" if given >= required else "voted"
