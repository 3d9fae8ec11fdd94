"""Throughput: runs queued first, then the worker cluster started to execute them. The clock
starts when the first run starts, so the figures are the workers' and not the queueing's."""

import statistics
import time
from collections.abc import Callable

from django.core.management.base import CommandError
from django.db.models import Max, Min, Sum

from agentportal.models import Merchant
from approvals.bench.context import Bench
from approvals.bench.measure import with_spread
from approvals.bench.processes import cluster_stop
from approvals.bench.shop import BenchShop
from runs.models import FINISHED_STATUSES, AgentRun, RunEvent, RunStatus


def repeated(bench: Bench, measure: Callable[[], dict], shop: BenchShop | None = None) -> dict:
    """The median run's figures of --repeat throughput runs, with the spread of all: a
    stall shows as a spread, never hides in one figure. `shop` is cleared before each."""
    results = []
    for index in range(bench.repeat):
        if shop is not None:
            shop.clear()
        results.append(measure())
        bench.say(f"run {index + 1} of {bench.repeat}: {results[-1]['runs_per_s']} runs/s")
    return with_spread(results, "runs_per_s")


def throughput(bench: Bench, shop: BenchShop) -> dict:
    """--runs runs queued in `shop`, then executed by a cluster of --workers."""
    shop.queue(bench.runs)
    cluster = bench.processes.cluster(bench.workers)
    try:
        ends = time.monotonic() + bench.timeout
        pending = AgentRun.objects.filter(merchant=shop.merchant).exclude(
            status__in=FINISHED_STATUSES
        )
        while pending.exists():
            if time.monotonic() > ends or cluster.poll() is not None:
                raise CommandError(f"{pending.count()} runs unfinished; see the cluster log")
            time.sleep(0.05)
    finally:
        cluster_stop(cluster)
    return figures(shop.merchant, bench.runs)


def figures(merchant: Merchant | list[Merchant], runs: int) -> dict:
    """Runs and steps a second from the first run's start to the last one's end, and per run
    the time from the later of its queueing and that start to its end."""
    merchants = merchant if isinstance(merchant, list) else [merchant]
    finished = AgentRun.objects.filter(merchant__in=merchants)
    failed = finished.exclude(status=RunStatus.COMPLETED).count()
    if failed:
        raise CommandError(f"{failed} runs did not complete")
    span = finished.aggregate(end=Max("finished_at"), steps=Sum("step"))
    start = RunEvent.objects.filter(run__merchant__in=merchants, type="run.started").aggregate(
        start=Min("created_at")
    )["start"]
    wall = (span["end"] - start).total_seconds()
    latencies = sorted(
        (done - max(created, start)).total_seconds() * 1000
        for created, done in finished.values_list("created_at", "finished_at")
    )
    return {
        "wall_s": round(wall, 3),
        "runs_per_s": round(runs / wall, 1),
        "steps_per_s": round(span["steps"] / wall, 1),
        "queued_to_done_ms": {
            "p50": round(statistics.median(latencies), 1),
            "p95": round(latencies[max(0, int(len(latencies) * 0.95) - 1)], 1),
        },
    }
