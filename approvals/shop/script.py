"""The after-sales script the offline scripted model plays (DESIGN 8), registered with the
runtime at start-up."""

import re
from decimal import Decimal, InvalidOperation

from runs.scripted import Transcript

ORDER_ID = re.compile(r"\bORD-\d+\b", re.IGNORECASE)
AMOUNT = re.compile(r"\bamount\s*[:=]?\s*(\d+(?:\.\d{1,2})?)", re.IGNORECASE)
# "ORD-1001 amount 5": one refund of several asked for in one message.
ORDER_AMOUNT = re.compile(r"\b(ORD-\d+)\b\s*(?:for\s+)?amount\s*[:=]?\s*(\d+(?:\.\d{1,2})?)", re.I)
SIZE = re.compile(r"\bsize\s*[:=]?\s*(\d+(?:\.\d)?)", re.IGNORECASE)


def _order_id(turn: Transcript) -> str | None:
    """The order the customer means: the newest one they named."""
    for text in turn.said:
        found = ORDER_ID.search(text)
        if found:
            return found.group(0).upper()
    return None


def after_sales_script(
    turn: Transcript, declared: set[str]
) -> str | tuple[str, dict] | list[tuple[str, dict]]:
    """The after-sales script of DESIGN 8: the customer's latest message decides the intent,
    the tool results since then decide the next move; only declared tools are called."""
    order_id = _order_id(turn)
    text = turn.text.lower()
    if order_id is None:
        if "request_clarification" in declared and "request_clarification" not in turn.results:
            return ("request_clarification", {"question": "Which order is this about?"})
        return "Which order is this about? Please tell me its number, like ORD-1001."

    def call(name: str, arguments: dict) -> tuple[str, dict] | str:
        if name not in declared:
            return f"I can't do that here: {name.replace('_', ' ')} is not available to me."
        return (name, arguments)

    if "follow up" in text or "follow-up" in text or "followup" in text:
        if "create_followup_request" not in turn.results:
            return call("create_followup_request", {"order_id": order_id, "note": turn.text[:500]})
        return _followup_answer(order_id, turn.results["create_followup_request"])

    refunds = ORDER_AMOUNT.findall(turn.text)
    if "refund" in text and len(refunds) > 1 and "issue_refund" in declared:
        # Several refunds named with their amounts: asked for together, in one turn.
        done = turn.all_results.get("issue_refund", [])
        if not done:
            return [
                (
                    "issue_refund",
                    {"order_id": number.upper(), "amount": amount, "reason": "customer request"},
                )
                for number, amount in refunds
            ]
        return " ".join(
            _refund_answer(number.upper(), result)
            for (number, _), result in zip(refunds, done, strict=False)
        )

    if "lookup_order" not in turn.results:
        return call("lookup_order", {"order_id": order_id})
    order = turn.results["lookup_order"]
    if "error" in order:
        return f"I could not find order {order_id}: {order['error']}"

    if "refund" in text:
        if "issue_refund" not in turn.results:
            amount = _amount(turn.text) or order.get("refundable", "0.00")
            return call(
                "issue_refund",
                {"order_id": order_id, "amount": str(amount), "reason": "customer request"},
            )
        return _refund_answer(order_id, turn.results["issue_refund"], order.get("currency"))

    size = SIZE.search(turn.text)
    if "exchange" in text and size and order.get("items"):
        item = order["items"][0]
        if "check_exchange_eligibility" not in turn.results:
            return call(
                "check_exchange_eligibility",
                {"order_id": order_id, "sku": item["sku"], "new_size": size.group(1)},
            )
        eligibility = turn.results["check_exchange_eligibility"]
        if not eligibility.get("eligible"):
            reason = eligibility.get("reason") or eligibility.get("error") or "not eligible"
            return f"Order {order_id} cannot be exchanged: {reason}."
        if "create_exchange_proposal" not in turn.results:
            return call(
                "create_exchange_proposal",
                {
                    "order_id": order_id,
                    "items": [
                        {
                            "sku": item["sku"],
                            "new_sku": eligibility["new_sku"],
                            "quantity": item.get("quantity", 1),
                        }
                    ],
                },
            )
        return _proposal_answer(order_id, turn.results["create_exchange_proposal"])

    if "stock" in text and order.get("items"):
        item = order["items"][0]
        if "check_stock" not in turn.results:
            wanted = size.group(1) if size else item.get("size", "")
            return call("check_stock", {"sku": item["sku"], "size": str(wanted)})
        return _stock_answer(order_id, item, turn.results["check_stock"])

    return _order_answer(order)


