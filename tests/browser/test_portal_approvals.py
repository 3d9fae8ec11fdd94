"""A supervisor decides a pending refund in the portal, in a real browser."""

from decimal import Decimal

import pytest
from django.core import mail

from approvals.models import ApprovalStatus, Refund
from approvals.notify import outbox
from runs import worker
from tests.approvals.refund_helpers import refund_run_waiting
from tests.browser.conftest import screenshot

pytestmark = pytest.mark.django_db(transaction=True)


def test_signed_out_visitor_is_sent_to_the_login_form(browser, live_server):
    page = browser.new_page()
    page.goto(f"{live_server.url}/portal/")
    assert "/accounts/login/" in page.url
    assert page.locator("#id_username").is_visible()
    page.close()


def test_a_colleague_sees_who_is_viewing_and_the_decision_arrive_without_a_reload(demo, signed_in):
    approval = refund_run_waiting().approval
    sam = signed_in("sam")
    sue = signed_in("sue")

    # given: both supervisors have the call open; each is told the other is looking
    sam.click(f"[data-interrupt='{approval.interrupt_id}'] a")
    sue.goto(sam.url)
    sue.wait_for_selector("#viewers :text('sam is viewing')", timeout=5000)
    sam.wait_for_selector("#viewers :text('sue is viewing')", timeout=5000)
    assert "ORD-1003" in sam.inner_text("#proposed-args")
    screenshot(sue, "approval-colleague-viewing")
    sue.evaluate("window.notReloaded = true")

    # when: sam edits the amount as JSON, reviews the diff, and approves the revision
    sam.click("#json-editor summary")
    sam.fill("#tool-args", '{"order_id": "ORD-1003", "amount": "12.50", "reason": "partial"}')
    sam.click("#json-form button[value=preview]")
    changed = sam.locator("#diff tr.changed")
    assert changed.count() == 2
    assert "12.50" in changed.first.inner_text()
    screenshot(sam, "approval-revise-diff")
    sam.click("button[value=revise]")

    # then: recorded, and said so
    assert "Approved with your changes" in sam.inner_text(".messages")
    approval.refresh_from_db()
    assert approval.status == ApprovalStatus.APPROVED_EXECUTING
    assert approval.approved_args["amount"] == "12.50"
    assert approval.decided_by.username == "sam"

    # then: sue's page says who decided what within 2 s, offers no decision, and was not
    # reloaded to do so
    sue.wait_for_selector("#approval-status:text-matches('APPROVED')", timeout=2000)
    assert "decided by sam (revise)" in sue.inner_text("#page")
    assert sue.locator("button[value=approve]").count() == 0
    assert sue.locator("#decision-form").count() == 0
    assert sue.evaluate("window.notReloaded") is True
    screenshot(sue, "approval-decided-by-colleague")


def test_a_revision_in_the_typed_form_keeps_every_edit_on_error_then_runs_as_revised(
    demo, signed_in
):
    # given a pending refund of 20.00 open on the approval page
    approval = refund_run_waiting().approval
    sam = signed_in("sam")
    sam.click(f"[data-interrupt='{approval.interrupt_id}'] a")
    assert sam.input_value("#id_arg-amount") == "20.00"

    # when sam changes the reason and gives an amount the tool refuses
    sam.fill("#id_arg-amount", "-3")
    sam.fill("#id_arg-reason", "only one shoe came back")
    sam.click("#typed-form button[value=preview]")

    # then the error is beside the amount, and both his edits are still in their fields
    screenshot(sam, "approval-typed-error")
    assert "an amount like 49.90" in sam.inner_text("#id_arg-amount-errors")
    assert sam.get_attribute("#id_arg-amount", "aria-invalid") == "true"
    assert sam.input_value("#id_arg-amount") == "-3"
    assert sam.input_value("#id_arg-reason") == "only one shoe came back"
    approval.refresh_from_db()
    assert approval.status == ApprovalStatus.PENDING_APPROVAL

    # when he corrects the amount, reviews the change and approves the revised call
    sam.fill("#id_arg-amount", "12.50")
    sam.click("#typed-form button[value=preview]")
    assert [row.split("\t")[0] for row in sam.locator("#diff tr.changed").all_inner_texts()] == [
        "amount",
        "reason",
    ]
    sam.click("button[value=revise]")
    assert "Approved with your changes" in sam.inner_text(".messages")

    # then the refund paid is the revised one
    worker.tick()
    refund = Refund.objects.get()
    assert (refund.amount, refund.order.number) == (Decimal("12.50"), "ORD-1003")


