"""The demo data of API.md (Operations). Running it again changes nothing."""

from datetime import UTC, datetime
from decimal import Decimal

from django.conf import settings
from django.contrib.auth.models import User
from django.core.management.base import BaseCommand
from django.db import transaction

from agentportal.models import Membership, Merchant, Role
from approvals.models import Order, OrderStatus, StockLevel
from runs.models import AgentRelease
from runs.releases import (
    ReleaseManifest,
    ToolDeclaration,
    default_limits,
    graph_release_default,
)
from runs.tools import TOOLS

PLACED = datetime(2026, 11, 2, 10, 0, tzinfo=UTC)
DELIVERED = datetime(2026, 11, 5, 15, 0, tzinfo=UTC)


def item(sku, name, size, price, quantity=1, exchangeable=True):
    return {
        "sku": sku,
        "name": name,
        "size": size,
        "quantity": quantity,
        "unit_price": price,
        "exchangeable": exchangeable,
    }


ORDERS = {
    "demo-shop": {
        "alice": {
            "ORD-1001": [item("HEAD-WX1", "Wireless headphones", "one size", "129.00", 1, False)],
            "ORD-1002": [item("SHOE-TRAIL-42", "Trail running shoes", "42", "89.90")],
            "ORD-1003": [item("TEE-BASIC-M", "Basic T-shirt", "M", "29.50", 2)],
            "ORD-1004": [item("JACKET-RAIN-40", "Rain jacket", "40", "149.00")],
            "ORD-1005": [item("BAG-DAY20", "Day backpack", "20 l", "79.50", 1, False)],
        },
        "bob": {
            "ORD-2001": [item("SHOE-CITY-44", "City sneakers", "44", "99.00")],
            "ORD-2002": [item("HEAD-WX1", "Wireless headphones", "one size", "129.00", 1, False)],
            "ORD-2003": [item("TEE-BASIC-L", "Basic T-shirt", "L", "29.50", 3)],
        },
    },
    "other-shop": {"olga": {"ORD-9001": [item("LAMP-DESK", "Desk lamp", "one size", "64.00")]}},
}

STOCK = {
    "demo-shop": {
        "SHOE-TRAIL-41": 2,
        "SHOE-TRAIL-42": 5,
        "SHOE-TRAIL-43": 7,
        "SHOE-TRAIL-44": 0,
        "SHOE-CITY-43": 3,
        "SHOE-CITY-44": 4,
        "JACKET-RAIN-42": 1,
    },
    "other-shop": {"LAMP-DESK": 10},
}

PEOPLE = {
    "demo-shop": {
        "alice": Role.CUSTOMER,
        "bob": Role.CUSTOMER,
        "sam": Role.SUPERVISOR,
        "sue": Role.SUPERVISOR,
    },
    "other-shop": {"olga": Role.CUSTOMER, "oscar": Role.SUPERVISOR},
}

SHOPS = {"demo-shop": "Demo Shop", "other-shop": "Other Shop"}


def release_publish_all_tools(merchant: Merchant) -> int:
    """Publish a release declaring every tool this build has, unless the published one does."""
    published = AgentRelease.objects.filter(merchant=merchant, published=True).first()
    if published is not None and {t["name"] for t in published.manifest.get("tools", [])} == set(
        TOOLS
    ):
        return 0
    latest = AgentRelease.objects.filter(merchant=merchant).order_by("-version").first()
    AgentRelease.objects.filter(merchant=merchant, published=True).update(published=False)
    manifest = ReleaseManifest(
        tools=[ToolDeclaration(name=name) for name in TOOLS], limits=default_limits()
    )
    AgentRelease.objects.create(
        merchant=merchant,
        version=(latest.version + 1) if latest else 1,
        graph_version=graph_release_default().version,
        manifest=manifest.model_dump(),
        published=True,
    )
    return 1


class Command(BaseCommand):
    help = "Create the demo shops, people, orders and releases (idempotent)."

    @transaction.atomic
    def handle(self, *args, **options):
        password = settings.AGENTPORTAL["DEMO_PASSWORD"]
        created = 0
        admin, made = User.objects.get_or_create(
            username="admin", defaults={"is_staff": True, "is_superuser": True}
        )
        if made:
            admin.set_password(password)
            admin.save()
            created += 1
        for slug, name in SHOPS.items():
            merchant, made = Merchant.objects.get_or_create(slug=slug, defaults={"name": name})
            created += made
            for username, role in PEOPLE[slug].items():
                user, made = User.objects.get_or_create(
                    username=username,
                    defaults={
                        "is_staff": role != Role.CUSTOMER,
                        "email": f"{username}@example.com",
                    },
                )
                if made:
                    user.set_password(password)
                    user.save()
                    created += 1
                _, made = Membership.objects.get_or_create(
                    user=user, merchant=merchant, defaults={"role": role}
                )
                created += made
            for username, orders in ORDERS[slug].items():
                customer = User.objects.get(username=username)
                for number, items in orders.items():
                    total = sum(Decimal(i["unit_price"]) * i["quantity"] for i in items)
                    _, made = Order.objects.get_or_create(
                        merchant=merchant,
                        number=number,
                        defaults={
                            "customer": customer,
                            "status": OrderStatus.DELIVERED,
                            "items": items,
                            "total": total,
                            "placed_at": PLACED,
                            "delivered_at": DELIVERED,
                        },
                    )
                    created += made
            for sku, quantity in STOCK[slug].items():
                _, made = StockLevel.objects.get_or_create(
                    merchant=merchant, sku=sku, defaults={"quantity": quantity}
                )
                created += made
            created += release_publish_all_tools(merchant)
        self.stdout.write(f"demo data ready ({created} rows created)")
