"""What /metrics says about decisions and webhooks, read from the database at each scrape."""

from collections.abc import Iterator
from datetime import timedelta

from django.db.models import Count
from django.db.models.functions import Coalesce
from django.utils import timezone
from prometheus_client.core import GaugeMetricFamily, Metric

from approvals.models import Approval, ApprovalStatus, Delivery, DeliveryStatus, Transport
from runs.monitoring import quantile_values

# The calls the time-to-decide quantiles are over: those asked for in the last day, the newest
# at most so many (a read that stays small however busy the shops).
DECIDE_WINDOW = timedelta(days=1)
DECIDE_ROWS = 5000


class ApprovalsCollector:
    def collect(self) -> Iterator[Metric]:
        yield _by_shop(
            "agentportal_approvals_pending",
            "Tool calls waiting for a supervisor's decision, by shop.",
            ApprovalStatus.PENDING_APPROVAL,
        )
        yield _by_shop(
            "agentportal_approvals_refused",
            "Approved tool calls the tool refused when they were carried out, by shop.",
            ApprovalStatus.FAILED,
        )
        yield from _time_to_decide()
        backlog = GaugeMetricFamily(
            "agentportal_webhook_backlog",
            "Webhook deliveries not yet delivered (still to be tried).",
        )
        waiting = Delivery.objects.filter(
            transport=Transport.WEBHOOK, status=DeliveryStatus.PENDING
        )
        backlog.add_metric([], waiting.count())
        yield backlog


def _by_shop(name: str, documentation: str, status: str) -> GaugeMetricFamily:
    """How many calls are in `status` in each shop."""
    metric = GaugeMetricFamily(name, documentation, labels=["shop"])
    counts = (
        Approval.objects.filter(status=status)
        .values_list("merchant__slug")
        .annotate(count=Count("pk"))
        .order_by()
    )
    for shop, count in counts:
        metric.add_metric([shop], count)
    return metric


def _time_to_decide() -> Iterator[GaugeMetricFamily]:
    """Per shop, how long calls wait for a person's first look and for a person's decision
    (those the policy approved at once waited for nobody). A call decided without its page
    ever being opened (from an email's link, say) was first seen when it was decided."""
    rows = (
        Approval.objects.filter(
            created_at__gte=timezone.now() - DECIDE_WINDOW, decided_by_policy=False
        )
        .annotate(seen_at=Coalesce("first_seen_at", "decided_at"))
        .order_by("-pk")
        .values_list("merchant__slug", "created_at", "seen_at", "decided_at")[:DECIDE_ROWS]
    )
    seen: dict[str, list[float]] = {}
    decided: dict[str, list[float]] = {}
    for shop, created_at, seen_at, decided_at in rows:
        if seen_at is not None:
            seen.setdefault(shop, []).append((seen_at - created_at).total_seconds())
        if decided_at is not None:
            decided.setdefault(shop, []).append((decided_at - created_at).total_seconds())
    yield _quantiles_by_shop(
        "agentportal_decision_first_view_seconds",
        "From a call's pause to a supervisor's first look at it, by shop, over the last day.",
        seen,
    )
    yield _quantiles_by_shop(
        "agentportal_decision_seconds",
        "From a call's pause to a person's decision, by shop, over the last day.",
        decided,
    )


def _quantiles_by_shop(name: str, documentation: str, values: dict[str, list[float]]):
    family = GaugeMetricFamily(name, documentation, labels=["shop", "quantile"])
    for shop, shop_values in sorted(values.items()):
        for quantile, value in quantile_values(shop_values):
            family.add_metric([shop, quantile], value)
    return family
