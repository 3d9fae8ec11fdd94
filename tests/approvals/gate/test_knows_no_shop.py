"""The gate on tool calls knows tools by name and arguments only: nothing of the shop's orders,
refunds, stock or exchange plans, which reach it through a tool's review."""

import re
from pathlib import Path

from approvals.gate.decision_context import call_label, readable_arguments, revision_concerns
from approvals.gate.reviews import call_review
from approvals.models import Approval

GATE = Path(__file__).resolve().parents[3] / "approvals" / "gate"
SHOP_WORDS = re.compile(r"refund|order_id|ORD-|\border\b|sku|stock|ticket|exchange", re.I)
# "order" as in an order of things: the lock order, the model's order, in order.
ORDER_OF_THINGS = re.compile(r"(lock|model's|the|in) order\b", re.I)


def test_the_gate_names_nothing_of_the_shop():
    found = [
        f"{path.name}:{number}: {line.strip()}"
        for path in GATE.rglob("*.py")
        for number, line in enumerate(path.read_text().splitlines(), start=1)
        if SHOP_WORDS.search(ORDER_OF_THINGS.sub("", line))
    ]
    assert found == []


def test_a_tool_without_a_review_is_shown_by_its_name_and_arguments():
    # given a call of a tool that registered no review
    call = Approval(tool_name="grant_goodwill_credit", proposed_args={"credit_note": "x"})

    # then the gate shows it by its own words and adds no warning
    assert call_review("grant_goodwill_credit").facts is None
    assert call_label(call.tool_name) == "Grant goodwill credit"
    assert readable_arguments(call.tool_name, call.proposed_args) == [("Credit note", "x")]
    assert revision_concerns(call, {"credit_note": "y"}) == []


def test_the_shops_refund_speaks_through_its_review():
    review = call_review("issue_refund")
    assert review.label == "Refund" and review.amount_field == "amount"
    assert review.revision_check is not None and review.facts is not None
