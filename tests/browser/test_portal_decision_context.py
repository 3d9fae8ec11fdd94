"""A supervisor sees, on the call's page, what he needs to decide it: the order, the money
left to refund, what the customer said, and what is wrong with the call."""

import pytest
from django.contrib.auth.models import User

from approvals.models import Approval
from runs import worker
from tests import factories
from tests.browser.conftest import screenshot

pytestmark = pytest.mark.django_db(transaction=True)

PHONE = {"width": 390, "height": 844}
DESKTOP = {"width": 1280, "height": 900}


def test_a_refund_above_the_order_is_flagged_beside_the_order_and_what_was_said(demo, signed_in):
    # given alice asks for 200.00 back on her 149.00 rain jacket (ORD-1004)
    alice = User.objects.get(username="alice")
    run = factories.run_queue(
        customer=alice, merchant=demo, message="I want a refund for ORD-1004 amount 200"
    )
    worker.tick()
    approval = Approval.objects.get(run=run)

    # when sam opens the call from his inbox
    sam = signed_in("sam")
    sam.set_viewport_size(DESKTOP)
    assert "200.00 EUR" in sam.inner_text(f"[data-interrupt='{approval.interrupt_id}']")
    sam.click(f"[data-interrupt='{approval.interrupt_id}'] a")

    # then the warning, the order's item and the money left are in view before the decision
    warnings = sam.locator("#warnings")
    assert warnings.is_visible()
    assert "more than the 149.00 EUR still refundable on ORD-1004" in warnings.inner_text()
    assert "Rain jacket" in sam.inner_text("#order-items")
    assert "149.00 EUR" in sam.inner_text("#order-figures")
    assert "amount 200" in sam.inner_text("#transcript")
    above = sam.locator("#decision-context").bounding_box()["y"]
    assert above < sam.locator("#decision-form").bounding_box()["y"]
    screenshot(sam, "approval-context-desktop")

    # and on a phone it reads without sideways scrolling
    sam.set_viewport_size(PHONE)
    screenshot(sam, "approval-context-phone")
    assert sam.evaluate("() => document.documentElement.scrollWidth") <= PHONE["width"]
    assert sam.locator("#warnings").is_visible()
