"""The approval state machine under random sequences of what can happen to refund runs.

A hypothesis RuleBasedStateMachine drives the services directly: decisions (approve, revise,
reject, on time or late), the expiry sweep, worker ticks, crashed workers (a claimed lease that
runs out, then `maintain`), cancellations and new refund runs. After every step the invariants
of DESIGN 6.1 must hold. Each example runs in a savepoint that is rolled back at its end.
"""

import json
from contextlib import nullcontext
from datetime import timedelta
from decimal import Decimal

import hypothesis
import pytest
import time_machine
from django.contrib.auth.models import User
from django.db import transaction
from django.db.models import Sum
from django.utils import timezone
from hypothesis import HealthCheck
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from agentportal.errors import DomainError
from agentportal.models import Merchant
from agentportal.principals import Principal
from agentportal.services import api_key_create
from approvals.models import Approval, ApprovalStatus, Order, Refund
from approvals.services import DecisionRequest, approval_decide, approvals_expire_due
from runs import extensions, nodes, services, worker
from runs.models import (
    ACTIVE_STATUSES,
    FINISHED_STATUSES,
    AgentRun,
    Node,
    RunEvent,
    RunStatus,
    ToolExecution,
)
from runs.services import LostRun
from runs.snapshot import TRANSITIONS, CallStatus, snapshot_parse
from runs.tools import TOOLS
from tests import factories
from tests.problems import refusal_problem
from tests.runs import helpers

pytestmark = pytest.mark.django_db

ORDERS = {"alice": ["ORD-1001", "ORD-1002", "ORD-1003"], "bob": ["ORD-2001", "ORD-2003"]}
AMOUNTS = ["5.00", "20.00", "45.00"]
MAX_OPEN_RUNS = 3
FIRST_REFUND = "I want a refund for ORD-1003 amount 20"


