"""An exchange plan in a real browser: the customer follows the chat's link and confirms, a
supervisor finds it in the live inbox and approves, and the customer reads the answer."""

import pytest

from approvals import plans
from approvals.models import BusinessEvent, Confirmation, PlanReview, Ticket, TicketStatus
from runs import worker
from runs.models import AgentRun, RunStatus
from tests.approvals.plan_helpers import exchange_run
from tests.browser.conftest import screenshot

pytestmark = pytest.mark.django_db(transaction=True)


def test_plan_confirmed_by_the_customer_and_approved_by_a_supervisor(demo, signed_in, live_server):
    # given: alice asks for an exchange in the chat and the agent proposes a plan
    alice = signed_in("alice")
    alice.goto(f"{live_server.url}/portal/chat/")
    alice.fill("#chat-text", "I want to exchange the shoes from order ORD-1002 for size 43")
    alice.click("#chat-form button[type=submit]")
    worker.tick()
    sam = signed_in("sam")  # the inbox is open before anything waits for him

    # when: she follows the link the chat shows and confirms
    alice.wait_for_selector(".plan a", timeout=10000)
    alice.click(".plan a")
    assert "Trail running shoes, size 42, for size 43" in alice.inner_text("#plan-summary")
    screenshot(alice, "plan-to-confirm")
    alice.click("button[value=confirm]")
    assert "a person of the shop now reviews the plan" in alice.inner_text(".messages")
    ticket = Ticket.objects.get()
    run = AgentRun.objects.get()
    plans.plan_reconcile(run_id=run.pk)

    # then: the plan appears in sam's inbox without a reload; he approves it
    sam.wait_for_selector(f"tr[data-ticket='{ticket.pk}'] a", timeout=10000)
    sam.click(f"tr[data-ticket='{ticket.pk}'] a")
    sam.fill("#note", "enjoy")
    sam.click("button[value=approve]")
    assert "Approved" in sam.inner_text(".messages")
    screenshot(sam, "plan-approved")
    assert Ticket.objects.get().status == TicketStatus.APPROVED

    # and: the same run resumes and alice reads the answer in her chat
    plans.plan_reconcile(run_id=run.pk)
    worker.tick()
    run.refresh_from_db()
    assert run.status == RunStatus.COMPLETED
    alice.goto(f"{live_server.url}/portal/chat/")
    assert "approved" in alice.inner_text(".answer")


def _plan_page(demo, page, live_server) -> Ticket:
    run = exchange_run(demo, "I want to exchange the shoes from order ORD-1002 for size 43")
    ticket = Ticket.objects.get(run=run)
    page.goto(f"{live_server.url}/portal/tickets/{ticket.pk}/")
    return ticket


def test_enter_in_the_customers_change_request_asks_for_changes(demo, signed_in, live_server):
    # given alice's plan waits for her confirmation
    alice = signed_in("alice")
    alice.set_viewport_size({"width": 390, "height": 844})
    ticket = _plan_page(demo, alice, live_server)
    screenshot(alice, "plan-to-confirm-phone")

    # when she writes what should change and presses Enter in that field
    alice.fill("#changes-note", "Actually I need size 45")
    alice.press("#changes-note", "Enter")
    alice.wait_for_selector(".messages")

    # then she asked for changes, with her note, and confirmed nothing
    ticket.refresh_from_db()
    assert ticket.status == TicketStatus.NEEDS_REVISION
    assert not Confirmation.objects.filter(ticket=ticket).exists()
    event = BusinessEvent.objects.filter(ticket=ticket).latest("pk")
    assert event.data.get("note") == "Actually I need size 45"
    screenshot(alice, "plan-changes-requested")


def test_enter_in_the_supervisors_rejection_note_rejects(demo, signed_in, live_server, api):
    # given a confirmed plan waiting for sam's review
    alice = signed_in("alice")
    ticket = _plan_page(demo, alice, live_server)
    alice.click("button[value=confirm]")
    alice.wait_for_selector(".messages")
    plans.plan_reconcile(run_id=ticket.run_id)
    sam = signed_in("sam")
    sam.set_viewport_size({"width": 390, "height": 844})
    sam.goto(f"{live_server.url}/portal/tickets/{ticket.pk}/")
    sam.wait_for_selector("#viewers :text('alice is viewing')", timeout=5000)
    screenshot(sam, "plan-review-phone")

    # when sam writes why he rejects it and presses Enter in that field
    sam.fill("#reject-note", "size 43 is sold out")
    sam.press("#reject-note", "Enter")
    sam.wait_for_selector(".messages")

    # then the plan is rejected with his note, never approved
    ticket.refresh_from_db()
    assert ticket.status == TicketStatus.REJECTED
    assert PlanReview.objects.get(ticket=ticket).note == "size 43 is sold out"
    screenshot(sam, "plan-rejected-by-enter")

    # then alice's open page says so without a reload, and no longer offers to confirm
    alice.wait_for_selector("#plan-review:has-text('size 43 is sold out')", timeout=3000)
    assert "Declined by Demo Shop" in alice.inner_text("#plan-review")
    assert alice.locator("#plan-form").count() == 0


def test_a_change_request_must_say_what_and_both_pages_show_it(demo, signed_in, live_server):
    # given alice's plan waits for her confirmation
    alice = signed_in("alice")
    ticket = _plan_page(demo, alice, live_server)

    # when she asks for changes with nothing but spaces
    alice.fill("#changes-note", "   ")
    alice.click("button[value=changes]")

    # then she is asked to say what, and the plan still waits for her
    assert "Say what should change in the plan." in alice.inner_text("#plan-form")
    ticket.refresh_from_db()
    assert ticket.status == TicketStatus.WAITING_CONFIRMATION

    # when she says what
    alice.fill("#changes-note", "Actually I need size 45")
    alice.click("button[value=changes]")
    alice.wait_for_selector(".messages")

    # then her page shows her request back, and sam's page of the plan shows it to him
    assert "Actually I need size 45" in alice.inner_text("#changes-requested")
    sam = signed_in("sam")
    sam.goto(f"{live_server.url}/portal/tickets/{ticket.pk}/")
    screenshot(sam, "plan-changes-requested-supervisor")
    request = sam.inner_text("#changes-requested")
    assert request.startswith("alice asked for changes to version 1")
    assert "“Actually I need size 45”" in request


@pytest.mark.parametrize("width", [1280, 390])
def test_a_customer_sees_the_staff_on_her_plan_as_the_shop(demo, signed_in, live_server, width):
    # given alice's plan is open on her screen
    alice = signed_in("alice")
    alice.set_viewport_size({"width": width, "height": 844})
    ticket = _plan_page(demo, alice, live_server)

    # when sam and sue open it too
    sam, sue = signed_in("sam"), signed_in("sue")
    sam.goto(f"{live_server.url}/portal/tickets/{ticket.pk}/")
    sue.goto(f"{live_server.url}/portal/tickets/{ticket.pk}/")

    # then alice reads that people of the shop are looking, never their logins
    alice.wait_for_selector("#viewers :text('People of Demo Shop are looking at your plan')")
    screenshot(alice, f"plan-staff-looking-{width}")
    shown = alice.inner_text("body")
    assert "sam" not in shown and "sue" not in shown
    # and sam, who is staff, still reads who is there
    sam.wait_for_selector("#viewers :text('alice and sue are viewing')", timeout=5000)
