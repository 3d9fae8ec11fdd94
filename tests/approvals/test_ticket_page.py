"""The portal's plan page: the customer confirms or asks for changes, a supervisor decides."""

from django.contrib.auth.models import User
from django.test import Client

from approvals.models import TicketStatus
from runs import worker
from runs.models import AgentRun
from tests.approvals.plan_helpers import exchange_run, reconcile, ticket_of
from tests.pages import signed_in


def _act(client: Client, ticket, action: str, note: str = "", version: int = 1):
    return client.post(
        f"/portal/tickets/{ticket.pk}/",
        {"action": action, "proposal_version": version, "note": note},
        follow=True,
    )


def test_the_customer_confirms_and_the_supervisor_approves_on_the_page(demo):
    run = exchange_run(demo)
    ticket = ticket_of(run)
    alice, sam = signed_in("alice"), signed_in("sam")

    page = alice.get(f"/portal/tickets/{ticket.pk}/")
    assert "1 x Trail running shoes, size 42, for size 43" in page.text
    assert "Waiting for your confirmation" in page.text
    for internal in ("SHOE-TRAIL", "WAITING_CONFIRMATION", "demo-shop", "version 1"):
        assert internal not in page.text
    assert "Confirm this plan" in page.text
    assert "Approve the plan" not in page.text

    confirmed = _act(alice, ticket, "confirm")
    assert "a person of the shop now reviews the plan" in confirmed.text
    assert ticket_of(run).status == TicketStatus.WAITING_REVIEW
    inbox = sam.get("/portal/inbox/plans/")
    assert f"/portal/tickets/{ticket.pk}/" in inbox.text

    approved = _act(sam, ticket, "approve")
    assert "Approved by sam" in approved.text
    assert ticket_of(run).status == TicketStatus.APPROVED
    again = _act(sam, ticket, "approve")
    assert again.status_code == 200 and "Nothing was changed" in again.text


def test_asking_for_changes_a_stale_version_and_strangers(demo):
    run = exchange_run(demo)
    ticket = ticket_of(run)
    alice = signed_in("alice")

    asked = _act(alice, ticket, "changes", note="size 41 please")
    stale = _act(alice, ticket, "confirm", version=7)
    reconcile(run)

    assert "Your request for changes was sent" in asked.text
    assert "revised meanwhile" in stale.text
    assert ticket_of(run).status == TicketStatus.NEEDS_REVISION
    assert signed_in("bob").get(f"/portal/tickets/{ticket.pk}/").status_code == 404
    assert signed_in("oscar").get(f"/portal/tickets/{ticket.pk}/").status_code == 404
    assert "needs a new version" in signed_in("sue").get("/portal/inbox/plans/").text


def test_the_chat_links_the_plan_that_waits_for_the_customer(demo):
    alice = signed_in("alice")
    alice.post("/portal/chat/", {"text": "I want to exchange the shoes from ORD-1002 for size 43"})
    worker.tick()

    ticket = ticket_of(User.objects.get(username="alice").agent_runs.get())
    assert f"/portal/tickets/{ticket.pk}/" in alice.get("/portal/chat/messages/").text
    assert f"/portal/tickets/{ticket.pk}/" in alice.get("/portal/requests/").text


def test_a_rejected_plan_says_so_with_the_note(demo, api):
    from tests.approvals.plan_helpers import command

    ticket = ticket_of(exchange_run(demo))
    command(api("alice"), ticket, "confirm")

    rejected = _act(signed_in("sam"), ticket, "reject", note="worn soles")

    assert "Rejected by sam: worn soles" in rejected.text
    assert (
        "Declined by Demo Shop: worn soles"
        in signed_in("alice").get(f"/portal/tickets/{ticket.pk}/").text
    )


def test_the_customer_reads_back_the_changes_they_asked_for(demo):
    # given alice asked for changes to her plan
    ticket = ticket_of(exchange_run(demo))
    alice = signed_in("alice")
    _act(alice, ticket, "changes", note="size 41 please, the 43 is too big")

    # when she opens the plan again
    page = alice.get(f"/portal/tickets/{ticket.pk}/")

    # then her note is there in her words, and where the plan stands
    assert "You asked for changes" in page.text
    assert "size 41 please, the 43 is too big" in page.text
    assert "Being changed by a person at Demo Shop, as you asked" in page.text
    assert "NEEDS_REVISION" not in page.text


def test_the_customers_home_links_a_waiting_plan_and_survives_an_unusable_wait(demo):
    # given: a plan waiting for alice
    run = exchange_run(demo)
    ticket = ticket_of(run)
    alice = signed_in("alice")
    assert f"/portal/tickets/{ticket.pk}/" in alice.get("/portal/requests/").text

    # when: the run's stored wait is damaged (an operator's case)
    AgentRun.objects.filter(pk=run.pk).update(wait_state={**run.wait_state, "ticket_id": None})

    # then: the page still answers, without the link
    page = alice.get("/portal/requests/")
    assert page.status_code == 200
    assert f"/portal/tickets/{ticket.pk}/" not in page.text


def test_a_bad_plan_form_says_what_is_wrong_and_changes_nothing(demo):
    # given
    ticket = ticket_of(exchange_run(demo))

    # when: a note longer than the page allows
    page = _act(signed_in("alice"), ticket, "changes", note="x" * 2001)

    # then
    assert page.status_code == 200
    assert "note: Ensure this value has at most 2000 characters" in page.text
    assert ticket_of(ticket.run).status == TicketStatus.WAITING_CONFIRMATION
