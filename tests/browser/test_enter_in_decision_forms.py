"""Enter in a field of a decision form does that form's own decision and nothing else, in a real
browser: an edited argument is reviewed, never approved or paid unseen; "Approve as proposed"
waits while an argument is edited; a revision that cannot be paid is not offered."""

import pytest

from approvals import plans
from approvals.models import (
    Approval,
    ApprovalStatus,
    ApprovalVote,
    Confirmation,
    PlanReview,
    Proposal,
    Refund,
    Ticket,
    TicketStatus,
)
from runs import worker
from tests.approvals.plan_helpers import exchange_run
from tests.approvals.refund_helpers import refund_run_waiting
from tests.browser.conftest import screenshot

pytestmark = pytest.mark.django_db(transaction=True)

PHONE = {"width": 390, "height": 844}
DESKTOP = {"width": 1280, "height": 900}


def _both_widths(page, name: str) -> None:
    page.set_viewport_size(DESKTOP)
    screenshot(page, f"{name}-desktop")
    page.set_viewport_size(PHONE)
    screenshot(page, f"{name}-phone")
    assert page.evaluate("() => document.documentElement.scrollWidth") <= PHONE["width"], name
    page.set_viewport_size(DESKTOP)


def _open(page, live_server, approval: Approval) -> None:
    page.goto(f"{live_server.url}/portal/approvals/{approval.interrupt_id}/")


def _still_pending(approval: Approval) -> None:
    approval.refresh_from_db()
    assert approval.status == ApprovalStatus.PENDING_APPROVAL
    assert not ApprovalVote.objects.filter(approval=approval).exists()
    worker.tick()
    assert not Refund.objects.exists()


# --- the approval page ---------------------------------------------------------------------------


@pytest.mark.parametrize("field", ["#id_arg-amount", "#id_arg-reason"])
def test_enter_in_an_argument_reviews_the_edit_and_never_pays(demo, signed_in, live_server, field):
    approval = refund_run_waiting().approval
    sam = signed_in("sam")
    _open(sam, live_server, approval)

    # when sam types 5 in the amount and presses Enter in a field of the arguments
    sam.fill("#id_arg-amount", "5")
    sam.press(field, "Enter")
    sam.wait_for_selector("#diff")

    # then he reviews his change: nothing approved, nothing paid
    assert "5.00" in sam.inner_text("#diff tr.changed")
    assert sam.inner_text("#revise-form button") == "Approve the revised call: 5.00 EUR"
    assert sam.is_disabled("#typed-form button[value=approve]")
    _still_pending(approval)

    # when he presses Enter in the field again, on the review
    sam.press(field, "Enter")
    sam.wait_for_selector("#diff")

    # then it is reviewed again, still not approved
    _still_pending(approval)


def test_approve_as_proposed_waits_while_an_argument_is_edited(demo, signed_in, live_server):
    approval = refund_run_waiting().approval
    sam = signed_in("sam")
    _open(sam, live_server, approval)
    approve = "#typed-form button[value=approve]"
    assert sam.inner_text(approve) == "Approve 20.00 EUR as proposed"
    assert not sam.is_disabled(approve)
    assert not sam.is_visible("#edited-note")

    # when sam edits the amount
    sam.fill("#id_arg-amount", "5")

    # then approving as proposed waits, and the page says why
    assert sam.is_disabled(approve)
    assert sam.inner_text("#edited-note") == (
        "You changed the arguments: review your changes, or reload to approve as proposed."
    )
    _both_widths(sam, "approval-edited")

    # when he puts the amount back, he may approve as proposed again
    sam.fill("#id_arg-amount", "20.00")
    assert not sam.is_disabled(approve)
    assert not sam.is_visible("#edited-note")

    # when he reviews 5.00, then edits again, the reviewed revision waits for a new review
    sam.fill("#id_arg-amount", "5")
    sam.click("#typed-form button[value=preview]")
    sam.wait_for_selector("#diff")
    sam.fill("#id_arg-amount", "6")
    assert sam.is_disabled("#revise-form button")
    assert sam.is_visible("#reviewed-note")
    _still_pending(approval)


def test_enter_in_the_json_editor_writes_a_new_line(demo, signed_in, live_server):
    approval = refund_run_waiting().approval
    sam = signed_in("sam")
    _open(sam, live_server, approval)
    sam.click("#json-editor summary")

    lines = sam.input_value("#tool-args").count("\n")

    sam.press("#tool-args", "Enter")

    assert sam.input_value("#tool-args").count("\n") == lines + 1
    assert sam.locator("#diff").count() == 0
    _still_pending(approval)


def test_enter_in_the_reason_rejects_even_with_an_edited_amount(demo, signed_in, live_server):
    approval = refund_run_waiting().approval
    sam = signed_in("sam")
    _open(sam, live_server, approval)

    sam.fill("#id_arg-amount", "5")
    sam.fill("#reason", "bought too long ago")
    sam.press("#reason", "Enter")
    sam.wait_for_selector(".messages")

    approval.refresh_from_db()
    assert (approval.status, approval.reason) == (ApprovalStatus.REJECTED, "bought too long ago")
    worker.tick()
    assert not Refund.objects.exists()


