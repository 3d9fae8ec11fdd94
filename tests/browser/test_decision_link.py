"""A supervisor on a phone, signed out, decides from the links in their email: the link's
page asks to confirm, the button decides once, and the same link later says it was used."""

import pytest

from approvals.models import Approval, ApprovalStatus, DecisionLink, Refund
from runs import worker
from tests.approvals.refund_helpers import refund_run_waiting
from tests.browser.conftest import screenshot

pytestmark = pytest.mark.django_db(transaction=True)

PHONE = {"width": 390, "height": 844}


def link_of(approval: Approval, username: str, decision: str) -> str:
    return DecisionLink.objects.get(
        approval=approval, user__username=username, decision=decision
    ).token


def fits(page) -> bool:
    return page.evaluate("() => document.documentElement.scrollWidth") <= PHONE["width"]


def test_sam_approves_from_his_phone_once(demo, browser, live_server):
    # given a refund waiting, and sam's approve link opened on a phone, signed out
    approval = refund_run_waiting().approval
    context = browser.new_context(viewport=PHONE)
    link = f"{live_server.url}/portal/decide/{link_of(approval, 'sam', 'approve')}/"
    page, stale = context.new_page(), context.new_page()
    page.goto(link)
    stale.goto(link)

    # then the page names the decision and its amount, and decides nothing yet
    screenshot(page, "decision-link-confirm-phone")
    assert page.locator("h1").inner_text() == "Approve 20.00 EUR?"
    assert "ORD-1003" in page.locator("#link-args").inner_text()
    assert "You decide as sam" in page.inner_text("#link-form")
    assert fits(page)
    assert Approval.objects.get(pk=approval.pk).status == ApprovalStatus.PENDING_APPROVAL

    # when he presses the button, and a worker continues
    page.click("#link-confirm")
    page.wait_for_selector("#link-message")
    screenshot(page, "decision-link-done-phone")
    worker.tick()

    # then it says so, and the refund was paid once, approved by sam
    assert "Approved" in page.inner_text("#link-message")
    approval.refresh_from_db()
    assert (approval.status, approval.decided_by_name) == (ApprovalStatus.EXECUTED, "sam")
    assert Refund.objects.count() == 1

    # when he presses the button of the same link opened in another tab, and follows it again
    stale.click("#link-confirm")
    stale.wait_for_selector("#link-message")
    screenshot(stale, "decision-link-used-phone")
    page.goto(link)

    # then both say the link was used, and nothing more was paid
    assert "You used this link" in stale.inner_text("#link-message")
    assert "You used this link" in page.inner_text("#link-message")
    assert page.locator("#link-confirm").count() == 0
    assert fits(stale)
    assert Refund.objects.count() == 1
    context.close()


def test_sue_rejects_from_her_link_with_a_reason_and_enter(demo, browser, live_server):
    # given sue's reject link, signed out
    approval = refund_run_waiting().approval
    page = browser.new_context(viewport=PHONE).new_page()
    page.goto(f"{live_server.url}/portal/decide/{link_of(approval, 'sue', 'reject')}/")

    # when she presses Enter with no reason, then types one and presses Enter
    page.press("#reason", "Enter")
    unchanged = Approval.objects.get(pk=approval.pk).status
    page.fill("#reason", "The order was never paid")
    screenshot(page, "decision-link-reject-phone")
    page.press("#reason", "Enter")
    page.wait_for_selector("#link-message")

    # then only the second decided, as sue, with her reason
    assert unchanged == ApprovalStatus.PENDING_APPROVAL
    assert "Rejected" in page.inner_text("#link-message")
    approval.refresh_from_db()
    assert (approval.status, approval.decided_by_name, approval.reason) == (
        ApprovalStatus.REJECTED,
        "sue",
        "The order was never paid",
    )
    worker.tick()
    assert not Refund.objects.exists()
    page.context.close()
