"""Reads for exchange plans in people's words: what a supervisor revising a plan chooses from
(the order's products and the sizes the shop stocks), what changed between two versions, and
what the customer last asked for.

An SKU names its size last ("SHOE-TRAIL-43"): the rest is the product, as the exchange tool
and its rule (another size of the same product) read it.
"""

from dataclasses import dataclass
from functools import reduce
from operator import or_
from typing import Any

from django.db.models import Q

from approvals.models import BusinessEvent, BusinessEventKind, Order, StockLevel, Ticket

# Letter sizes in the order people read them; numbers sort as numbers, anything else last.
LETTER_SIZES = ("XXS", "XS", "S", "M", "L", "XL", "XXL", "XXXL")


def product_of(sku: str) -> str:
    return sku.rpartition("-")[0] or sku


def size_of(sku: str) -> str:
    product, _, size = sku.rpartition("-")
    return size if product else ""


def _size_order(size: str) -> tuple:
    try:
        return (0, float(size), "")
    except ValueError:
        pass
    if size.upper() in LETTER_SIZES:
        return (1, LETTER_SIZES.index(size.upper()), "")
    return (2, 0, size)


@dataclass(frozen=True)
class SizeChoice:
    sku: str
    size: str
    in_stock: int

    @property
    def label(self) -> str:
        stock = f"{self.in_stock} in stock" if self.in_stock else "out of stock"
        return f"size {self.size} — {stock}"


@dataclass(frozen=True)
class ProductChoice:
    """An exchangeable product of the order: what was bought, and the sizes to swap it for."""

    sku: str
    name: str
    size: str
    quantity: int
    sizes: tuple[SizeChoice, ...]

    @property
    def label(self) -> str:
        return f"{self.name}, size {self.size}" if self.size else self.name

    def size_for(self, sku: str) -> SizeChoice | None:
        return next((size for size in self.sizes if size.sku == sku), None)


def plan_product_choices(order: Order, *, also: list[str] = ()) -> list[ProductChoice]:
    """The order's exchangeable products, each with every size the shop keeps a stock level
    for (out of stock too, to say so), plus the SKUs in `also` (a plan's current choices,
    which may have no stock row). One query."""
    bought = [item for item in order.items if item.get("exchangeable") and size_of(item["sku"])]
    if not bought:
        return []
    products = {product_of(item["sku"]) for item in bought}
    levels = {
        level.sku: level.quantity
        for level in StockLevel.objects.filter(
            reduce(or_, (Q(sku__startswith=f"{product}-") for product in products)),
            merchant_id=order.merchant_id,
        )
    }
    for sku in also:
        levels.setdefault(sku, 0)
    choices = []
    for item in bought:
        product = product_of(item["sku"])
        sizes = sorted(
            (
                SizeChoice(sku=sku, size=size_of(sku), in_stock=quantity)
                for sku, quantity in levels.items()
                if product_of(sku) == product
            ),
            key=lambda choice: _size_order(choice.size),
        )
        choices.append(
            ProductChoice(
                sku=item["sku"],
                name=item.get("name") or product,
                size=item.get("size") or size_of(item["sku"]),
                quantity=item.get("quantity", 1),
                sizes=tuple(sizes),
            )
        )
    return choices


@dataclass(frozen=True)
class PlanChange:
    """One product's line in two versions; None where the version has no line for it."""

    product: str
    before: str | None
    after: str | None


@dataclass(frozen=True)
class PlanDiff:
    from_version: int
    to_version: int
    changes: list[PlanChange]


def _line_words(line: dict[str, Any]) -> str:
    size = f"size {size_of(line['new_sku']) or line['new_sku']}"
    quantity = line.get("quantity", 1)
    return size if quantity == 1 else f"{size}, quantity {quantity}"


def plan_diff(ticket: Ticket) -> PlanDiff | None:
    """What the current version changed from the one before, product by product, in words
    ("size 43" -> "size 44"); None for a first version."""
    if ticket.version < 2:
        return None
    items = dict(
        ticket.proposals.filter(version__in=(ticket.version - 1, ticket.version)).values_list(
            "version", "items"
        )
    )
    names = {item["sku"]: item.get("name") or item["sku"] for item in ticket.order.items}
    before = {line["sku"]: line for line in items.get(ticket.version - 1, [])}
    after = {line["sku"]: line for line in items.get(ticket.version, [])}
    changes = []
    for sku in [*before, *(sku for sku in after if sku not in before)]:
        was = _line_words(before[sku]) if sku in before else None
        now = _line_words(after[sku]) if sku in after else None
        if was != now:
            changes.append(PlanChange(product=names.get(sku, sku), before=was, after=now))
    return PlanDiff(from_version=ticket.version - 1, to_version=ticket.version, changes=changes)


def plan_changes_requested(ticket: Ticket) -> BusinessEvent | None:
    """The customer's latest request for changes to the plan, with who asked."""
    return (
        ticket.events.filter(kind=BusinessEventKind.CHANGES_REQUESTED)
        .select_related("actor_user")
        .order_by("-id")
        .first()
    )
