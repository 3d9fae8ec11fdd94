"""Composite interrupts under random sequences: runs that pause with 1 to 4 calls, decisions
on any of them by two supervisors, the expiry sweep, cancellations and worker ticks. After
every step: a run resumes once per pause and never while one of its calls is undecided; no call
executes unless approved; no call of a finished run stays open. Each example runs in a
savepoint that is rolled back at its end.
"""

import contextlib
from datetime import timedelta

import hypothesis
import pytest
import time_machine
from django.contrib.auth.models import User
from django.db import transaction
from django.utils import timezone
from hypothesis import HealthCheck
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from agentportal.errors import DomainError
from agentportal.models import Merchant
from agentportal.principals import Principal
from approvals.gate.decision_request import DecisionRequest
from approvals.gate.services import approval_decide, approvals_expire_due
from approvals.models import Approval, ApprovalStatus, Refund
from runs import worker
from runs.models import ACTIVE_STATUSES, FINISHED_STATUSES, AgentRun, RunEvent, RunStatus
from runs.services import run_cancel
from runs.snapshot import CallStatus, snapshot_parse
from tests import factories
from tests.approvals.policy_helpers import big_order

pytestmark = pytest.mark.django_db

ORDERS = ["ORD-9001", "ORD-9002", "ORD-9003", "ORD-9004"]
OPEN = (CallStatus.PENDING_APPROVAL, CallStatus.APPROVED_EXECUTING)


def refunds_message(count: int) -> str:
    if count == 1:
        return f"I want a refund for {ORDERS[0]} amount 1"
    parts = [f"for {number} amount {index + 1}" for index, number in enumerate(ORDERS[:count])]
    return "I want a refund " + " and ".join(parts)


class CompositeMachine(RuleBasedStateMachine):
    def __init__(self, shop: Merchant, deciders: dict[str, Principal]):
        super().__init__()
        self.shop, self.deciders = shop, deciders
        self.runs: list = []
        self.alice = User.objects.get(username="alice")
        self._example = transaction.atomic()
        self._example.__enter__()

    def teardown(self) -> None:
        transaction.set_rollback(True)
        self._example.__exit__(None, None, None)

    # --- rules ---------------------------------------------------------------------------

    def room_for_a_run(self) -> bool:
        return AgentRun.objects.filter(account=self.alice, status__in=ACTIVE_STATUSES).count() < 3

    @precondition(room_for_a_run)
    @rule(count=st.integers(1, 4))
    def customer_asks_for_refunds(self, count):
        run = factories.run_queue(
            customer=self.alice, merchant=self.shop, message=refunds_message(count)
        )
        self.runs.append(run.pk)
        worker.tick()

    def pending_calls(self) -> list[Approval]:
        return list(
            Approval.objects.filter(
                run_id__in=self.runs, status=ApprovalStatus.PENDING_APPROVAL
            ).order_by("pk")
        )

    @precondition(lambda self: self.pending_calls())
    @rule(
        pick=st.integers(0, 20),
        decision=st.sampled_from(["approve", "reject", "approve"]),
        who=st.sampled_from(["sam", "sue"]),
    )
    def supervisor_decides(self, pick, decision, who):
        calls = self.pending_calls()
        approval = calls[pick % len(calls)]
        with contextlib.suppress(DomainError):
            approval_decide(
                run=approval.run,
                principal=self.deciders[who],
                request=DecisionRequest(
                    interrupt_id=approval.interrupt_id,
                    decision=decision,
                    reason="no" if decision == "reject" else "",
                ),
            )

    @precondition(lambda self: self.pending_calls())
    @rule()
    def time_passes_and_the_sweep_expires_what_is_due(self):
        with time_machine.travel(timezone.now() + timedelta(minutes=31), tick=False):
            approvals_expire_due()

    @precondition(lambda self: self.runs)
    @rule(pick=st.integers(0, 20))
    def someone_cancels_a_run(self, pick):
        run = AgentRun.objects.get(pk=self.runs[pick % len(self.runs)])
        with contextlib.suppress(DomainError):
            run_cancel(run=run)

    @precondition(
        lambda self: AgentRun.objects.filter(pk__in=self.runs, status=RunStatus.QUEUED).exists()
    )
    @rule()
    def worker_ticks(self):
        worker.tick()

    # --- invariants ----------------------------------------------------------------------

    @invariant()
    def a_run_never_goes_on_while_one_of_its_calls_is_undecided(self):
        for run in AgentRun.objects.filter(pk__in=self.runs).exclude(state_snapshot=None):
            statuses = [call.status for call in snapshot_parse(run.state_snapshot).calls]
            if run.status in (RunStatus.QUEUED, RunStatus.RUNNING):
                assert CallStatus.PENDING_APPROVAL not in statuses, (run.status, statuses)
            if run.status == RunStatus.WAITING_APPROVAL:
                assert CallStatus.PENDING_APPROVAL in statuses

    @invariant()
    def a_run_resumes_once_per_pause(self):
        for run_id in self.runs:
            types = list(
                RunEvent.objects.filter(run_id=run_id)
                .order_by("seq")
                .values_list("type", flat=True)
            )
            # A pause writes its calls' requests together; each start after the first is
            # the resume of one pause, once its last call was final.
            pauses = sum(
                1
                for index, kind in enumerate(types)
                if kind == "approval.requested"
                and (index == 0 or types[index - 1] != "approval.requested")
            )
            starts = types.count("run.started")
            assert starts <= 1 + pauses, types

    @invariant()
    def no_call_executes_unless_approved_and_each_once(self):
        executed = Approval.objects.filter(run_id__in=self.runs, status=ApprovalStatus.EXECUTED)
        for approval in executed:
            assert approval.decision in ("approve", "revise")
            assert approval.decided_by_id is not None
            assert approval.executed_args == approval.approved_args
        keys = list(Refund.objects.values_list("idempotency_key", flat=True))
        assert len(keys) == len(set(keys))
        assert set(keys) == {approval.tool_execution_key for approval in executed}

    @invariant()
    def no_call_of_a_finished_run_stays_open(self):
        for run in AgentRun.objects.filter(pk__in=self.runs, status__in=FINISHED_STATUSES):
            assert not Approval.objects.filter(
                run=run,
                status__in=[ApprovalStatus.PENDING_APPROVAL, ApprovalStatus.APPROVED_EXECUTING],
            ).exists()
            if run.state_snapshot:
                calls = snapshot_parse(run.state_snapshot).calls
                assert not [call for call in calls if call.status in OPEN]


def test_composite_state_machine_keeps_its_invariants(demo):
    for number in ORDERS:
        big_order(demo, number, total="100000.00")
    deciders = {
        name: Principal(merchant=demo, role="supervisor", user=User.objects.get(username=name))
        for name in ("sam", "sue")
    }
    hypothesis.stateful.run_state_machine_as_test(
        lambda: CompositeMachine(demo, deciders),
        settings=hypothesis.settings(
            max_examples=25,
            stateful_step_count=12,
            deadline=None,
            database=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
        ),
    )
