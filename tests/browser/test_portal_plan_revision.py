"""A supervisor revises an exchange plan in a real browser, picking another size from the
shop's stock, and the customer's plan page shows the new version and what changed."""

import pytest

from approvals import plans
from approvals.models import Proposal, Ticket, TicketStatus
from tests.approvals.plan_helpers import exchange_run
from tests.browser.conftest import screenshot

pytestmark = pytest.mark.django_db(transaction=True)

PHONE = {"width": 390, "height": 844}


def _no_horizontal_scroll(page) -> bool:
    return page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]


def test_a_supervisor_picks_another_size_and_the_customer_sees_what_changed(
    demo, signed_in, live_server
):
    # given: alice asked for changes to the plan the agent proposed (size 42 for 43)
    run = exchange_run(demo)
    ticket = Ticket.objects.get(run=run)
    alice = signed_in("alice")
    alice.set_viewport_size(PHONE)
    alice.goto(f"{live_server.url}/portal/tickets/{ticket.pk}/")
    alice.fill("#changes-note", "Size 43 is too big after all, could I have 41?")
    alice.click("button[value=changes]")
    alice.wait_for_selector(".messages")
    plans.plan_reconcile(run_id=run.pk)

    # when: sam opens the revise page from the plan page, reads her request beside the form
    sam = signed_in("sam")
    sam.goto(f"{live_server.url}/portal/tickets/{ticket.pk}/")
    sam.click("#revise-link")
    sam.wait_for_selector("#revise-form")
    assert "could I have 41?" in sam.inner_text("#changes-requested")
    sizes = sam.locator("#id_lines-0-size option")
    assert sizes.filter(has_text="size 44 — out of stock").get_attribute("disabled") is not None
    screenshot(sam, "plan-revise")
    sam.set_viewport_size(PHONE)
    assert _no_horizontal_scroll(sam)
    screenshot(sam, "plan-revise-phone")

    # and: picks size 41, writes a note and presses Enter in the quantity field
    sam.select_option("#id_lines-0-size", "SHOE-TRAIL-41")
    sam.fill("#id_note", "Size 41 is in stock;\nwe send it once you confirm.")
    sam.press("#id_lines-0-quantity", "Enter")
    sam.wait_for_selector(".messages")

    # then: version 2 waits for alice with size 41
    assert "Version 2 proposed" in sam.inner_text(".messages")
    ticket.refresh_from_db()
    assert (ticket.status, ticket.version) == (TicketStatus.WAITING_CONFIRMATION, 2)
    assert Proposal.objects.get(ticket=ticket, version=2).items[0]["new_sku"] == "SHOE-TRAIL-41"

    # and: alice's open page shows the new version and what changed, without a reload
    alice.wait_for_selector("#plan-diff", timeout=5000)
    assert "Trail running shoes: size 43 → size 41" in alice.inner_text("#plan-diff")
    assert alice.locator("button[value=confirm]").count() == 1
    assert _no_horizontal_scroll(alice)
    screenshot(alice, "plan-revised-phone")
    sam.set_viewport_size({"width": 1280, "height": 800})
    sam.goto(f"{live_server.url}/portal/tickets/{ticket.pk}/")
    screenshot(sam, "plan-revised")
