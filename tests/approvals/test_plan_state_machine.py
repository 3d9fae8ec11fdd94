"""The plan state machine under random sequences of commands, reconciles, ticks and cancels.

A hypothesis RuleBasedStateMachine drives the services directly: the customer confirms or asks
for changes (with the current or a stale version), supervisors revise or decide, reconcile is
delivered any number of times, workers tick, the run is cancelled. After every step the
invariants of DESIGN 6.3 must hold. Each example runs in a savepoint rolled back at its end.
"""

import hypothesis
import pytest
from django.contrib.auth.models import User
from django.db import transaction
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
from approvals import plans
from approvals.models import (
    TICKET_OPEN_STATUSES,
    BusinessEvent,
    BusinessEventKind,
    Proposal,
    Ticket,
    TicketStatus,
)
from runs import services, worker
from runs.models import AgentRun, RunEvent, RunInput, RunStatus
from tests import factories
from tests.approvals.plan_helpers import EXCHANGE
from tests.problems import refusal_problem

pytestmark = pytest.mark.django_db

# Every status change a ticket may make (DESIGN 6.3); anything else is a defect.
TICKET_MOVES = {
    TicketStatus.WAITING_CONFIRMATION: {
        TicketStatus.WAITING_REVIEW,
        TicketStatus.NEEDS_REVISION,
        TicketStatus.WAITING_CONFIRMATION,  # a supervisor's new version
        TicketStatus.CANCELLED,
    },
    TicketStatus.NEEDS_REVISION: {TicketStatus.WAITING_CONFIRMATION, TicketStatus.CANCELLED},
    TicketStatus.WAITING_REVIEW: {
        TicketStatus.APPROVED,
        TicketStatus.REJECTED,
        TicketStatus.WAITING_CONFIRMATION,
        TicketStatus.CANCELLED,
    },
    # Approved, but its run ended before it took the approval in: cancelled with the run.
    TicketStatus.APPROVED: {TicketStatus.CANCELLED},
}
EXPECTED_REFUSALS = {"version_conflict", "invalid_transition"}


