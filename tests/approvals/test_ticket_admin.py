"""Tickets in the admin: scoped history, and actions that call the plan services."""

from approvals.models import PlanReview, Proposal, TicketStatus
from tests.approvals.plan_helpers import command, exchange_run, reconcile, ticket_of
from tests.pages import signed_in


def test_a_supervisor_sees_the_plan_and_its_history_and_oscar_does_not(demo, api):
    ticket = ticket_of(exchange_run(demo))
    command(api("alice"), ticket, "confirm")

    page = signed_in("sam").get(f"/admin/approvals/ticket/{ticket.pk}/change/")
    listing = signed_in("sam").get("/admin/approvals/ticket/")
    foreign = signed_in("oscar").get(f"/admin/approvals/ticket/{ticket.pk}/change/")

    assert page.status_code == 200
    assert "exchange 1 x Trail running shoes, size 42, for size 43" in page.text
    assert "confirmed" in page.text  # the business event
    assert "alice" in page.text  # the confirmation
    assert str(ticket.pk)[:8] in listing.text
    assert foreign.status_code in (302, 404)


def test_the_review_page_decides_the_version_the_supervisor_saw(demo, api):
    run = exchange_run(demo)
    ticket = ticket_of(run)
    command(api("alice"), ticket, "confirm")
    sam = signed_in("sam")
    url = f"/admin/approvals/ticket/{ticket.pk}/review/"

    page = sam.get(url)
    no_note = sam.post(url, {"proposal_version": 1, "decision": "reject", "note": ""})
    stale = sam.post(url, {"proposal_version": 2, "decision": "approve", "note": ""})
    approved = sam.post(url, {"proposal_version": 1, "decision": "approve"}, follow=True)

    assert 'name="proposal_version" value="1"' in page.text
    assert "needs a note" in no_note.text
    assert "not 2" in stale.text
    assert approved.status_code == 200
    assert "Approved" in approved.text
    assert ticket_of(run).status == TicketStatus.APPROVED
    assert PlanReview.objects.get().reviewer.username == "sam"


def test_the_revise_page_proposes_a_new_version_or_shows_what_is_wrong(demo, api):
    run = exchange_run(demo)
    ticket = ticket_of(run)
    sam = signed_in("sam")
    url = f"/admin/approvals/ticket/{ticket.pk}/revise/"

    items = '[{"sku": "SHOE-TRAIL-42", "new_sku": "SHOE-TRAIL-41", "quantity": 1}]'
    bad = sam.post(url, {"proposal_version": 1, "items": '[{"sku": "HAT", "new_sku": "H"}]'})
    good = sam.post(url, {"proposal_version": 1, "items": items, "note": "41 fits"}, follow=True)
    # a colleague's page, opened at version 1, cannot overwrite version 2
    stale = sam.post(url, {"proposal_version": 1, "items": items, "note": "me too"})

    assert bad.status_code == 200 and "not part of ORD-1002" in bad.text
    assert "not 1" in stale.text
    assert good.status_code == 200
    assert Proposal.objects.filter(ticket=ticket).count() == 2
    assert ticket_of(run).version == 2
    reconcile(run)
    assert run.wait_state["payload"]["proposal_version"] == 2
