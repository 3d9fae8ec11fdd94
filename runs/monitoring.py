"""What /metrics says about runs, read from the database at each scrape: every web node answers
the same, whichever machines the workers run on. Latencies are quantiles over the most recent
rows (by primary key, so each read stays small however long the history)."""

from collections.abc import Iterator
from datetime import timedelta

from django.db.models import Count
from django.utils import timezone
from prometheus_client.core import GaugeMetricFamily, Metric

from runs.models import FINISHED_STATUSES, AgentRun, AttemptStatus, ModelAttempt, WorkerHeartbeat
from runs.selectors import queues_stalled

RECENT_ROWS = 500
QUANTILES = (0.5, 0.95)
PROCESS_FRESH = timedelta(seconds=10)
# Attempts whose finish is when their call ended: an abandoned call was cut short, and an
# UNKNOWN one finished when a new lease holder found it.
CALLS_THAT_ENDED = (AttemptStatus.RESPONDED, AttemptStatus.FAILED)


def quantile_values(values: list[float]) -> list[tuple[str, float]]:
    """(quantile, value) for each of QUANTILES, by the nearest rank; none when no values."""
    ordered = sorted(values)
    return [
        (str(quantile), ordered[min(len(ordered) - 1, int(quantile * len(ordered)))])
        for quantile in QUANTILES
        if ordered
    ]


def quantiles(name: str, documentation: str, values: list[float]) -> GaugeMetricFamily:
    """Quantiles of recent values as a gauge with a `quantile` label (none when no values)."""
    family = GaugeMetricFamily(name, documentation, labels=["quantile"])
    for quantile, value in quantile_values(values):
        family.add_metric([quantile], value)
    return family


class RunsCollector:
    def collect(self) -> Iterator[Metric]:
        yield self._runs_by_shop_and_status()
        yield self._queues_stalled()
        yield from self._worker_processes()
        yield self._attempts_by_outcome()
        yield from self._latencies()

    def _runs_by_shop_and_status(self) -> GaugeMetricFamily:
        family = GaugeMetricFamily(
            "agentportal_runs",
            "Unfinished runs by shop and status (QUEUED, RUNNING, waiting, PARKED).",
            labels=["shop", "status"],
        )
        counts = (
            AgentRun.objects.exclude(status__in=FINISHED_STATUSES)
            .values_list("merchant__slug", "status")
            .annotate(count=Count("pk"))
            .order_by()
        )
        for shop, status, count in counts:
            family.add_metric([shop, status], count)
        return family

    def _queues_stalled(self) -> GaugeMetricFamily:
        family = GaugeMetricFamily(
            "agentportal_queue_stalled",
            "1 for each shop with room whose runs have waited over a minute unclaimed.",
            labels=["shop"],
        )
        for shop in queues_stalled(timezone.now()):
            family.add_metric([shop], 1)
        return family

    def _worker_processes(self) -> Iterator[GaugeMetricFamily]:
        in_flight = GaugeMetricFamily(
            "agentportal_worker_runs_in_flight",
            "Runs each worker process holds now.",
            labels=["process"],
        )
        free = GaugeMetricFamily(
            "agentportal_worker_free_slots",
            "Runs each worker process could take on now.",
            labels=["process"],
        )
        reports = WorkerHeartbeat.objects.filter(
            name__startswith="process:", seen_at__gte=timezone.now() - PROCESS_FRESH
        ).values_list("name", "report")
        calls = GaugeMetricFamily(
            "agentportal_model_endpoint_calls",
            "Each worker process's model calls per endpoint, in flight or waiting for a slot.",
            labels=["process", "endpoint", "state"],
        )
        paused = GaugeMetricFamily(
            "agentportal_model_endpoint_paused_seconds",
            "How long each worker process's calls to an endpoint stay paused by its 429s.",
            labels=["process", "endpoint"],
        )
        for name, report in reports:
            process = name.removeprefix("process:")
            in_flight.add_metric([process], report.get("in_flight", 0))
            free.add_metric([process], report.get("free_slots", 0))
            for endpoint, queue in report.get("model_endpoints", {}).items():
                for state in ("in_flight", "waiting"):
                    calls.add_metric([process, endpoint, state], queue.get(state, 0))
                paused.add_metric([process, endpoint], queue.get("paused_seconds", 0))
        yield from (in_flight, free, calls, paused)

    def _attempts_by_outcome(self) -> GaugeMetricFamily:
        family = GaugeMetricFamily(
            "agentportal_model_attempts",
            "Model calls recorded, by outcome (STARTED: in flight or its worker was lost;"
            " ABANDONED: given up when its run was stopped or lost).",
            labels=["outcome"],
        )
        counts = dict(
            ModelAttempt.objects.values_list("status").annotate(count=Count("pk")).order_by()
        )
        for outcome in AttemptStatus.values:
            family.add_metric([outcome], counts.get(outcome, 0))
        return family

    def _latencies(self) -> Iterator[GaugeMetricFamily]:
        recent = list(
            ModelAttempt.objects.order_by("-pk").values_list(
                "step", "attempt", "created_at", "finished_at", "run__created_at", "status"
            )[:RECENT_ROWS]
        )
        yield quantiles(
            "agentportal_queue_to_first_step_seconds",
            f"From a run's queueing to its first claim, over the last {RECENT_ROWS} model calls.",
            [
                (claimed - queued).total_seconds()
                for step, attempt, claimed, _finished, queued, _status in recent
                if step == 0 and attempt == 1
            ],
        )
        yield quantiles(
            "agentportal_model_step_seconds",
            f"A model step, from its commit before the call to the one after, over the last "
            f"{RECENT_ROWS} model calls.",
            [
                (finished - started).total_seconds()
                for _step, _attempt, started, finished, _queued, status in recent
                if status in CALLS_THAT_ENDED
            ],
        )