def test_a_revision_over_what_is_refundable_is_warned_and_not_offered(demo, signed_in, live_server):
    approval = refund_run_waiting().approval
    sam = signed_in("sam")
    _open(sam, live_server, approval)

    # when sam reviews 1000.00 on alice's 59.00 order
    sam.fill("#id_arg-amount", "1000")
    sam.press("#id_arg-amount", "Enter")
    sam.wait_for_selector("#diff")

    # then the review warns as the call's page does, and offers no approve of it
    assert "more than the 59.00 EUR still refundable" in sam.inner_text("#revision-warnings")
    assert sam.locator("#revise-form").count() == 0
    assert "This revision cannot be approved" in sam.inner_text("#revision-blocked")
    _both_widths(sam, "approval-revision-blocked")

    # and the order is picked from alice's orders only
    orders = sam.locator("#id_arg-order_id option").all_inner_texts()
    assert [order.split(" ")[0] for order in orders] == [
        "ORD-1001",
        "ORD-1002",
        "ORD-1003",
        "ORD-1004",
        "ORD-1005",
    ]
    _still_pending(approval)


# --- the admin's decide page ---------------------------------------------------------------------


@pytest.mark.parametrize("field", ["#id_tool_args", "#id_reason"])
def test_enter_in_the_admins_decide_page_decides_nothing(demo, signed_in, live_server, field):
    approval = refund_run_waiting().approval
    sam = signed_in("sam")
    sam.goto(f"{live_server.url}/admin/approvals/approval/{approval.pk}/decide/")
    sam.check("#id_decision input[value=approve]")

    # when sam edits the amount and presses Enter in a text field
    sam.fill("#id_tool_args", '{"order_id": "ORD-1003", "amount": "5.00", "reason": "x"}')
    sam.press(field, "Enter")

    # then it is a new line; and pressing "Record decision" approves nothing edited
    _still_pending(approval)
    sam.click("input[type=submit]")
    assert "You changed the arguments: pick Revise" in sam.inner_text("#content-main")
    _both_widths(sam, "admin-decide-edited")
    _still_pending(approval)


# --- the plan pages ------------------------------------------------------------------------------


def _plan(demo, page, live_server, *, confirmed: bool) -> Ticket:
    run = exchange_run(demo, "I want to exchange the shoes from order ORD-1002 for size 43")
    ticket = Ticket.objects.get(run=run)
    if confirmed:
        plans.ticket_confirm(
            ticket=ticket,
            principal=plans.ticket_principal(ticket=ticket, user=ticket.customer),
            proposal_version=ticket.version,
        )
        plans.plan_reconcile(run_id=run.pk)
    page.goto(f"{live_server.url}/portal/tickets/{ticket.pk}/")
    return ticket


def test_enter_in_the_customers_plan_page_asks_for_changes_only(demo, signed_in, live_server):
    alice = signed_in("alice")
    ticket = _plan(demo, alice, live_server, confirmed=False)

    alice.fill("#changes-note", "size 44 please")
    alice.press("#changes-note", "Enter")
    alice.wait_for_selector(".messages")

    ticket.refresh_from_db()
    assert ticket.status == TicketStatus.NEEDS_REVISION
    assert not Confirmation.objects.filter(ticket=ticket).exists()


@pytest.mark.parametrize(
    ("field", "status"),
    [("#note", TicketStatus.APPROVED), ("#reject-note", TicketStatus.REJECTED)],
)
def test_enter_in_a_review_note_does_that_notes_decision(
    demo, signed_in, live_server, field, status
):
    sam = signed_in("sam")
    ticket = _plan(demo, sam, live_server, confirmed=True)

    sam.fill(field, "as said")
    sam.press(field, "Enter")
    sam.wait_for_selector(".messages")

    ticket.refresh_from_db()
    assert ticket.status == status
    assert [review.note for review in PlanReview.objects.filter(ticket=ticket)] == ["as said"]


@pytest.mark.parametrize("field", ["#id_lines-0-quantity", "#id_note"])
def test_enter_in_the_plan_revise_page_can_only_propose(demo, signed_in, live_server, field):
    sam = signed_in("sam")
    ticket = _plan(demo, sam, live_server, confirmed=True)
    sam.goto(f"{live_server.url}/portal/tickets/{ticket.pk}/revise/")

    sam.press(field, "Enter")

    if field == "#id_note":
        # a note is text over lines: Enter is a new line, nothing is sent
        assert sam.input_value(field) == "\n"
        ticket.refresh_from_db()
        assert (ticket.status, ticket.version) == (TicketStatus.WAITING_REVIEW, 1)
    else:
        sam.wait_for_selector(".messages")
        ticket.refresh_from_db()
        assert (ticket.status, ticket.version) == (TicketStatus.WAITING_CONFIRMATION, 2)
        assert Proposal.objects.filter(ticket=ticket).count() == 2
    assert not PlanReview.objects.filter(ticket=ticket).exists()
