"""The after-sales items in the customer's words: amounts with their currency, what a person
of the shop decided about a request, an exchange plan's lines, where a request stands. The
customer's pages and emails say these; no status name, stock code or shop slug reaches them."""

from decimal import Decimal, InvalidOperation
from typing import Any

from approvals.models import Approval, ApprovalStatus, Decision, Order, TicketStatus
from runs.models import MessageStatus, RunStatus

# What a call does, in the customer's words.
CALL_NAMES = {"issue_refund": "refund"}


def money(amount: Any, currency: str) -> str:
    """`25.00 EUR`; an amount that is not a number is shown as it came."""
    try:
        return f"{Decimal(str(amount)):.2f} {currency}"
    except InvalidOperation:
        return f"{amount} {currency}"


def call_name(tool_name: str) -> str:
    return CALL_NAMES.get(tool_name, tool_name.replace("_", " "))


def call_described(approval: Approval, currency: str) -> str:
    """`your refund of 30.00 EUR for ORD-1001`, as the customer asked for it."""
    arguments = approval.proposed_args
    if approval.tool_name == "issue_refund":
        return (
            f"your refund of {money(arguments.get('amount'), currency)} "
            f"for {arguments.get('order_id')}"
        )
    return f"your {call_name(approval.tool_name)} request"


def decision_told(approval: Approval, currency: str, shop: str) -> str | None:
    """What a person of the shop decided about the call, when the customer must hear it from
    us: a changed amount, a refusal, nobody in time, an approval the tool then refused; None
    while nothing was decided, or when it went ahead as asked (the assistant's answer says
    so). Nothing here says money moved unless the call executed."""
    what = call_described(approval, currency)
    if approval.status == ApprovalStatus.FAILED:
        return _refusal_told(approval, currency, shop)
    if approval.status == ApprovalStatus.REJECTED:
        return f"{shop} declined {what}{_because(approval.reason)}"
    if approval.status == ApprovalStatus.EXPIRED:
        return f"Nobody at {shop} could decide on {what} in time, so nothing was done."
    if approval.decision == Decision.REVISE and approval.status in (
        ApprovalStatus.APPROVED_EXECUTING,
        ApprovalStatus.EXECUTED,
    ):
        return _revision_told(approval, currency, shop)
    return None


def _revision_told(approval: Approval, currency: str, shop: str) -> str | None:
    asked = approval.proposed_args.get("amount")
    given = (approval.executed_args or approval.approved_args or {}).get("amount")
    because = _because(approval.reason)
    if (
        approval.tool_name != "issue_refund"
        or given is None
        or money(asked, "") == money(given, "")
    ):
        return f"{shop} changed {call_described(approval, currency)} before approving it{because}"
    number = approval.proposed_args.get("order_id")
    if approval.status == ApprovalStatus.EXECUTED:
        return (
            f"We refunded {money(given, currency)} instead of {money(asked, currency)} "
            f"for {number}{because}"
        )
    # Approved, not yet paid: the refund may still be refused, so nothing is said as paid.
    return (
        f"{shop} approved a refund of {money(given, currency)} instead of "
        f"{money(asked, currency)} for {number}{because}"
    )


def _tried(approval: Approval) -> dict[str, Any]:
    """The arguments the call was carried out with, or would have been."""
    return approval.executed_args or approval.approved_args or approval.proposed_args


def _refusal_told(approval: Approval, currency: str, shop: str) -> str:
    """An approved call the tool refused when it was carried out: nothing was done, and why."""
    because = _because(str((approval.result or {}).get("error", "")))
    if approval.tool_name != "issue_refund":
        what = _capitalized(call_described(approval, currency))
        return f"{what} could not be carried out{because}"
    asked = approval.proposed_args.get("amount")
    tried = _tried(approval).get("amount")
    number = approval.proposed_args.get("order_id")
    if money(asked, "") != money(tried, ""):
        return (
            f"{shop} approved {money(tried, currency)} instead of {money(asked, currency)} for "
            f"{number}, but the refund could not be made{because}"
        )
    return f"Your refund of {money(tried, currency)} for {number} could not be made{because}"


def _capitalized(text: str) -> str:
    return text[:1].upper() + text[1:]


def _because(reason: str) -> str:
    """`: <reason>.` ending the sentence that names a decision, or just its full stop."""
    reason = reason.strip()
    if not reason:
        return "."
    return f": {reason}" if reason[-1] in ".!?" else f": {reason}."


def decision_email(approval: Approval, currency: str, shop: str) -> tuple[str, str]:
    """The subject and the first lines of the email that tells the customer a decision."""
    what = call_described(approval, currency)
    told = decision_told(approval, currency, shop)
    if approval.status == ApprovalStatus.FAILED:
        if approval.tool_name != "issue_refund":
            return f"{_capitalized(what)} could not be carried out", told
        tried = money(_tried(approval).get("amount"), currency)
        number = approval.proposed_args.get("order_id")
        return f"Your refund of {tried} for {number} could not be made", told
    if approval.status == ApprovalStatus.REJECTED:
        return f"{shop} declined {what}", told
    if approval.status == ApprovalStatus.EXPIRED:
        return f"No decision in time on {what}", f"{told} You are welcome to ask again."
    if told is not None:
        return f"{shop} approved {what}, changed", told
    return f"{shop} approved {what}", f"{shop} approved {what}. The assistant carries it out now."


