"""An exchange plan from proposal to the same run's final answer (DESIGN 6.3)."""

from approvals.models import (
    BusinessEvent,
    BusinessEventKind,
    Confirmation,
    PlanReview,
    Proposal,
    Ticket,
    TicketStatus,
)
from runs import worker
from runs.models import RunInput, RunStatus
from tests.approvals.plan_helpers import command, exchange_run, reconcile, ticket_of


def _types(run) -> list[str]:
    return list(run.events.order_by("seq").values_list("type", flat=True))


def test_confirmation_approval_restore_same_run_once(demo, api):
    # given: the agent proposed an exchange and waits for the customer
    run = exchange_run(demo)
    ticket = ticket_of(run)
    assert run.status == RunStatus.WAITING_USER
    [pending] = api("alice").get(f"/api/v1/runs/{run.pk}").json()["pending"]
    assert (pending["kind"], pending["ticket_id"]) == ("confirmation", str(ticket.pk))

    # when: the customer confirms, and the reconcile task runs (twice: at least once)
    assert command(api("alice"), ticket, "confirm").status_code == 200
    assert reconcile(run) == 1
    assert reconcile(run) == 0

    # then: the run waits for a supervisor's review
    assert run.status == RunStatus.WAITING_APPROVAL
    [pending] = api("sam").get(f"/api/v1/runs/{run.pk}").json()["pending"]
    assert pending["kind"] == "plan_review"

    # when: a supervisor approves, and reconcile is delivered twice
    response = command(api("sam"), ticket, "decide", decision="approve", note="fine")
    assert response.status_code == 200, response.json()
    assert response.json()["status"] == "APPROVED"
    assert reconcile(run) == 1
    assert reconcile(run) == 0
    assert run.status == RunStatus.QUEUED

    # then: the same run resumes once and completes with the approved plan
    worker.tick()
    run.refresh_from_db()
    assert run.status == RunStatus.COMPLETED
    assert "approved" in run.result
    types = _types(run)
    assert types.count("plan.proposed") == 1
    assert types.count("plan.confirmed") == 1
    assert types.count("plan.approved") == 1
    assert types.count("run.completed") == 1
    assert RunInput.objects.filter(run=run).count() == 2
    assert Ticket.objects.count() == Proposal.objects.count() == 1
    assert Confirmation.objects.count() == PlanReview.objects.count() == 1
    assert BusinessEvent.objects.filter(run=run).count() == 3
    assert Ticket.objects.get().status == TicketStatus.APPROVED


def test_revision_replaces_wait_and_requires_new_confirmation(demo, api):
    # given: a proposal waiting for the customer
    run = exchange_run(demo)
    ticket = ticket_of(run)
    first_wait = run.wait_state["interrupt_id"]
    alice, sam = api("alice"), api("sam")

    # when: the customer asks for changes
    asked = command(alice, ticket, "revise", note="size 41 please")
    assert (asked.status_code, asked.json()["status"]) == (200, "NEEDS_REVISION")
    reconcile(run)

    # then: the run waits for a supervisor, and nobody can confirm or decide meanwhile
    assert run.status == RunStatus.WAITING_APPROVAL
    assert command(alice, ticket, "confirm").json()["code"] == "invalid_transition"
    refused = command(sam, ticket, "decide", decision="approve")
    assert (refused.status_code, refused.json()["code"]) == (409, "invalid_transition")

    # when: a supervisor proposes version 2 with other items
    items = [{"sku": "SHOE-TRAIL-42", "new_sku": "SHOE-TRAIL-41", "quantity": 1}]
    revised = command(sam, ticket, "revise", proposal_version=1, note="41 it is", items=items)
    assert revised.status_code == 200, revised.json()
    assert revised.json()["proposal"]["version"] == 2
    assert revised.json()["proposal"]["items"] == items
    reconcile(run)

    # then: a new wait for a new confirmation; the old version no longer counts
    assert run.status == RunStatus.WAITING_USER
    assert run.wait_state["interrupt_id"] != first_wait
    assert run.wait_state["payload"]["proposal_version"] == 2
    [pending] = alice.get(f"/api/v1/runs/{run.pk}").json()["pending"]
    assert pending["tool_args"]["items"] == items
    stale = command(alice, ticket, "confirm", proposal_version=1)
    assert (stale.status_code, stale.json()["code"]) == (409, "version_conflict")
    early = command(sam, ticket, "decide", proposal_version=2, decision="approve")
    assert (early.status_code, early.json()["code"]) == (409, "invalid_transition")

    # when: confirmed and approved at version 2
    assert command(alice, ticket, "confirm", proposal_version=2).status_code == 200
    reconcile(run)
    assert command(sam, ticket, "decide", decision="approve").status_code == 200
    reconcile(run)
    worker.tick()
    run.refresh_from_db()

    # then: the run completes with version 2, once
    assert run.status == RunStatus.COMPLETED
    assert "Trail running shoes, size 42, for size 41" in run.result
    assert _types(run).count("plan.approved") == 1
    assert list(Proposal.objects.filter(ticket=ticket).values_list("version", flat=True)) == [1, 2]


