"""Two supervisors decide a refund their shop's policy gives to two people, in a real browser:
the first approves and is told it waits for someone else, the second sees that approval
arrive in her inbox and gives the second."""

from datetime import timedelta

import pytest
from django.utils import timezone

from approvals.gate import escalation
from approvals.models import Approval, ApprovalStatus, ApprovalVote
from tests.approvals.policy_helpers import approval_of, big_order, policy_set, refund_run
from tests.browser.conftest import screenshot

pytestmark = pytest.mark.django_db(transaction=True)

PHONE = {"width": 390, "height": 844}
DESKTOP = {"width": 1280, "height": 900}


def _row(approval: Approval) -> str:
    return f"[data-interrupt='{approval.interrupt_id}']"


def _both_widths(page, name: str) -> None:
    """Screenshots at desktop and phone width; on the phone nothing scrolls sideways."""
    page.set_viewport_size(DESKTOP)
    screenshot(page, f"{name}-desktop")
    page.set_viewport_size(PHONE)
    screenshot(page, f"{name}-phone")
    assert page.evaluate("() => document.documentElement.scrollWidth") <= PHONE["width"], name
    page.set_viewport_size(DESKTOP)


def test_sam_approves_first_and_waits_then_sue_sees_it_in_her_inbox_and_approves(
    large_refund, signed_in
):
    sam, sue = signed_in("sam"), signed_in("sue")
    row = _row(large_refund)
    assert "needs 2 approvals" in sue.inner_text(row)
    sue.evaluate("window.notReloaded = true")

    # when sam opens the call from his inbox and approves it
    sam.click(f"{row} a")
    assert "Needs 2 approvals: none given yet." in sam.inner_text("#approvals")
    sam.click("#typed-form button[value=approve]")

    # then he is told it waits for another supervisor, and is offered no second approval
    assert "another supervisor must approve it too" in sam.inner_text(".messages")
    assert "Needs 2 approvals: 1 given by sam" in sam.inner_text("#approvals")
    assert sam.inner_text("#approved-by-you") == (
        "You approved this; it waits for another supervisor."
    )
    assert sam.locator("button[value=approve]").count() == 0
    assert sam.locator("button[value=reject]").count() == 1
    assert "starts the count again" in sam.inner_text("#revise-hint")
    assert "Policy: two approvers from 200.00 (version 1)" in sam.inner_text("#policy")
    _both_widths(sam, "four-eyes-approved-once")
    large_refund.refresh_from_db()
    assert large_refund.status == ApprovalStatus.PENDING_APPROVAL

    # then sue's open inbox shows sam's approval within a couple of seconds, without a reload
    sue.wait_for_selector(f"{row} :text('1 of 2 approvals: sam')", timeout=3000)
    assert sue.locator(f"{row} .waiting-for-another").count() == 0
    assert sue.evaluate("window.notReloaded") is True
    _both_widths(sue, "four-eyes-inbox-second-supervisor")

    # and sam's inbox says it waits for someone else
    sam.goto(sue.url)
    assert "1 of 2 approvals: you\nWaiting for another supervisor" in sam.inner_text(row)
    _both_widths(sam, "four-eyes-inbox-first-supervisor")

    # when sue opens it, sam's open page waiting on it meanwhile
    sam.go_back()
    sue.click(f"{row} a")
    assert "Needs 2 approvals: 1 given by sam" in sue.inner_text("#approvals")
    assert sue.locator("#approved-by-you").count() == 0
    _both_widths(sue, "four-eyes-second-approval")
    sam.evaluate("window.notReloaded = true")
    sue.click("#typed-form button[value=approve]")

    # then the call is approved by both and runs
    assert "Approved: the agent carries on and runs the call." in sue.inner_text(".messages")
    assert "Approvals given: sam at" in sue.inner_text("#approvals")
    assert ", sue at" in sue.inner_text("#approvals")
    _both_widths(sue, "four-eyes-approved-twice")
    large_refund.refresh_from_db()
    assert large_refund.status in (ApprovalStatus.APPROVED_EXECUTING, ApprovalStatus.EXECUTED)
    assert large_refund.decided_by.username == "sue"
    voters = ApprovalVote.objects.filter(approval=large_refund).values_list(
        "user__username", flat=True
    )
    assert sorted(voters) == ["sam", "sue"]

    # and sam's page, open all along, says so without a reload
    sam.wait_for_selector("#approval-status:text-matches('APPROVED')", timeout=3000)
    assert "decided by sue (approve)" in sam.inner_text("#page")
    assert sam.evaluate("window.notReloaded") is True


def test_sams_changes_count_as_his_approval_and_sue_approves_what_he_changed(
    large_refund, signed_in, live_server
):
    # when sam lowers the amount in the typed form, reviews it and approves his revision
    sam = signed_in("sam")
    sam.click(f"{_row(large_refund)} a")
    sam.fill("#id_arg-amount", "350.00")
    sam.click("#typed-form button[value=preview]")
    sam.click("button[value=revise]")

    # then his revision is his approval, and the call waits for a second one
    assert "Your changes count as your approval (1 of 2 approvals)" in sam.inner_text(".messages")
    assert sam.locator("button[value=approve]").count() == 0

    # when sue opens it, she is offered sam's changes, in the form too
    sue = signed_in("sue")
    sue.goto(f"{live_server.url}/portal/approvals/{large_refund.interrupt_id}/")
    assert "1 given by sam (with changes)" in sue.inner_text("#approvals")
    assert "350.00 EUR" in sue.inner_text("#approved-args")
    assert sue.inner_text("#typed-form button[value=approve]") == (
        "Approve sam's changes: 350.00 EUR"
    )
    assert sue.input_value("#id_arg-amount") == "350.00"
    _both_widths(sue, "four-eyes-revised-by-the-first")
    sue.click("#typed-form button[value=approve]")

    # then the revision is what was approved
    large_refund.refresh_from_db()
    assert large_refund.status in (ApprovalStatus.APPROVED_EXECUTING, ApprovalStatus.EXECUTED)
    assert large_refund.approved_args["amount"] == "350.00"


def test_an_escalated_call_is_marked_and_comes_first(demo, signed_in):
    # given a small refund, then a large one nobody decided in time
    policy_set(demo, two_approvers_from="200.00", escalate_after_seconds=600)
    big_order(demo)
    small = approval_of(refund_run(demo, "20"))
    late = approval_of(refund_run(demo, "500", order="ORD-9001"))
    Approval.objects.filter(pk=late.pk).update(escalate_at=timezone.now() - timedelta(seconds=1))
    assert escalation.approval_escalate(interrupt_id=late.interrupt_id)

    # when sue opens her inbox, and the escalated call
    sue = signed_in("sue")
    rows = sue.locator("#inbox-rows tr")

    # then it is first, marked escalated with the time
    assert rows.nth(0).get_attribute("data-interrupt") == late.interrupt_id
    assert rows.nth(1).get_attribute("data-interrupt") == small.interrupt_id
    assert sue.inner_text(f"{_row(late)} .badge").startswith("Escalated at ")
    assert sue.locator(f"{_row(small)} .badge").count() == 0
    _both_widths(sue, "four-eyes-inbox-escalated")
    sue.click(f"{_row(late)} a")
    assert sue.inner_text("#escalated").startswith("Escalated at ")
    assert "escalated after 10\xa0minutes undecided" in sue.inner_text("#policy")
    _both_widths(sue, "four-eyes-escalated-call")
