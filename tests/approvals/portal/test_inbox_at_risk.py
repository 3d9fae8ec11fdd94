"""The inbox lists the calls at risk of expiring first, the soonest first, and says so."""

from datetime import timedelta

import pytest
from django.utils import timezone

from approvals.models import Approval
from tests.approvals.refund_helpers import refund_run_waiting
from tests.pages import inbox_rows, page_text, signed_in


@pytest.fixture
def older_and_at_risk(demo) -> tuple[Approval, Approval, Approval]:
    """alice's refund waiting longest, bob's newer one expiring in 4 minutes, and alice's
    second expiring in 8."""
    oldest = refund_run_waiting("refund ORD-1003 amount 20").approval
    soonest = refund_run_waiting("refund ORD-2001 amount 99", customer="bob").approval
    later = refund_run_waiting("refund ORD-1004 amount 30").approval
    now = timezone.now()
    Approval.objects.filter(pk=oldest.pk).update(created_at=now - timedelta(minutes=20))
    for approval, minutes in ((soonest, 4), (later, 8)):
        Approval.objects.filter(pk=approval.pk).update(
            expires_at=now + timedelta(minutes=minutes, seconds=30)
        )
    return oldest, soonest, later


@pytest.mark.django_db
@pytest.mark.parametrize("sort", ["age", "amount"])
def test_calls_about_to_expire_come_first_in_either_order(older_and_at_risk, sort):
    oldest, soonest, later = older_and_at_risk

    # when
    page = signed_in("sam").get(f"/portal/?sort={sort}")

    # then the two at risk lead, the soonest first, each saying when it expires
    assert inbox_rows(page) == [soonest.interrupt_id, later.interrupt_id, oldest.interrupt_id]
    text = page_text(page)
    assert text.count('class="badge at-risk"') == 2
    assert "Expires in 4 minutes" in text
    assert "Expires in 8 minutes" in text