class PlanMachine(RuleBasedStateMachine):
    def __init__(self, shop: Merchant, principals: dict[str, Principal]):
        super().__init__()
        self.shop = shop
        self.principals = principals
        self._example = transaction.atomic()
        self._example.__enter__()

    def teardown(self) -> None:
        transaction.set_rollback(True)
        self._example.__exit__(None, None, None)

    @initialize()
    def a_plan_waits_for_the_customer(self):
        self.run = factories.run_queue(
            customer=self.principals["alice"].user, merchant=self.shop, message=EXCHANGE
        )
        worker.tick()
        self.ticket = Ticket.objects.get(run=self.run)
        self.seen_status = self.ticket.status

    def _command(self, action, **kwargs) -> None:
        ticket = Ticket.objects.get(pk=self.ticket.pk)
        try:
            action(ticket=ticket, **kwargs)
        except DomainError as refusal:
            code = refusal_problem(refusal)[1]
            assert code in EXPECTED_REFUSALS, code

    def _version(self, stale: bool) -> int:
        current = Ticket.objects.get(pk=self.ticket.pk).version
        return current - 1 if stale and current > 1 else current

    # --- rules ---------------------------------------------------------------------------

    @rule(stale=st.booleans())
    def customer_confirms(self, stale):
        self._command(
            plans.ticket_confirm,
            principal=self.principals["alice"],
            proposal_version=self._version(stale),
        )

    @rule(stale=st.booleans())
    def customer_asks_for_changes(self, stale):
        self._command(
            plans.ticket_revise,
            principal=self.principals["alice"],
            proposal_version=self._version(stale),
            note="another size",
        )

    @rule(size=st.sampled_from(["41", "43"]), who=st.sampled_from(["sam", "sue"]))
    def supervisor_revises(self, size, who):
        self._command(
            plans.ticket_revise,
            principal=self.principals[who],
            proposal_version=self._version(False),
            note=f"size {size}",
            items=[{"sku": "SHOE-TRAIL-42", "new_sku": f"SHOE-TRAIL-{size}", "quantity": 1}],
        )

    @rule(decision=st.sampled_from(["approve", "reject"]), stale=st.booleans())
    def supervisor_decides(self, decision, stale):
        self._command(
            plans.ticket_decide,
            principal=self.principals["sam"],
            proposal_version=self._version(stale),
            decision=decision,
            note="checked",
        )

    @rule(times=st.integers(min_value=1, max_value=2))
    def reconcile_is_delivered(self, times):
        for _ in range(times):
            plans.plan_reconcile(run_id=self.run.pk)

    @rule()
    def a_worker_ticks(self):
        worker.tick()

    @precondition(lambda self: not AgentRun.objects.get(pk=self.run.pk).is_finished)
    @rule()
    def the_run_is_cancelled(self):
        services.run_cancel(run=AgentRun.objects.get(pk=self.run.pk))

    # --- invariants ----------------------------------------------------------------------

    @invariant()
    def a_run_that_ended_left_its_plan_closed_and_said_so(self):
        run = AgentRun.objects.get(pk=self.run.pk)
        ticket = Ticket.objects.get(pk=self.ticket.pk)
        if run.status not in (RunStatus.FAILED, RunStatus.CANCELLED):
            return
        assert ticket.status not in (*TICKET_OPEN_STATUSES, TicketStatus.APPROVED)
        if ticket.status == TicketStatus.CANCELLED:
            assert ticket.events.filter(kind=BusinessEventKind.CANCELLED).count() == 1
            assert RunEvent.objects.filter(run=run, type="plan.cancelled").count() == 1

    @invariant()
    def the_ticket_moves_only_along_the_state_machine(self):
        status = Ticket.objects.get(pk=self.ticket.pk).status
        if status != self.seen_status:
            assert status in TICKET_MOVES.get(self.seen_status, set()), (self.seen_status, status)
            self.seen_status = status

    @invariant()
    def every_version_is_kept(self):
        ticket = Ticket.objects.get(pk=self.ticket.pk)
        versions = list(Proposal.objects.filter(ticket=ticket).values_list("version", flat=True))
        assert versions == list(range(1, ticket.version + 1))

    @invariant()
    def a_reconciled_run_waits_for_what_its_ticket_waits_for(self):
        run = AgentRun.objects.get(pk=self.run.pk)
        ticket = Ticket.objects.get(pk=self.ticket.pk)
        last_event = BusinessEvent.objects.filter(run=run).order_by("-pk").first()
        if run.domain_event_cursor != last_event.pk or run.is_finished:
            return
        expected = {
            TicketStatus.WAITING_CONFIRMATION: (RunStatus.WAITING_USER, "confirmation"),
            TicketStatus.NEEDS_REVISION: (RunStatus.WAITING_APPROVAL, "plan_review"),
            TicketStatus.WAITING_REVIEW: (RunStatus.WAITING_APPROVAL, "plan_review"),
        }.get(ticket.status)
        if expected is None:  # decided: the run was resumed
            assert run.status in (RunStatus.QUEUED, RunStatus.RUNNING)
        else:
            assert (run.status, run.wait_state["kind"]) == expected
            assert run.wait_state["payload"]["proposal_version"] == ticket.version

    @invariant()
    def the_run_resumes_at_most_once_and_only_after_a_decision(self):
        run = AgentRun.objects.get(pk=self.run.pk)
        ticket = Ticket.objects.get(pk=self.ticket.pk)
        resumed = RunEvent.objects.filter(run=run, type__in=["plan.approved", "plan.rejected"])
        assert resumed.count() <= 1
        assert (
            RunInput.objects.filter(run=run, payload__event__in=["approved", "rejected"]).count()
            == resumed.count()
        )
        if run.status == RunStatus.COMPLETED:
            assert ticket.status in (TicketStatus.APPROVED, TicketStatus.REJECTED)
            assert resumed.count() == 1
        if run.status == RunStatus.CANCELLED:
            assert ticket.status not in TICKET_OPEN_STATUSES


def test_plan_state_machine_keeps_its_invariants(demo):
    users = {name: User.objects.get(username=name) for name in ("alice", "sam", "sue")}
    principals = {
        "alice": Principal(merchant=demo, role="customer", user=users["alice"]),
        "sam": Principal(merchant=demo, role="supervisor", user=users["sam"]),
        "sue": Principal(merchant=demo, role="supervisor", user=users["sue"]),
    }
    run_state_machine_as_test(
        lambda: PlanMachine(demo, principals),
        settings=hypothesis.settings(
            max_examples=25,
            stateful_step_count=12,
            deadline=None,
            database=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
        ),
    )
