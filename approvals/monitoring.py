"""What /metrics says about decisions and webhooks, read from the database at each scrape."""

from collections.abc import Iterator

from django.db.models import Count
from prometheus_client.core import GaugeMetricFamily, Metric

from approvals.models import Approval, ApprovalStatus, Delivery, DeliveryStatus, Transport
from runs.monitoring import RECENT_ROWS, quantiles


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
        decided = Approval.objects.filter(decided_at__isnull=False).order_by("-pk")
        yield quantiles(
            "agentportal_decision_seconds",
            f"From a call's pause to its decision, over the last {RECENT_ROWS} decisions.",
            [
                (decided_at - created_at).total_seconds()
                for created_at, decided_at in decided.values_list("created_at", "decided_at")[
                    :RECENT_ROWS
                ]
            ],
        )
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
