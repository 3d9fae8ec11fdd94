"""Tickets in the admin: scoped history, and actions that call the plan services."""

from django.contrib.auth.models import User
from django.test import Client

from approvals.models import Proposal, TicketStatus
from tests.approvals.plan_helpers import command, exchange_run, reconcile, ticket_of


def _signed_in(username: str) -> Client:
    client = Client()
    client.force_login(User.objects.get(username=username))
    return client


def test_a_supervisor_sees_the_plan_and_its_history_and_oscar_does_not(demo, api):
    ticket = ticket_of(exchange_run(demo))
    command(api("alice"), ticket, "confirm")

    page = _signed_in("sam").get(f"/admin/approvals/ticket/{ticket.pk}/change/")
    listing = _signed_in("sam").get("/admin/approvals/ticket/")
    foreign = _signed_in("oscar").get(f"/admin/approvals/ticket/{ticket.pk}/change/")

    assert page.status_code == 200
    assert "exchange 1 x SHOE-TRAIL-42 for SHOE-TRAIL-43" in page.text
    assert "confirmed" in page.text  # the business event
    assert "alice" in page.text  # the confirmation
    assert str(ticket.pk)[:8] in listing.text
    assert foreign.status_code in (302, 404)


def test_approve_and_reject_actions_decide_through_the_service(demo, api):
    approved = ticket_of(exchange_run(demo))
    command(api("alice"), approved, "confirm")
    unconfirmed = ticket_of(
        exchange_run(demo, "exchange the shoes of ORD-2001 for size 43", customer="bob")
    )

    response = _signed_in("sam").post(
        "/admin/approvals/ticket/",
        {"action": "approve_selected", "_selected_action": [approved.pk, unconfirmed.pk]},
        follow=True,
    )

    assert response.status_code == 200
    assert ticket_of(approved.run).status == TicketStatus.APPROVED
    assert ticket_of(unconfirmed.run).status == TicketStatus.WAITING_CONFIRMATION
    assert "approved" in response.text
    assert "not possible now" in response.text


def test_the_revise_page_proposes_a_new_version_or_shows_what_is_wrong(demo, api):
    run = exchange_run(demo)
    ticket = ticket_of(run)
    sam = _signed_in("sam")
    url = f"/admin/approvals/ticket/{ticket.pk}/revise/"

    bad = sam.post(url, {"items": '[{"sku": "HAT", "new_sku": "HAT-2"}]', "note": ""})
    good = sam.post(
        url,
        {
            "items": '[{"sku": "SHOE-TRAIL-42", "new_sku": "SHOE-TRAIL-41", "quantity": 1}]',
            "note": "41 fits",
        },
        follow=True,
    )

    assert bad.status_code == 200 and "not part of ORD-1002" in bad.text
    assert good.status_code == 200
    assert Proposal.objects.filter(ticket=ticket).count() == 2
    assert ticket_of(run).version == 2
    reconcile(run)
    assert run.wait_state["proposal_version"] == 2
