"""The exchange-item rules: what a line of an exchange plan holds, and whether an order's item
can be swapped for another size of it (one rule for the eligibility tool, the agent's plans
and supervisors' revisions)."""

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

from approvals import selectors
from approvals.models import Order, OrderStatus


class ExchangeItem(BaseModel):
    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)

    sku: str = Field(min_length=1, max_length=64, description="The SKU bought.")
    new_sku: str = Field(min_length=1, max_length=64, description="The SKU wanted instead.")
    quantity: int = Field(default=1, ge=1, le=20)


# One to ten lines: the tool's arguments and a supervisor's revision alike.
ExchangeItems = Annotated[list[ExchangeItem], Field(min_length=1, max_length=10)]


def sized_sku(sku: str, size: str) -> str:
    """SHOE-TRAIL-42 in size 43 is SHOE-TRAIL-43; an SKU without a size part stays as it is."""
    product, _, current = sku.rpartition("-")
    if not size or not product or not current.replace(".", "").isdigit():
        return sku
    return f"{product}-{size}"


def exchange_line_problem(order: Order, *, sku: str, quantity: int, new_sku: str) -> str:
    """Why `quantity` of `sku` from the order cannot be swapped for `new_sku`, or "" when it
    can: the one rule for the eligibility tool, the agent's plans and supervisors' revisions."""
    line = next((item for item in order.items if item["sku"] == sku), None)
    if line is None:
        return f"{sku} is not part of {order.number}"
    if order.status != OrderStatus.DELIVERED:
        return "only delivered orders can be exchanged"
    if not line.get("exchangeable", False):
        return f"{line.get('name', sku)} cannot be exchanged"
    if quantity > line.get("quantity", 1):
        return f"{order.number} holds only {line.get('quantity', 1)} of {line.get('name', sku)}"
    if new_sku.rpartition("-")[0] != sku.rpartition("-")[0]:
        return f"{new_sku} is not another size of {sku}"
    if selectors.stock_level(merchant_id=order.merchant_id, sku=new_sku) < quantity:
        return f"{line.get('name', sku)} in size {new_sku.rpartition('-')[2]} is out of stock"
    return ""


def exchange_items_problem(order: Order, items: list[dict[str, Any]]) -> str:
    """Why these exchange items do not fit the order, or "" when they do."""
    for item in items:
        problem = exchange_line_problem(
            order, sku=item["sku"], quantity=item["quantity"], new_sku=item["new_sku"]
        )
        if problem:
            return problem
    return ""