def currencies_of(approvals: list[Approval]) -> dict[tuple[int, str], str]:
    """The currency of each order the calls name, by (shop, order number), in one query."""
    numbers = {str(a.proposed_args.get("order_id", "")).upper() for a in approvals}
    shops = {a.merchant_id for a in approvals}
    rows = Order.objects.filter(merchant_id__in=shops, number__in=numbers).values_list(
        "merchant_id", "number", "currency"
    )
    return {(shop, number): currency for shop, number, currency in rows}


def currency_of(approval: Approval, currencies: dict[tuple[int, str], str]) -> str:
    number = str(approval.proposed_args.get("order_id", "")).upper()
    return currencies.get((approval.merchant_id, number), Order._meta.get_field("currency").default)


def on_the_table(approval: Approval) -> tuple[Any, str]:
    """The amount approving the call now would approve (None when it has none), and its
    currency."""
    currency = currency_of(approval, currencies_of([approval]))
    return approval.arguments_on_the_table.get("amount"), currency


def decision_named(approval: Approval, decision: str) -> str:
    """An email link's decision as its button says it: "Approve 20.00 EUR", "Reject 20.00 EUR"."""
    verb = "Reject" if decision == Decision.REJECT else "Approve"
    amount, currency = on_the_table(approval)
    return f"{verb} {money(amount, currency)}" if amount else verb


def plan_lines(order: Order, items: list[dict[str, Any]]) -> list[str]:
    """An exchange plan's lines by the products' names and sizes:
    `1 x Trail running shoes, size 42, for size 43`."""
    bought = {line["sku"]: line for line in order.items}
    lines = []
    for item in items:
        line = bought.get(item["sku"], {})
        name = line.get("name", "an item")
        size = line.get("size", "")
        new_size = item["new_sku"].rpartition("-")[2]
        if size and new_size and new_size != item["new_sku"]:
            lines.append(f"{item['quantity']} x {name}, size {size}, for size {new_size}")
        else:
            lines.append(f"{item['quantity']} x {name}, for another of its kind")
    return lines


# Where a request stands, as the customer's list of requests and /status say it: each reads
# alone and after "Your request is".
RUN_STANDING = {
    RunStatus.QUEUED: "sent, waiting its turn",
    RunStatus.RUNNING: "being answered",
    RunStatus.WAITING_USER: "waiting for your answer",
    RunStatus.WAITING_APPROVAL: "waiting for a person of the shop",
    RunStatus.PARKED: "being looked into by a person of the shop",
    RunStatus.COMPLETED: "answered",
    RunStatus.FAILED: "not completed: something went wrong on our side",
    RunStatus.CANCELLED: "stopped",
}

# A message's own state beside it in the chat; a message being answered needs none.
MESSAGE_STANDING = {
    MessageStatus.QUEUED: "sent, answered after the one before",
    MessageStatus.HELD: "sent, a person of the shop will answer",
    MessageStatus.CANCELLED: "not answered: stopped",
}

# Where an exchange plan stands, for its customer; `{shop}` is the shop's name.
TICKET_STANDING = {
    TicketStatus.WAITING_CONFIRMATION: "waiting for your confirmation",
    TicketStatus.NEEDS_REVISION: "being changed by a person at {shop}, as you asked",
    TicketStatus.WAITING_REVIEW: "confirmed by you, waiting for a person at {shop} to approve it",
    TicketStatus.APPROVED: "approved by {shop}",
    TicketStatus.REJECTED: "declined by {shop}",
    TicketStatus.CANCELLED: "cancelled: nothing will change",
}


def ticket_standing(status: str, shop: str) -> str:
    return TICKET_STANDING.get(status, "").format(shop=shop)


def calls_described(calls: list[tuple[Approval, str]]) -> str:
    """Calls asked for together, each with its currency, in one phrase: `your refunds of
    20.00 EUR for ORD-1001 and 30.00 EUR for ORD-1003`."""
    if len(calls) > 1 and all(approval.tool_name == "issue_refund" for approval, _ in calls):
        each = [
            f"{money(approval.proposed_args.get('amount'), currency)} "
            f"for {approval.proposed_args.get('order_id')}"
            for approval, currency in calls
        ]
        return f"your refunds of {_listed(each)}"
    return _listed([call_described(approval, currency) for approval, currency in calls])


def _listed(items: list[str]) -> str:
    """`a`, `a and b`, `a, b and c`."""
    return " and ".join([", ".join(items[:-1]), items[-1]] if len(items) > 1 else items)