class ApprovalMachine(RuleBasedStateMachine):
    def __init__(self, shop: Merchant, principals: dict[str, Principal]):
        super().__init__()
        self.shop = shop
        self.principals = principals
        self.runs: list = []
        self.approval_seen: dict[int, str] = {}
        self.stopped: dict = {}
        self.run_seen: dict = {}
        # Everything this example writes is rolled back in teardown.
        self._example = transaction.atomic()
        self._example.__enter__()

    def teardown(self) -> None:
        transaction.set_rollback(True)
        self._example.__exit__(None, None, None)

    # --- rules ---------------------------------------------------------------------------

    @initialize()
    def first_refund_waits_for_a_decision(self):
        alice = User.objects.get(username="alice")
        run = factories.run_queue(customer=alice, merchant=self.shop, message=FIRST_REFUND)
        self.runs.append(run.pk)
        worker.tick()
        assert AgentRun.objects.get(pk=run.pk).status == RunStatus.WAITING_APPROVAL

    @rule(
        customer=st.sampled_from(sorted(ORDERS)),
        order=st.integers(0, 2),
        amount=st.sampled_from(AMOUNTS),
        then_tick=st.booleans(),
    )
    def new_refund_run(self, customer, order, amount, then_tick):
        user = User.objects.get(username=customer)
        numbers = ORDERS[customer]
        message = f"I want a refund for {numbers[order % len(numbers)]} amount {amount}"
        open_runs = AgentRun.objects.filter(account=user, status__in=ACTIVE_STATUSES).count()
        if open_runs >= MAX_OPEN_RUNS:
            with pytest.raises(DomainError) as refused:
                factories.run_queue(customer=user, merchant=self.shop, message=message)
            assert refusal_problem(refused.value)[1] == "too_many_open_runs"
            return
        run = factories.run_queue(customer=user, merchant=self.shop, message=message)
        self.runs.append(run.pk)
        if then_tick:
            worker.tick()

    def has_queued(self) -> bool:
        return AgentRun.objects.filter(pk__in=self.runs, status=RunStatus.QUEUED).exists()

    @precondition(has_queued)
    @rule()
    def worker_tick(self):
        worker.tick()
        # nothing claimable is left behind by a tick
        assert not AgentRun.objects.filter(pk__in=self.runs, status=RunStatus.QUEUED).exists()

    def has_approvals(self) -> bool:
        return Approval.objects.filter(run_id__in=self.runs).exists()

    @precondition(has_approvals)
    @rule(
        data=st.data(),
        decision=st.sampled_from(["approve", "revise", "reject"]),
        who=st.sampled_from(["sam", "sue", "service"]),
        amount=st.sampled_from(AMOUNTS),
        late=st.sampled_from([False, False, False, True]),
    )
    def decide(self, data, decision, who, amount, late):
        approvals = list(Approval.objects.filter(run_id__in=self.runs).order_by("created_at"))
        # pending calls are the interesting ones: offer them more often
        pending = [a for a in approvals if a.status == ApprovalStatus.PENDING_APPROVAL]
        approval = data.draw(st.sampled_from(pending * 3 + approvals), label="approval")
        run = AgentRun.objects.get(pk=approval.run_id)
        call = snapshot_parse(run.state_snapshot).pending_tool_call
        moment = max(call.expires_at, timezone.now()) + timedelta(minutes=1)
        due = late or timezone.now() >= call.expires_at
        request = DecisionRequest(
            interrupt_id=approval.interrupt_id,
            decision=decision,
            tool_args=(
                {**approval.proposed_args, "amount": amount, "reason": "revised"}
                if decision == "revise"
                else None
            ),
            reason="declined by the machine" if decision == "reject" else "",
        )
        expected = expected_outcome(call.status, run, due)

        with time_machine.travel(moment) if late else nullcontext():
            try:
                approval_decide(run=run, principal=self.principals[who], request=request)
                outcome = "decided"
            except DomainError as refusal:
                outcome = refusal_problem(refusal)

        assert outcome == expected, (call.status, run.status, late)
        approval.refresh_from_db()
        if outcome == "decided":
            assert approval.status == (
                ApprovalStatus.REJECTED
                if decision == "reject"
                else ApprovalStatus.APPROVED_EXECUTING
            )
            assert approval.decided_by_name == self.principals[who].name
            assert AgentRun.objects.get(pk=run.pk).status == RunStatus.QUEUED
        elif call.status == CallStatus.PENDING_APPROVAL and due:
            assert approval.status == ApprovalStatus.EXPIRED
            assert AgentRun.objects.get(pk=run.pk).status == RunStatus.QUEUED

    @rule()
    def expire(self):
        pending = set(
            Approval.objects.filter(
                run_id__in=self.runs, status=ApprovalStatus.PENDING_APPROVAL
            ).values_list("pk", flat=True)
        )
        with time_machine.travel(timezone.now() + timedelta(seconds=1800 + 60)):
            expired = approvals_expire_due()
        assert expired == len(pending)
        assert set(Approval.objects.filter(pk__in=pending).values_list("status", flat=True)) <= {
            ApprovalStatus.EXPIRED
        }

    @precondition(has_queued)
    @rule(steps=st.sampled_from([0, 1, 2, "inside-the-refund"]))
    def crash(self, steps):
        """A worker claims a run, works some steps (or dies right after the refund's own
        commit, before its step commit) and vanishes; its lease runs out; `maintain`."""
        lease = helpers.run_claim()
        if lease is None:
            return
        if steps == "inside-the-refund":
            execute_approved_refund(lease)
        else:
            run = lease.run
            for _ in range(steps):
                if run.status != RunStatus.RUNNING:
                    break
                try:
                    run = helpers.run_step(lease)
                except LostRun:
                    break
        AgentRun.objects.filter(
            pk=lease.run_id, status=RunStatus.RUNNING, lease_token=lease.token
        ).update(lease_expires_at=timezone.now() - timedelta(seconds=1))
        services.maintain()
        assert not AgentRun.objects.filter(pk=lease.run_id, status=RunStatus.RUNNING).exists()

    @precondition(lambda self: self.runs)
    @rule(data=st.data())
    def cancel(self, data):
        run = AgentRun.objects.get(pk=data.draw(st.sampled_from(self.runs), label="run"))
        waiting_on = None
        if run.status == RunStatus.WAITING_APPROVAL:
            waiting_on = snapshot_parse(run.state_snapshot).pending_tool_call.interrupt_id
        if run.is_finished:
            with pytest.raises(DomainError) as refused:
                services.run_cancel(run=run)
            assert refusal_problem(refused.value)[1] == "run_finished"
            return
        services.run_cancel(run=run)
        assert AgentRun.objects.get(pk=run.pk).status == RunStatus.CANCELLED
        if waiting_on is not None:
            assert Approval.objects.get(interrupt_id=waiting_on).status == ApprovalStatus.CANCELLED
        # After a stop answers, no side effect may be committed for the run, ever.
        self.stopped[run.pk] = Refund.objects.filter(
            idempotency_key__startswith=f"agent:{run.pk}:"
        ).count()

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
        for pk, status in Approval.objects.filter(run_id__in=self.runs).values_list("pk", "status"):
            before = self.approval_seen.get(pk, ApprovalStatus.PENDING_APPROVAL)
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
    def refunds_only_for_executed_approvals_and_once_per_key(self):
        approvals = Approval.objects.filter(run_id__in=self.runs)
        executed = {
            a.tool_execution_key: a for a in approvals.filter(status=ApprovalStatus.EXECUTED)
        }
        keys = list(Refund.objects.values_list("idempotency_key", flat=True))
        assert len(keys) == len(set(keys))
        assert len(keys) <= len(executed)
        assert set(keys) <= set(executed)
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


def execute_approved_refund(lease) -> None:
    """What the tools node does for an approved refund, without the step commit after it."""
    run = lease.run
    if run.next_node != Node.TOOLS or not run.state_snapshot:
        return
    if snapshot_parse(run.state_snapshot).pending_tool_call.status != CallStatus.APPROVED_EXECUTING:
        return
    for index, call in enumerate(run.messages[-1].get("tool_calls") or []):
        if call["function"]["name"] != "issue_refund":
            continue
        tool = TOOLS["issue_refund"]
        arguments = tool.args_model.model_validate(json.loads(call["function"]["arguments"]))
        outcome = extensions.interrupt_for(tool.policy).pause(
            run=run, lease=lease, tool=tool, args=arguments, key=nodes.tool_key(run, index)
        )
        assert isinstance(outcome, worker.ToolOutcome) and outcome.recorded


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


def test_approval_state_machine_keeps_its_invariants(demo):
    key, _ = api_key_create(merchant=demo, role="service")
    principals = {
        "sam": Principal(merchant=demo, role="supervisor", user=User.objects.get(username="sam")),
        "sue": Principal(merchant=demo, role="supervisor", user=User.objects.get(username="sue")),
        "service": Principal(merchant=demo, role="service", api_key=key),
    }
    run_state_machine_as_test(
        lambda: ApprovalMachine(demo, principals),
        settings=hypothesis.settings(
            max_examples=25,
            stateful_step_count=12,
            deadline=None,
            database=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
        ),
    )
