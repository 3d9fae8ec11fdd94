"""`stop`: the only worker is inside a slow warehouse call when its customer sends /stop,
--runs times. Reports the request's latency and the time from its answer until the worker
let go of the run, which a second conversation's run queued behind it marks by starting."""

import random
import time

from django.core.management.base import CommandError
from django.utils import timezone

from agentportal.services import api_key_create
from approvals.bench.calibrated import calibrated
from approvals.bench.context import Bench
from approvals.bench.measure import percentiles, post_json
from approvals.bench.processes import portal_stop
from approvals.bench.registry import Scenario, register
from approvals.bench.shop import ORDER_STATUS, STOCK_QUESTION, BenchShop, order_of
from runs.models import AgentRun, RunEvent


def stop(bench: Bench) -> dict:
    return calibrated(bench, ORDER_STATUS, lambda shop: _stops(bench, shop))


def _stops(bench: Bench, shop: BenchShop) -> dict:
    merchant = shop.merchant
    customers = list(shop.customers()[:2])
    keys = {c.pk: api_key_create(merchant=merchant, role="customer", user=c)[1] for c in customers}
    port, portal = bench.processes.portal(1)
    base = f"http://127.0.0.1:{port}/api/v1"
    request_ms, abandon_ms = [], []
    delays = random.Random(7)
    try:
        for index in range(bench.runs):
            ends = time.monotonic() + bench.timeout
            slow, other = customers[index % 2], customers[(index + 1) % 2]
            stopped = post_json(base, keys[slow.pk], "/conversations", {})["id"]
            run_id = post_json(
                base,
                keys[slow.pk],
                f"/conversations/{stopped}/messages",
                {"text": STOCK_QUESTION.format(order=order_of(slow))},
            )["run_id"]
            while not RunEvent.objects.filter(
                run_id=run_id, type="tool.started", data__tool="check_stock"
            ).exists():
                if time.monotonic() > ends or portal.poll() is not None:
                    raise CommandError("the slow tool never started")
                time.sleep(0.01)
            # Somewhere inside the warehouse call, at random: a fixed delay would always hit
            # the same phase of the worker's 250 ms cancellation poll.
            time.sleep(delays.uniform(0.3, 1.5))
            behind = post_json(base, keys[other.pk], "/conversations", {})["id"]
            waiting = post_json(
                base,
                keys[other.pk],
                f"/conversations/{behind}/messages",
                {"text": ORDER_STATUS.format(order=order_of(other))},
            )["run_id"]
            started = time.perf_counter()
            post_json(base, keys[slow.pk], f"/conversations/{stopped}/messages", {"text": "/stop"})
            request_ms.append((time.perf_counter() - started) * 1000)
            answered = timezone.now()
            while not (
                event := RunEvent.objects.filter(run_id=waiting, type="run.started").first()
            ):
                if time.monotonic() > ends or portal.poll() is not None:
                    raise CommandError("the worker never let go of the stopped run")
                time.sleep(0.005)
            abandon_ms.append(max(0.0, (event.created_at - answered).total_seconds() * 1000))
            while not AgentRun.objects.get(pk=waiting).is_finished:
                time.sleep(0.01)
    finally:
        portal_stop(portal)
    return {
        "stops": {
            "count": bench.runs,
            "request_ms": percentiles(request_ms),
            "abandon_ms": percentiles(abandon_ms),
        }
    }


# One worker: the queued run must wait for the very worker that is stopped.
register(Scenario(name="stop", run=stop, workers=1))
