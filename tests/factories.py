"""Factories for tests: small functions that create exactly what a test names."""

import itertools
from datetime import UTC, datetime
from decimal import Decimal

from django.contrib.auth.models import User

from agentportal.models import Membership, Merchant, Role
from agentportal.services import api_key_create
from approvals.models import Order, OrderStatus, StockLevel
from runs import services
from runs.models import AgentRelease, AgentRun
from runs.releases import ReleaseManifest, ToolDeclaration, default_limits, graph_release_default

_numbers = itertools.count(1)


def merchant_create(slug: str | None = None, **fields) -> Merchant:
    slug = slug or f"shop-{next(_numbers)}"
    return Merchant.objects.create(slug=slug, name=slug.title(), **fields)


def user_create(
    username: str | None = None, *, merchant: Merchant | None = None, role: str = Role.CUSTOMER
) -> User:
    user = User.objects.create_user(
        username=username or f"user-{next(_numbers)}",
        password="pw",
        is_staff=role != Role.CUSTOMER,
    )
    if merchant is not None:
        Membership.objects.create(user=user, merchant=merchant, role=role)
    return user


def api_key_for(user: User | None, merchant: Merchant, role: str | None = None) -> str:
    if role is None:
        role = Membership.objects.get(user=user, merchant=merchant).role
        role = "supervisor" if role == Role.OPERATOR else role
    _, raw = api_key_create(merchant=merchant, role=role, user=user)
    return raw


def order_create(
    *, merchant: Merchant, customer: User, number: str, total: str = "89.90", items=None
) -> Order:
    items = items or [
        {
            "sku": "SHOE-TRAIL-42",
            "name": "Trail running shoes",
            "size": "42",
            "quantity": 1,
            "unit_price": total,
            "exchangeable": True,
        }
    ]
    return Order.objects.create(
        merchant=merchant,
        number=number,
        customer=customer,
        status=OrderStatus.DELIVERED,
        items=items,
        total=Decimal(total),
        placed_at=datetime(2026, 11, 2, tzinfo=UTC),
        delivered_at=datetime(2026, 11, 5, tzinfo=UTC),
    )


def stock_create(*, merchant: Merchant, sku: str, quantity: int) -> StockLevel:
    return StockLevel.objects.create(merchant=merchant, sku=sku, quantity=quantity)


def run_queue(
    *, customer: User, merchant: Merchant, message: str, key: str | None = None
) -> AgentRun:
    run, _ = services.queue_run(
        merchant=merchant,
        account=customer,
        messages=[{"role": "user", "content": message}],
        idempotency_scope=f"user:{customer.pk}",
        idempotency_key=key,
        payload_hash=services.request_hash({"message": message}),
    )
    return run


def release_publish(*, merchant: Merchant, model: str, tools: list[str]) -> AgentRelease:
    """A new published release of the shop: `model` (e.g. "scripted:voucher") with `tools`
    declared, on the default graph version and limits."""
    latest = AgentRelease.objects.filter(merchant=merchant).order_by("-version").first()
    manifest = ReleaseManifest(
        model=model, tools=[ToolDeclaration(name=name) for name in tools], limits=default_limits()
    )
    return services.release_save(
        release=AgentRelease(
            merchant=merchant,
            version=latest.version + 1 if latest else 1,
            graph_version=graph_release_default().version,
            manifest=manifest.model_dump(),
            published=True,
        )
    )
