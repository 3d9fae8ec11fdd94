"""The approval state machine under random sequences of what can happen to refund runs.

A hypothesis RuleBasedStateMachine drives the services directly: decisions (approve, revise
to random amounts, reject, on time or late, naming the digest on the table, none or a stale
one) by supervisors and two service keys, the shop's policy (auto-approval and four-eyes
thresholds, changed mid-way), the expiry sweep, worker ticks, crashed workers (a claimed lease
that runs out, then `maintain`), cancellations and new refund runs. After every step the
invariants of DESIGN 6.1 and 6.1.1 must hold. Each example runs in a savepoint that is rolled
back at its end. AGENTPORTAL_MACHINE_EXAMPLES sets how many examples (200 by default).
"""

import os
from contextlib import nullcontext
from datetime import timedelta

import hypothesis
import pytest
import time_machine
from django.contrib.auth.models import User
from django.db import transaction
from django.utils import timezone
from hypothesis import HealthCheck
from hypothesis import strategies as st
from hypothesis.stateful import initialize, precondition, rule, run_state_machine_as_test

from agentportal.errors import DomainError
from agentportal.models import Merchant
from agentportal.principals import Principal
from agentportal.services import api_key_create
from approvals.gate.decision_request import DecisionRequest
from approvals.gate.services import approval_decide, approvals_expire_due
from approvals.models import Approval, ApprovalStatus, ApprovalVote, Refund, args_digest
from runs import services, worker
from runs.models import ACTIVE_STATUSES, AgentRun, RunStatus
from runs.services import LostRun
from runs.snapshot import CallStatus, snapshot_parse
from tests import factories
from tests.approvals.approval_machine_helpers import (
    ApprovalInvariants,
    expected_outcome,
    expected_vote,
)
from tests.approvals.policy_helpers import policy_set
from tests.approvals.refund_helpers import execute_approved_refund
from tests.problems import refusal_problem
from tests.runs import helpers

pytestmark = pytest.mark.django_db

ORDERS = {"alice": ["ORD-1001", "ORD-1002", "ORD-1003"], "bob": ["ORD-2001", "ORD-2003"]}
AMOUNTS = ["5.00", "20.00", "45.00", "60.00"]
# A revision may also ask for more than any order holds: the refund tool refuses it.
REVISED_AMOUNTS = [*AMOUNTS, "4000.00"]
# The shop's policy: (auto_approve_up_to, two_approvers_from), or none.
POLICIES = [None, (None, "40.00"), ("10.00", "40.00"), ("5.00", None), (None, "20.00")]
MAX_OPEN_RUNS = 3
FIRST_REFUND = "I want a refund for ORD-1003 amount 20"


class ApprovalMachine(ApprovalInvariants):
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

    @initialize(policy=st.sampled_from(POLICIES))
    def first_refund_under_the_shops_policy(self, policy):
        self.policy_set(policy)
        alice = User.objects.get(username="alice")
        run = factories.run_queue(customer=alice, merchant=self.shop, message=FIRST_REFUND)
        self.runs.append(run.pk)
        worker.tick()
        approval = Approval.objects.get(run=run)
        waits = not approval.decided_by_policy
        assert AgentRun.objects.get(pk=run.pk).status == (
            RunStatus.WAITING_APPROVAL if waits else RunStatus.COMPLETED
        )

    def policy_set(self, policy) -> None:
        if policy is not None:
            auto, four_eyes = policy
            policy_set(self.shop, auto_approve_up_to=auto, two_approvers_from=four_eyes)

    @rule(policy=st.sampled_from(POLICIES[1:]))
    def policy_change(self, policy):
        """A new version: calls already asked for keep the version they were created under."""
        self.policy_set(policy)

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
        who=st.sampled_from(["sam", "sue", "service", "service-2"]),
        amount=st.sampled_from(REVISED_AMOUNTS),
        seen=st.sampled_from(["current", "current", "none", "stale"]),
        late=st.sampled_from([False, False, False, True]),
    )
    def decide(self, data, decision, who, amount, seen, late):
        approvals = list(Approval.objects.filter(run_id__in=self.runs).order_by("created_at"))
        # pending calls are the interesting ones: offer them more often
        pending = [a for a in approvals if a.status == ApprovalStatus.PENDING_APPROVAL]
        approval = data.draw(st.sampled_from(pending * 3 + approvals), label="approval")
        run = AgentRun.objects.get(pk=approval.run_id)
        call = snapshot_parse(run.state_snapshot).pending_tool_call
        moment = max(call.expires_at, timezone.now()) + timedelta(minutes=1)
        due = late or timezone.now() >= call.expires_at
        named = {
            "current": approval.digest_on_the_table,
            "none": None,
            # what was on the table before a colleague's revision, or never on it
            "stale": args_digest({**approval.arguments_on_the_table, "amount": "0.01"}),
        }[seen]
        request = DecisionRequest(
            interrupt_id=approval.interrupt_id,
            decision=decision,
            tool_args=(
                {**approval.proposed_args, "amount": amount, "reason": "revised"}
                if decision == "revise"
                else None
            ),
            reason="declined by the machine" if decision == "reject" else "",
            args_digest=named,
        )
        expected = expected_outcome(call.status, run, due)
        if expected == "decided":
            expected = expected_vote(approval, request, self.principals[who])
        votes_before = ApprovalVote.objects.filter(approval=approval).count()

        with time_machine.travel(moment) if late else nullcontext():
            try:
                approval_decide(run=run, principal=self.principals[who], request=request)
                outcome = "decided"
            except DomainError as refusal:
                outcome = refusal_problem(refusal)
            if outcome == "decided" and expected == "voted":
                outcome = "voted"

        assert outcome == expected, (call.status, run.status, late, seen, who)
        approval.refresh_from_db()
        votes = ApprovalVote.objects.filter(approval=approval)
        if outcome in ("decided", "voted") and decision != "reject":
            # one vote more, for exactly the arguments its decider saw or wrote
            assert votes.count() == votes_before + 1
            vote = votes.latest("id")
            wrote = request.tool_args if decision == "revise" else None
            assert vote.args_digest == (args_digest(wrote) if wrote else named or vote.args_digest)
        else:
            assert votes.count() == votes_before
        if outcome == "decided":
            assert approval.status == (
                ApprovalStatus.REJECTED
                if decision == "reject"
                else ApprovalStatus.APPROVED_EXECUTING
            )
            assert approval.decided_by_name == self.principals[who].name
            assert AgentRun.objects.get(pk=run.pk).status == RunStatus.QUEUED
        elif outcome == "voted":
            assert approval.status == ApprovalStatus.PENDING_APPROVAL
            assert AgentRun.objects.get(pk=run.pk).status == RunStatus.WAITING_APPROVAL
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


def test_approval_state_machine_keeps_its_invariants(demo):
    principals = {
        "sam": Principal(merchant=demo, role="supervisor", user=User.objects.get(username="sam")),
        "sue": Principal(merchant=demo, role="supervisor", user=User.objects.get(username="sue")),
    }
    for name in ("service", "service-2"):
        key, _ = api_key_create(merchant=demo, role="service")
        principals[name] = Principal(merchant=demo, role="service", api_key=key)
    run_state_machine_as_test(
        lambda: ApprovalMachine(demo, principals),
        settings=hypothesis.settings(
            max_examples=int(os.environ.get("AGENTPORTAL_MACHINE_EXAMPLES", "200")),
            stateful_step_count=12,
            deadline=None,
            database=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
        ),
    )