def _amount(text: str) -> str | None:
    found = AMOUNT.search(text)
    if not found:
        return None
    try:
        return str(Decimal(found.group(1)).quantize(Decimal("0.01")))
    except InvalidOperation:
        return None


def _order_answer(order: dict) -> str:
    items = ", ".join(
        f"{item['name']}{_size(item)} x {item['quantity']}" for item in order["items"]
    )
    return (
        f"Order {order['order_id']} is {order['status'].lower()}. It holds {items}; "
        f"total {_money(order['total'], order)}, of which "
        f"{_money(order['refundable'], order)} can still be refunded."
    )


def _size(item: dict) -> str:
    """` (size 42)`; nothing for an item that comes in one size."""
    size = str(item.get("size") or "")
    return f" (size {size})" if size and size.lower() != "one size" else ""


def _money(amount, result: dict) -> str:
    """An amount with the currency its tool result names."""
    currency = result.get("currency")
    return f"{amount} {currency}" if currency else str(amount)


def _refund_answer(order_id: str, result: dict, currency: str | None = None) -> str:
    status = result.get("status")
    if status == "executed":
        return (
            f"Done: a refund of {_money(result.get('amount'), result)} for order {order_id} "
            "has been issued."
        )
    if status == "rejected":
        return (
            f"A supervisor declined the refund for order {order_id}: "
            f"{result.get('reason') or 'no reason given'}."
        )
    if status == "expired":
        return (
            f"Nobody could approve the refund for order {order_id} in time, so nothing was "
            "refunded. Please ask again and we will take another look."
        )
    if status == "failed" and (result.get("tool_args") or {}).get("amount"):
        # Approved, then refused by the refund itself: with the amount it was approved at.
        amount = _money(result["tool_args"]["amount"], {"currency": currency})
        return (
            f"The refund of {amount} for order {order_id} could not be made: "
            f"{result.get('error')}. Nothing was paid."
        )
    return f"The refund for order {order_id} did not go through: {result.get('error', status)}."


def _proposal_answer(order_id: str, result: dict) -> str:
    if "error" in result:
        return f"I could not prepare an exchange for order {order_id}: {result['error']}."
    status = result.get("status")
    if status == "approved":
        return (
            f"Your exchange for order {order_id} is approved: {result.get('summary', '')}. "
            "We will send the new item as soon as we receive the old one."
        )
    if status == "rejected":
        return (
            f"A supervisor declined the exchange for order {order_id}: "
            f"{result.get('note') or 'no reason given'}."
        )
    if status == "cancelled":
        return f"The exchange plan for order {order_id} was cancelled; nothing will change."
    return (
        f"I have prepared an exchange plan for order {order_id}: {result.get('summary', '')}. "
        "Please confirm it; a supervisor will then approve it."
    )


def _followup_answer(order_id: str, result: dict) -> str:
    if "error" in result:
        return f"I could not register a follow-up for order {order_id}: {result['error']}."
    return f"A colleague will follow up on order {order_id} by {result.get('due_at', 'soon')}."


def _stock_answer(order_id: str, item: dict, result: dict) -> str:
    if "error" in result:
        return f"I could not check the stock for order {order_id}: {result['error']}."
    size = _size({"size": result.get("size")})
    return f"For order {order_id}: {result['in_stock']} of {item['name']}{size} in stock."
