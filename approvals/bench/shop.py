"""The shops the bench queues its runs in: customers enough to queue every run at once, each
with a delivered order, and a supervisor."""

from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal

from django.contrib.auth.models import User
from django.db.models import QuerySet

from agentportal.models import Membership, Merchant, Role
from approvals.models import Order, OrderStatus, Refund, StockLevel
from runs import services
from runs.models import AgentRun

BENCH_SHOP = "bench-shop"
BENCH_SUPERVISOR = "bench-supervisor"
RUNS_PER_ACCOUNT = 3  # the open-run limit per account

# What the customers write, a scenario's runs asking one of these about their orders.
ORDER_STATUS = "What is the status of order {order}?"
REFUND = "I want a refund for {order} amount 10"
EXCHANGE = "I want to exchange the shoes from order {order} for size 43"
STOCK_QUESTION = "Is the shoe of {order} in stock in size 43?"


@dataclass(frozen=True)
class BenchShop:
    """A shop whose runs each ask `message` about their customer's order."""

    merchant: Merchant
    message: str

    def customers(self) -> QuerySet[User]:
        return User.objects.filter(
            memberships__merchant=self.merchant, memberships__role=Role.CUSTOMER
        ).order_by("pk")

    def clear(self) -> None:
        """Forget the shop's earlier runs and refunds (and nothing of other shops)."""
        AgentRun.objects.filter(merchant=self.merchant).delete()
        Refund.objects.filter(merchant=self.merchant).delete()
        Order.objects.filter(merchant=self.merchant).update(refunded=0)

    def queue(self, count: int) -> None:
        for customer in self.senders(count):
            self.queue_one(customer)

    def senders(self, count: int) -> list[User]:
        """Who sends each of `count` runs, each customer at most RUNS_PER_ACCOUNT."""
        customers = list(self.customers()[: -(-count // RUNS_PER_ACCOUNT)])
        return [customers[index // RUNS_PER_ACCOUNT] for index in range(count)]

    def queue_one(self, customer: User) -> None:
        message = self.message.format(order=order_of(customer))
        services.queue_run(
            merchant=self.merchant,
            account=customer,
            messages=[{"role": "user", "content": message}],
        )


def bench_shop(runs: int, message: str, *, slug: str = BENCH_SHOP, capacity: int = 64) -> BenchShop:
    """The shop `slug` of capacity `capacity`, with customers enough to queue `runs` at once."""
    merchant, _ = Merchant.objects.get_or_create(
        slug=slug, defaults={"name": "Benchmark shop", "max_running_runs": capacity}
    )
    if merchant.max_running_runs != capacity:
        merchant.max_running_runs = capacity
        merchant.save(update_fields=["max_running_runs"])
    shop = BenchShop(merchant, message)
    prefix = "bench" if slug == BENCH_SHOP else slug
    for sku in ("SHOE-TRAIL-42", "SHOE-TRAIL-43"):
        StockLevel.objects.get_or_create(
            merchant=merchant, sku=sku, defaults={"quantity": 1_000_000}
        )
    supervisor, made = User.objects.get_or_create(username=BENCH_SUPERVISOR)
    if made:
        Membership.objects.create(user=supervisor, merchant=merchant, role=Role.SUPERVISOR)
    needed = -(-runs // RUNS_PER_ACCOUNT)
    existing = shop.customers().count()
    if existing < needed:
        users = User.objects.bulk_create(
            [User(username=f"{prefix}-{index}", password="!") for index in range(existing, needed)]
        )
        users = list(User.objects.filter(username__in=[u.username for u in users]))
        Membership.objects.bulk_create(
            [Membership(user=u, merchant=merchant, role=Role.CUSTOMER) for u in users]
        )
        Order.objects.bulk_create([_order(merchant, u) for u in users])
    return shop


def _order(merchant: Merchant, customer: User) -> Order:
    placed = datetime(2026, 11, 2, tzinfo=UTC)
    return Order(
        merchant=merchant,
        number=order_of(customer),
        customer=customer,
        status=OrderStatus.DELIVERED,
        items=[
            {
                "sku": "SHOE-TRAIL-42",
                "name": "Trail running shoes",
                "size": "42",
                "quantity": 1,
                "unit_price": "89.90",
                "exchangeable": True,
            }
        ],
        total=Decimal("89.90"),
        placed_at=placed,
        delivered_at=placed,
    )


def order_of(customer: User) -> str:
    return f"ORD-{500000 + int(customer.username.rsplit('-', 1)[1])}"