def test_a_json_mistake_in_a_revision_is_said_where_it_is_and_the_edit_kept(demo, signed_in):
    # given a pending refund open on the approval page
    approval = refund_run_waiting().approval
    sam = signed_in("sam")
    sam.click(f"[data-interrupt='{approval.interrupt_id}'] a")

    # when sam's edit has a trailing comma
    edit = '{"order_id": "ORD-1003", "amount": "12.50",}'
    sam.click("#json-editor summary")
    sam.fill("#tool-args", edit)
    sam.click("#json-form button[value=preview]")

    # then he is told where, his text is kept, and nothing was decided
    screenshot(sam, "approval-json-mistake")
    assert sam.inner_text("#tool-args-errors") == (
        "This is not valid JSON: expecting property name enclosed in double quotes "
        "at line 1, column 44."
    )
    assert sam.input_value("#tool-args") == edit
    assert sam.locator("#diff").count() == 0
    approval.refresh_from_db()
    assert approval.status == ApprovalStatus.PENDING_APPROVAL


def test_reject_needs_a_reason_and_then_rejects(demo, signed_in):
    approval = refund_run_waiting().approval
    sam = signed_in("sam")
    sam.click(f"[data-interrupt='{approval.interrupt_id}'] a")
    sam.click("button[value=reject]")
    assert "reason" in sam.inner_text("#decision-form")
    sam.fill("#reason", "bought too long ago")
    sam.click("button[value=reject]")
    assert "Rejected" in sam.inner_text(".messages")
    approval.refresh_from_db()
    assert (approval.status, approval.reason) == (ApprovalStatus.REJECTED, "bought too long ago")


def test_inbox_asks_for_nothing_while_idle_and_shows_new_calls_without_a_reload(demo, signed_in):
    sam = signed_in("sam")
    assert "Nothing waits" in sam.inner_text("#inbox-rows")
    assert sam.inner_text("#pending-count") == "(0)"

    # when five seconds pass with nothing new, the page asks for nothing: its stream is open
    sam.wait_for_timeout(500)
    requests = []
    sam.on("request", lambda request: requests.append(request))
    sam.wait_for_timeout(5000)
    assert [request.url for request in requests] == []

    approval = refund_run_waiting("refund ORD-1004 amount 15").approval

    sam.wait_for_selector(f"[data-interrupt='{approval.interrupt_id}']", timeout=15000)
    screenshot(sam, "inbox-live")
    assert "15.00 EUR" in sam.inner_text("#inbox-rows")
    # the heading's count came with the rows
    assert sam.inner_text("#pending-count") == "(1)"


def test_another_shops_supervisor_cannot_open_the_call(demo, signed_in, live_server):
    approval = refund_run_waiting().approval
    oscar = signed_in("oscar")
    response = oscar.goto(f"{live_server.url}/portal/approvals/{approval.interrupt_id}/")
    assert response.status == 404


def test_enter_in_the_reason_rejects_and_never_approves(demo, signed_in):
    # given a pending refund open on the approval page
    approval = refund_run_waiting().approval
    sam = signed_in("sam")
    sam.set_viewport_size({"width": 390, "height": 844})
    sam.click(f"[data-interrupt='{approval.interrupt_id}'] a")
    screenshot(sam, "approval-phone")

    # when sam types a reason and presses Enter in its field
    sam.fill("#reason", "the parcel came back unopened")
    sam.press("#reason", "Enter")
    sam.wait_for_selector(".messages")

    # then the call is rejected with that reason, and nothing was paid
    approval.refresh_from_db()
    assert (approval.status, approval.reason) == (
        ApprovalStatus.REJECTED,
        "the parcel came back unopened",
    )
    assert not Refund.objects.exists()
    assert "Rejected" in sam.inner_text(".messages")


def test_the_email_link_opens_the_call_and_reads_as_words(demo, signed_in, live_server, settings):
    # given the portal's address, and a refund that reaches the supervisors by email
    settings.AGENTPORTAL = {**settings.AGENTPORTAL, "SITE_URL": live_server.url}
    mail.outbox.clear()
    approval = refund_run_waiting().approval
    outbox.deliveries_deliver_due()
    (email,) = [email for email in mail.outbox if email.to == ["sam@example.com"]]
    links = [
        line.removeprefix("The call in the portal: ")
        for line in email.body.splitlines()
        if line.startswith("The call in the portal: ")
    ]

    # when sam follows the link from his mail client
    sam = signed_in("sam")
    sam.goto(links[0])

    # then it is the call's page, and the mail named the arguments as a person reads them
    assert links == [f"{live_server.url}/portal/approvals/{approval.interrupt_id}/"]
    assert "ORD-1003" in sam.inner_text("#proposed-args")
    assert "  order id: ORD-1003" in email.body.splitlines()
    assert "{" not in email.body


def test_a_page_that_does_not_exist_says_so_in_the_portals_own_page(demo, signed_in, live_server):
    # when sam opens a call that does not exist
    sam = signed_in("sam")
    response = sam.goto(f"{live_server.url}/portal/approvals/int-doesnotexist/")

    # then he gets the portal's page saying so, with a way back
    assert response.status == 404
    assert sam.title() == "Page not found · Agent Portal"
    assert sam.inner_text("h1") == "We could not find that page"
    sam.click("text=Go to your start page")
    assert sam.url == f"{live_server.url}/portal/"
