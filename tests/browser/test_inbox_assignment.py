"""A supervisor takes a call from the inbox on a phone, and a colleague's call page says so."""

import pytest

from approvals.models import Approval
from tests.approvals.refund_helpers import refund_run_waiting
from tests.browser.conftest import screenshot

pytestmark = pytest.mark.django_db(transaction=True)

PHONE = {"width": 390, "height": 844}


def test_sam_takes_a_call_from_his_inbox_and_sue_sees_it_is_his(demo, signed_in, live_server):
    # given a call nobody has, and sam's inbox on a phone
    approval = refund_run_waiting().approval
    sam = signed_in("sam")
    sam.set_viewport_size(PHONE)
    sam.goto(f"{live_server.url}/portal/?view=unassigned")
    row = sam.locator(f"[data-interrupt='{approval.interrupt_id}']")
    screenshot(sam, "inbox-unassigned-phone")

    # when he presses "I'm on it"
    row.get_by_role("button", name="I'm on it").click()
    sam.wait_for_selector("text=You are on it")
    screenshot(sam, "inbox-claimed-phone")

    # then the call is his, and gone from the "unassigned" view he came back to
    assert Approval.objects.get(pk=approval.pk).assigned_user.username == "sam"
    assert "view=unassigned" in sam.url
    assert sam.locator(f"[data-interrupt='{approval.interrupt_id}']").count() == 0
    assert "Unassigned (0)" in sam.inner_text("#inbox-views")
    assert sam.evaluate("() => document.documentElement.scrollWidth") <= PHONE["width"]

    # and sue's page of the call says sam has it, and offers to take it over
    sue = signed_in("sue")
    sue.goto(f"{live_server.url}/portal/approvals/{approval.interrupt_id}/")
    screenshot(sue, "approval-assigned-desktop")
    assert "sam is on it since" in sue.inner_text("#assignment")
    assert sue.get_by_role("button", name="Take it over").is_visible()
