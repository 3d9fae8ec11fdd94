"""Runs for the fault tests on a database of their own, queued from `manage.py shell` there:
`queue(count, first_order)` makes a customer with an order per run, then queues the runs one
after another as fast as they go, and prints their ids as JSON."""

import json

from django.contrib.auth.models import User

from agentportal.models import Membership, Merchant, Role
from tests import factories

CAPACITY = 16


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
    for n in numbers:
        factories.order_create(merchant=shop, customer=customers[f"load-{n}"], number=f"ORD-{n}")
    ids = []
    for n in numbers:
        message = f"What is the status of order ORD-{n}?"
        run = factories.run_queue(customer=customers[f"load-{n}"], merchant=shop, message=message)
        ids.append(str(run.pk))
    print(json.dumps(ids))
