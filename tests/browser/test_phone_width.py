"""Every page people use fits a 390 px phone: no sideways scrolling, and the main actions
big enough to tap. Screenshots of each page at phone and desktop width go to
artifacts/screenshots/ for a person to look at."""

import pytest
from django.contrib.auth.models import User

from approvals.models import Approval, Ticket
from runs import worker
from tests import factories
from tests.approvals.plan_helpers import exchange_run
from tests.browser.conftest import screenshot

pytestmark = pytest.mark.django_db(transaction=True)

PHONE = {"width": 390, "height": 844}
DESKTOP = {"width": 1280, "height": 900}
# WCAG 2.2's least target size for a pointer, in CSS pixels.
TAP = 24


def _fits_and_taps(page, name: str, actions: list[str]) -> None:
    page.set_viewport_size(DESKTOP)
    screenshot(page, f"{name}-desktop")
    text = page.inner_text("body")
    assert "{#" not in text and "{%" not in text, f"{name} shows template code"
    page.set_viewport_size(PHONE)
    screenshot(page, f"{name}-phone")
    assert page.evaluate("() => document.documentElement.scrollWidth") <= PHONE["width"], name
    for action in actions:
        box = page.locator(action).first.bounding_box()
        assert box is not None, f"{name}: {action} is not shown"
        assert box["width"] >= TAP and box["height"] >= TAP, (name, action, box)


def test_chat_inbox_approval_and_plan_pages_fit_a_phone(demo, signed_in, live_server):
    # given a refund waiting for a supervisor and a plan waiting for its customer
    alice_user = User.objects.get(username="alice")
    factories.run_queue(
        customer=alice_user, merchant=demo, message="I want a refund for ORD-1003 amount 20"
    )
    worker.tick()
    approval = Approval.objects.get()
    ticket = Ticket.objects.get(run=exchange_run(demo))
    alice = signed_in("alice")
    sam = signed_in("sam")

    # then each page fits and its actions can be tapped
    alice.goto(f"{live_server.url}/portal/chat/")
    _fits_and_taps(
        alice,
        "page-chat",
        ["#chat-form button[type=submit]", "#chat-text", "#stop-form button", "#new-form button"],
    )
    alice.goto(f"{live_server.url}/portal/requests/")
    _fits_and_taps(alice, "page-requests", ["#back-to-chat"])
    alice.goto(f"{live_server.url}/portal/tickets/{ticket.pk}/")
    _fits_and_taps(alice, "page-plan-customer", ["button[value=confirm]", "button[value=changes]"])
    sam.goto(f"{live_server.url}/portal/")
    _fits_and_taps(sam, "page-inbox", [f"[data-interrupt='{approval.interrupt_id}'] a"])
    sam.goto(f"{live_server.url}/portal/approvals/{approval.interrupt_id}/")
    _fits_and_taps(
        sam,
        "page-approval",
        ["button[value=approve]", "#typed-form button[value=preview]", "button[value=reject]"],
    )