def test_a_rejected_plan_is_told_to_the_customer_with_the_note(demo, api):
    run = exchange_run(demo)
    ticket = ticket_of(run)
    command(api("alice"), ticket, "confirm")
    reconcile(run)

    no_note = command(api("sam"), ticket, "decide", decision="reject")
    assert (no_note.status_code, no_note.json()["code"]) == (400, "validation_error")
    assert command(api("sam"), ticket, "decide", decision="reject", note="worn").status_code == 200
    reconcile(run)
    worker.tick()
    run.refresh_from_db()

    assert run.status == RunStatus.COMPLETED
    assert "declined" in run.result and "worn" in run.result
    assert Ticket.objects.get().status == TicketStatus.REJECTED


def test_takeover_and_approver_revocation_prevent_resume(demo, api):
    from agentportal.models import Membership

    sam = api("sam")
    # given: a plan approved by sam, whose run a supervisor then takes over before reconcile
    alice = api("alice")
    conversation = alice.post("/api/v1/conversations", {}, format="json").json()["id"]
    sent = alice.post(
        f"/api/v1/conversations/{conversation}/messages",
        {"text": "I want to exchange the shoes from order ORD-1002 for size 43"},
        format="json",
    ).json()
    worker.tick()
    taken_run = Ticket.objects.get(run_id=sent["run_id"]).run
    taken = ticket_of(taken_run)
    command(alice, taken, "confirm")
    reconcile(taken_run)
    assert command(sam, taken, "decide", decision="approve").status_code == 200
    took = sam.post(
        f"/api/v1/conversations/{conversation}/messages", {"text": "/takeover"}, format="json"
    )
    assert took.json()["result"]["cancelled_run_id"] == str(taken_run.pk)

    # and: a plan approved by sue, who then loses her supervisor role before reconcile
    revoked_run = exchange_run(demo, customer="bob", message=EXCHANGE_BOB)
    revoked = ticket_of(revoked_run)
    command(api("bob"), revoked, "confirm")
    reconcile(revoked_run)
    assert command(api("sue"), revoked, "decide", decision="approve").status_code == 200
    Membership.objects.filter(user__username="sue", merchant=demo).update(active=False)

    # when: the reconcile tasks run, and the workers look for work
    reconcile(taken_run)
    reconcile(revoked_run)
    worker.tick()

    # then: neither run resumed
    taken_run.refresh_from_db()
    revoked_run.refresh_from_db()
    assert taken_run.status == RunStatus.CANCELLED
    assert "plan.approved" not in _types(taken_run)
    assert (revoked_run.status, revoked_run.error_code) == (RunStatus.FAILED, "APPROVER_REVOKED")
    assert "plan.approved" not in _types(revoked_run)
    assert RunInput.objects.filter(run=revoked_run).count() == 1  # the confirmation only
    assert ticket_of(revoked_run).status == TicketStatus.CANCELLED  # nothing ships on it
    # an approved plan whose run was taken over before it resumed is cancelled with its run,
    # and its history says so
    taken = ticket_of(taken_run)
    assert taken.status == TicketStatus.CANCELLED
    assert taken.events.latest("pk").kind == BusinessEventKind.CANCELLED
    assert taken.events.latest("pk").data["cause"] == "run_cancelled"
    assert _types(taken_run)[-2:] == ["plan.cancelled", "run.cancelled"]
    # and a plan whose run was cancelled while open is cancelled with it
    open_run = exchange_run(demo)
    api("alice").post(f"/api/v1/runs/{open_run.pk}/cancel")
    assert ticket_of(open_run).status == TicketStatus.CANCELLED
    assert command(sam, ticket_of(open_run), "confirm").status_code == 403
    late = command(alice, ticket_of(open_run), "confirm")
    assert (late.status_code, late.json()["code"]) == (409, "invalid_transition")


EXCHANGE_BOB = "I want to exchange the shoes from order ORD-2001 for size 43"
