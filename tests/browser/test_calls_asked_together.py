"""Two refunds asked for in one message wait together: the supervisor's inbox shows them side
by side, and deciding one leaves the other waiting, which its page then says."""

import pytest
from django.contrib.auth.models import User

from approvals.models import Approval, ApprovalStatus
from runs import worker
from runs.models import AgentRun, RunStatus
from tests import factories
from tests.approvals.policy_helpers import big_order
from tests.browser.conftest import screenshot

pytestmark = pytest.mark.django_db(transaction=True)

PHONE = {"width": 390, "height": 844}
DESKTOP = {"width": 1280, "height": 900}


@pytest.fixture
def two_refunds(demo) -> list[Approval]:
    big_order(demo, "ORD-9001", total="500.00")
    big_order(demo, "ORD-9002", total="500.00")
    run = factories.run_queue(
        customer=User.objects.get(username="alice"),
        merchant=demo,
        message="I want a refund for ORD-9001 amount 5 and for ORD-9002 amount 6",
    )
    worker.tick()
    return list(Approval.objects.filter(run=run).order_by("tool_execution_key"))


def test_deciding_one_of_two_calls_asked_together_leaves_the_other_waiting(two_refunds, signed_in):
    first, second = two_refunds
    sam = signed_in("sam")

    # the inbox shows both, one after the other
    assert "1 of 2 asked for together" in sam.inner_text(f"[data-interrupt='{first.interrupt_id}']")
    assert "2 of 2 asked for together" in sam.inner_text(
        f"[data-interrupt='{second.interrupt_id}']"
    )
    sam.set_viewport_size(PHONE)
    screenshot(sam, "together-inbox-phone")
    sam.set_viewport_size(DESKTOP)
    screenshot(sam, "together-inbox-desktop")

    # when sam approves the first
    sam.click(f"[data-interrupt='{first.interrupt_id}'] a")
    assert "waiting for a decision" in sam.inner_text("#siblings")
    sam.click("#typed-form button[value=approve]")

    # then the first is approved, the second still waits, and so does the run, as sam is told
    assert "once the calls asked for together with it are decided" in sam.inner_text(".messages")
    assert "ORD-9002" in sam.inner_text("#siblings")
    screenshot(sam, "together-first-approved-desktop")
    sam.set_viewport_size(PHONE)
    screenshot(sam, "together-first-approved-phone")
    assert Approval.objects.get(pk=first.pk).status == ApprovalStatus.APPROVED_EXECUTING
    assert Approval.objects.get(pk=second.pk).status == ApprovalStatus.PENDING_APPROVAL
    assert AgentRun.objects.get(pk=first.run_id).status == RunStatus.WAITING_APPROVAL
