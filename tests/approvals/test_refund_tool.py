"""The refund executor: exact sums and one ledger row per call key."""

import uuid
from decimal import Decimal

import pytest
from django.contrib.auth.models import User

from approvals.models import Order, Refund
from approvals.shop.tools import IssueRefundArgs, issue_refund
from runs.tools import CancellationToken, ToolContext, ToolError

pytestmark = pytest.mark.django_db


def _context(demo, key: str) -> ToolContext:
    return ToolContext(
        run_id=uuid.uuid4(),
        merchant_id=demo.pk,
        account_id=User.objects.get(username="alice").pk,
        idempotency_key=key,
        cancel=CancellationToken(),
    )


def test_many_small_refunds_add_up_exactly(demo):
    # given an order refunded a cent at a time (floating point would drift on SQLite)
    args = IssueRefundArgs(order_id="ORD-1003", amount=Decimal("0.01"), reason="goodwill")

    # when ten calls each refund a cent, and one of them runs twice
    for index in range(10):
        issue_refund(args, _context(demo, f"agent:refunds:1:{index}"))
    again = issue_refund(args, _context(demo, "agent:refunds:1:3"))

    # then every cent was paid once, and the total is exact
    assert again["status"] == "executed"
    assert Refund.objects.count() == 10
    assert Order.objects.get(number="ORD-1003").refunded == Decimal("0.10")


def test_another_customers_order_is_refused_whoever_approved_it(demo):
    # given alice's run, and an approved refund naming bob's order
    args = IssueRefundArgs(order_id="ORD-2001", amount=Decimal("20.00"), reason="goodwill")

    # when it is carried out, then the executor refuses and nothing is paid
    with pytest.raises(ToolError, match="no order ORD-2001 for this customer"):
        issue_refund(args, _context(demo, "agent:refunds:2:0"))
    assert Refund.objects.count() == 0
    assert Order.objects.get(number="ORD-2001").refunded == Decimal("0.00")
