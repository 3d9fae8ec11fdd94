"""Every way a run can end x every state its items can be in: afterwards no Approval and no
Ticket of the finished run is left open, and money moved only for an EXECUTED call. And every
outcome of a call: the customer is told of a refund only when the ledger has it."""

from datetime import timedelta

import pytest
import time_machine
from django.utils import timezone

from approvals import plans, tasks
from approvals.gate import services as approval_services
from approvals.models import Approval, ApprovalStatus, Refund, Ticket, TicketStatus
from runs import selectors, services, worker
from runs.models import FINISHED_STATUSES, AgentRun, RunEvent, RunStatus, ToolExecution, ToolStatus
from tests.approvals.plan_helpers import EXCHANGE, command
from tests.pages import signed_in
from tests.runs.conversation_helpers import say
from tests.runs.helpers import run_claim, run_step

pytestmark = pytest.mark.django_db

REFUND = "I want a refund for ORD-1003 amount 20"
# More than ORD-1003's 59.00: the refund tool refuses it when it is carried out.
TOO_MUCH = "1000.00"
# What only a refund that was paid may say to its customer.
PAID_WORDS = ("has been issued", "We refunded", "was carried out")
OPEN_TICKETS = {
    TicketStatus.WAITING_CONFIRMATION,
    TicketStatus.NEEDS_REVISION,
    TicketStatus.WAITING_REVIEW,
}


def _in_state(item: str, api) -> tuple[str, AgentRun]:
    """A conversation of alice's whose run owns an item in the given state."""
    alice, sam = api("alice"), api("sam")
    conversation = alice.post("/api/v1/conversations", {}, format="json").json()["id"]
    say(alice, conversation, REFUND if item.startswith("approval") else EXCHANGE)
    worker.tick()
    run = AgentRun.objects.get(conversation_id=conversation)
    if item == "approval_approved":
        _decide(sam, Approval.objects.get(run=run), "approve")
    if item == "approval_refused":
        _decide(sam, Approval.objects.get(run=run), "revise", amount=TOO_MUCH)
        # A worker carries it out, the tool refuses, and the run goes on to the model.
        run_step(run_claim())
        assert Approval.objects.get(run=run).status == ApprovalStatus.FAILED
    if item in ("plan_waiting_review", "plan_approved"):
        ticket = Ticket.objects.get(run=run)
        command(alice, ticket, "confirm")
        plans.plan_reconcile(run_id=run.pk)
    if item == "plan_approved":
        command(sam, Ticket.objects.get(run=run), "decide", decision="approve")
    return conversation, AgentRun.objects.get(pk=run.pk)


def _decide(client, approval: Approval, decision: str, *, amount: str | None = None, **body):
    if amount is not None:
        body["tool_args"] = {**approval.proposed_args, "amount": amount}
    response = client.post(
        f"/api/v1/approvals/{approval.interrupt_id}/decision",
        {"decision": decision, **body},
        format="json",
    )
    assert response.status_code == 200, response.content


def _end(way: str, conversation: str, run: AgentRun, api) -> None:
    if way == "api_cancel":
        assert api("alice").post(f"/api/v1/runs/{run.pk}/cancel").status_code == 200
    elif way in ("/stop", "/new", "/reset"):
        assert say(api("alice"), conversation, way).status_code == 200
    elif way == "/takeover":
        assert say(api("sam"), conversation, way).status_code == 200
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
        "approval_refused",
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
    for refused in Approval.objects.filter(run=run, status=ApprovalStatus.FAILED):
        execution = ToolExecution.objects.get(idempotency_key=refused.tool_execution_key)
        assert execution.status == ToolStatus.FAILED
    if item == "approval_refused":
        assert Approval.objects.get(run=run).status == ApprovalStatus.FAILED
    if not executed:
        told = " ".join(selectors.run_end_notices([run.pk]).get(run.pk, []))
        assert not [words for words in PAID_WORDS if words in told], told
    last = RunEvent.objects.filter(run=run).order_by("-seq").first()
    assert last.type in ("run.completed", "run.failed", "run.cancelled")


@pytest.mark.parametrize(
    ("outcome", "status", "paid"),
    [
        ("approved", ApprovalStatus.EXECUTED, "20.00"),
        ("revised", ApprovalStatus.EXECUTED, "15.00"),
        ("refused", ApprovalStatus.FAILED, None),
        ("rejected", ApprovalStatus.REJECTED, None),
        ("expired", ApprovalStatus.EXPIRED, None),
    ],
)
def test_every_outcome_of_a_call_is_told_as_it_happened(
    demo, api, mailoutbox, django_capture_on_commit_callbacks, outcome, status, paid
):
    # given alice's refund of 20.00 waits for a decision
    _, run = _in_state("approval_pending", api)
    approval = Approval.objects.get(run=run)
    sam = api("sam")

    # when it is decided that way and the run goes on to its answer
    with django_capture_on_commit_callbacks(execute=True):
        if outcome == "approved":
            _decide(sam, approval, "approve")
        elif outcome in ("revised", "refused"):
            amount = "15.00" if outcome == "revised" else TOO_MUCH
            _decide(sam, approval, "revise", amount=amount)
        elif outcome == "rejected":
            _decide(sam, approval, "reject", reason="bought in a sale")
        if outcome == "expired":
            with time_machine.travel(approval.expires_at + timedelta(seconds=1)):
                approval_services.approvals_expire_due()
                worker.tick()
        else:
            worker.tick()
    tasks.deliver()

    # then the call ended as it happened, the ledger agrees, and so does what alice is told
    run.refresh_from_db()
    assert run.status == RunStatus.COMPLETED, (run.status, run.error_code, run.error_detail)
    assert Approval.objects.get(pk=approval.pk).status == status
    refunds = [str(refund.amount) for refund in Refund.objects.all()]
    assert refunds == ([paid] if paid else [])
    alice = signed_in("alice")
    told = [run.result, alice.get("/portal/chat/").content.decode()]
    told += [
        f"{email.subject} {email.body}" for email in mailoutbox if email.to == ["alice@example.com"]
    ]
    claims = [words for text in told for words in PAID_WORDS if words in text]
    if paid:
        assert f"refund of {paid} EUR for order ORD-1003 has been issued" in run.result
    else:
        assert claims == []
