"""Runs for the fault tests on a database of their own, queued from `manage.py shell` there:
`queue(count, first_order)` makes a customer with an order per run, then queues the runs one
after another as fast as they go, and prints their ids as JSON."""

import json
from datetime import UTC, datetime
from decimal import Decimal

from django.contrib.auth.models import User

from agentportal.models import Membership, Merchant, Role
from approvals.models import Order, OrderStatus
from runs import services

CAPACITY = 16
PLACED = datetime(2026, 11, 2, tzinfo=UTC)
ITEM = {
    "sku": "SHOE-TRAIL-42",
    "name": "Trail running shoes",
    "size": "42",
    "quantity": 1,
    "unit_price": "89.90",
    "exchangeable": True,
}


def queue(count: int, first_order: int) -> None:
    shop = Merchant.objects.get(slug="demo-shop")
    if shop.max_running_runs != CAPACITY:
        shop.max_running_runs = CAPACITY
        shop.save(update_fields=["max_running_runs"])
    numbers = range(first_order, first_order + count)
    # Unusable passwords: hashing one per customer would take longer than the runs.
    User.objects.bulk_create([User(username=f"load-{n}", password="!") for n in numbers])
    customers = {u.username: u for u in User.objects.filter(username__startswith="load-")}
    Membership.objects.bulk_create(
        [
            Membership(user=customers[f"load-{n}"], merchant=shop, role=Role.CUSTOMER)
            for n in numbers
        ]
    )
    Order.objects.bulk_create(
        [
            Order(
                merchant=shop,
                number=f"ORD-{n}",
                customer=customers[f"load-{n}"],
                status=OrderStatus.DELIVERED,
                items=[ITEM],
                total=Decimal("89.90"),
                placed_at=PLACED,
                delivered_at=PLACED,
            )
            for n in numbers
        ]
    )
    ids = []
    for n in numbers:
        run, _ = services.queue_run(
            merchant=shop,
            account=customers[f"load-{n}"],
            messages=[{"role": "user", "content": f"What is the status of order ORD-{n}?"}],
        )
        ids.append(str(run.pk))
    print(json.dumps(ids))
