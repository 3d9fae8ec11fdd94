"""A plan's wait and the run's deadlines: waiting does not count, and what a person decided
in time is never lost to a late task (DESIGN 5, 6.3, 9)."""

from datetime import timedelta

import time_machine
from django.contrib.auth.models import User
from django.utils import timezone

from approvals.models import Ticket, TicketStatus
from runs import services, worker
from runs.models import AgentRun, Node, RunStatus
from tests import factories
from tests.approvals.plan_helpers import EXCHANGE, command, exchange_run, reconcile, ticket_of
from tests.problems import assert_problem
from tests.runs import helpers


def test_a_pause_wins_over_a_deadline_that_passed_during_the_step(demo):
    # given: a run whose active time ran out while the agent prepared the plan
    run = factories.run_queue(
        customer=User.objects.get(username="alice"), merchant=demo, message=EXCHANGE
    )
    lease = helpers.run_claim()
    while not (
        lease.run.next_node == Node.TOOLS
        and lease.run.messages[-1]["tool_calls"][0]["function"]["name"]
        == "create_exchange_proposal"
    ):
        helpers.run_step(lease)
    past = timezone.now() - timedelta(seconds=1)
    AgentRun.objects.filter(pk=run.pk).update(deadline_at=past)
    lease.run.deadline_at = past

    # when: the step that proposes the plan commits
    paused = helpers.run_step(lease)

    # then: the run waits with its plan (waiting does not count against the deadline)
    assert paused.status == RunStatus.WAITING_USER
    assert ticket_of(run).status == TicketStatus.WAITING_CONFIRMATION


def test_a_plan_approved_in_time_resumes_though_its_reconcile_comes_after_the_deadline(demo, api):
    # given: a plan confirmed and approved before its wait's deadline, whose reconcile task
    # message was lost
    run = exchange_run(demo)
    ticket = ticket_of(run)
    command(api("alice"), ticket, "confirm")
    reconcile(run)
    assert command(api("sam"), ticket, "decide", decision="approve").status_code == 200

    # when: maintain runs only after the deadline
    with time_machine.travel(timezone.now() + timedelta(hours=24, seconds=5)):
        services.maintain()

    # then: the decision was applied, not expired: the run is back in the queue
    run.refresh_from_db()
    assert run.status == RunStatus.QUEUED
    assert "plan.approved" in list(run.events.values_list("type", flat=True))
    worker.tick()
    run.refresh_from_db()
    assert run.status == RunStatus.COMPLETED


def test_a_command_after_the_deadline_is_410_and_closes_the_plan(demo, api):
    run = exchange_run(demo)
    ticket = ticket_of(run)

    with time_machine.travel(timezone.now() + timedelta(hours=24, seconds=5)):
        late = command(api("alice"), ticket, "confirm")

    assert_problem(late, 410, "interrupt_expired")
    run.refresh_from_db()
    assert (run.status, run.error_code) == (RunStatus.FAILED, "WAIT_EXPIRED")
    assert Ticket.objects.get().status == TicketStatus.CANCELLED
    assert not Ticket.objects.get().confirmations.exists()
