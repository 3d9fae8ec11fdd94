"""Every way a run can end x every state its items can be in: afterwards no Approval and no
Ticket of the finished run is left open, and money moved only for an EXECUTED call."""

from datetime import timedelta

import pytest
import time_machine
from django.utils import timezone

from approvals import plans
from approvals.models import Approval, ApprovalStatus, Refund, Ticket, TicketStatus
from runs import services, worker
from runs.models import FINISHED_STATUSES, AgentRun, RunEvent, RunStatus
from tests.approvals.plan_helpers import EXCHANGE, command

pytestmark = pytest.mark.django_db

REFUND = "I want a refund for ORD-1003 amount 20"
OPEN_TICKETS = {
    TicketStatus.WAITING_CONFIRMATION,
    TicketStatus.NEEDS_REVISION,
    TicketStatus.WAITING_REVIEW,
}


def _say(client, conversation_id, text):
    return client.post(
        f"/api/v1/conversations/{conversation_id}/messages", {"text": text}, format="json"
    )


def _in_state(item: str, api) -> tuple[str, AgentRun]:
    """A conversation of alice's whose run owns an item in the given state."""
    alice, sam = api("alice"), api("sam")
    conversation = alice.post("/api/v1/conversations", {}, format="json").json()["id"]
    _say(alice, conversation, REFUND if item.startswith("approval") else EXCHANGE)
    worker.tick()
    run = AgentRun.objects.get(conversation_id=conversation)
    if item == "approval_approved":
        approval = Approval.objects.get(run=run)
        sam.post(
            f"/api/v1/approvals/{approval.interrupt_id}/decision",
            {"decision": "approve"},
            format="json",
        )
    if item in ("plan_waiting_review", "plan_approved"):
        ticket = Ticket.objects.get(run=run)
        command(alice, ticket, "confirm")
        plans.plan_reconcile(run_id=run.pk)
    if item == "plan_approved":
        command(sam, Ticket.objects.get(run=run), "decide", decision="approve")
    return conversation, AgentRun.objects.get(pk=run.pk)


def _end(way: str, conversation: str, run: AgentRun, api) -> None:
    if way == "api_cancel":
        assert api("alice").post(f"/api/v1/runs/{run.pk}/cancel").status_code == 200
    elif way in ("/stop", "/new", "/reset"):
        assert _say(api("alice"), conversation, way).status_code == 200
    elif way == "/takeover":
        assert _say(api("sam"), conversation, way).status_code == 200
    elif way == "admin_cancel":
        services.run_cancel(run=run, reason="cancelled by admin")
    elif way == "time_runs_out":
        for hours in (1, 25, 50):
            with time_machine.travel(timezone.now() + timedelta(hours=hours)):
                services.maintain()


@pytest.mark.parametrize(
    "way", ["api_cancel", "/stop", "/new", "/reset", "/takeover", "admin_cancel", "time_runs_out"]
)
@pytest.mark.parametrize(
    "item",
    [
        "approval_pending",
        "approval_approved",
        "plan_waiting_confirmation",
        "plan_waiting_review",
        "plan_approved",
    ],
)
def test_a_run_that_ends_leaves_nothing_it_owns_open(demo, api, item, way):
    # given a run owning an item in that state
    conversation, run = _in_state(item, api)

    # when it ends that way (and workers look for work afterwards)
    _end(way, conversation, run, api)
    worker.tick()

    # then, once finished, it owns nothing open, and no money moved without an EXECUTED call
    run.refresh_from_db()
    assert run.status in FINISHED_STATUSES, run.status
    assert not Approval.objects.filter(
        run=run, status__in=[ApprovalStatus.PENDING_APPROVAL, ApprovalStatus.APPROVED_EXECUTING]
    ).exists()
    for ticket in Ticket.objects.filter(run=run):
        assert ticket.status not in OPEN_TICKETS, ticket.status
        if ticket.status == TicketStatus.APPROVED:
            assert run.status == RunStatus.COMPLETED
    executed = Approval.objects.filter(run=run, status=ApprovalStatus.EXECUTED).count()
    assert Refund.objects.filter(idempotency_key__startswith=f"agent:{run.pk}:").count() == executed
    last = RunEvent.objects.filter(run=run).order_by("-seq").first()
    assert last.type in ("run.completed", "run.failed", "run.cancelled")
