"""Throughput and cost of scripted after-sales runs through the real worker cluster.

Two phases, on the database in DATABASE_URL:
1. calibration, in this process: a few runs queued and executed by the same code the workers
   run, counting every SQL statement and every commit (queries per step, commits per run);
2. throughput: N runs queued first, then a `qcluster` subprocess with W workers started to
   execute them; the clock starts when the first run starts, so the figures are the workers'
   and not this process's queueing (runs/s, steps/s, and per run the time from the later of
   its queueing and that start to its completion).
The `approval` scenario is a refund each: `runportal` (web and workers) runs them until they
wait, then 32 concurrent clients approve them over HTTP; it adds the decisions' rate and
latency. The `stop` scenario measures /stop: one worker is inside a slow warehouse call when
a customer sends /stop; it reports the request's latency and the time from its answer until
the worker abandoned the run (it starts the run queued behind it). The last line printed is
one JSON object.
"""

import json
import os
import queue
import random
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from datetime import UTC, datetime
from decimal import Decimal

from django.conf import settings
from django.contrib.auth.models import User
from django.core.management.base import BaseCommand, CommandError
from django.db import connection
from django.db.models import Max, Min, Sum
from django.utils import timezone

from agentportal.models import Membership, Merchant, Role
from agentportal.principals import Principal
from agentportal.services import api_key_create
from approvals import services as approval_services
from approvals.models import Approval, ApprovalStatus, Order, OrderStatus, Refund
from runs import services, worker
from runs.metrics import Counter
from runs.models import AgentRun, RunEvent, RunStatus

BENCH_SHOP = "bench-shop"
BENCH_SUPERVISOR = "bench-supervisor"
RUNS_PER_ACCOUNT = 3  # the open-run limit per account
DECISION_CLIENTS = 32
MESSAGES = {
    "plain": "What is the status of order {order}?",
    "approval": "I want a refund for {order} amount 10",
    "stop": "What is the status of order {order}?",
}
STOCK_QUESTION = "Is the shoe of {order} in stock in size 43?"


class Command(BaseCommand):
    help = "Benchmark scripted runs through the real worker cluster; prints one JSON line last."

    def add_arguments(self, parser):
        parser.add_argument("--runs", type=int, default=1000)
        parser.add_argument("--workers", type=int, default=2)
        parser.add_argument("--scenario", choices=sorted(MESSAGES), default="plain")
        parser.add_argument("--calibration-runs", type=int, default=30)
        parser.add_argument("--timeout", type=float, default=600.0)
        parser.add_argument("--log", default=os.devnull, help="Where the workers' output goes.")

    def handle(self, *args, runs, workers, scenario, calibration_runs, timeout, log, **options):
        if runs < 1 or workers < 1:
            raise CommandError("--runs and --workers must be at least 1")
        self.scenario = scenario
        self._portal_log = open(log, "a")  # noqa: SIM115 (children write to it until the end)
        merchant = self._bench_shop(max(runs, calibration_runs))
        self._clear(merchant)
        queries_per_step, commits_per_run = self._calibrate(merchant, calibration_runs)
        self._clear(merchant)
        if scenario == "approval":
            result = self._decisions(merchant, runs, workers, timeout)
        elif scenario == "stop":
            workers = 1  # the queued run must wait for the very worker that is stopped
            result = self._stops(merchant, runs, timeout)
        else:
            result = self._throughput(merchant, runs, workers, timeout)
        result.update(
            {
                "scenario": scenario,
                "database": connection.vendor,
                "runs": runs,
                "workers": workers,
                "queries_per_step": round(queries_per_step, 2),
                "commits_per_run": round(commits_per_run, 2),
            }
        )
        order = [
            "scenario",
            "database",
            "runs",
            "workers",
            "wall_s",
            "runs_per_s",
            "steps_per_s",
            "queued_to_done_ms",
            "queries_per_step",
            "commits_per_run",
            "decisions",
            "stops",
        ]
        self.stdout.write(json.dumps({key: result[key] for key in order if key in result}))

    # --- set-up ------------------------------------------------------------------------------

    def _bench_shop(self, runs: int) -> Merchant:
        """A shop with enough customers (each with an order) to queue every run at once."""
        merchant, _ = Merchant.objects.get_or_create(
            slug=BENCH_SHOP, defaults={"name": "Benchmark shop", "max_running_runs": 64}
        )
        supervisor, made = User.objects.get_or_create(username=BENCH_SUPERVISOR)
        if made:
            Membership.objects.create(user=supervisor, merchant=merchant, role=Role.SUPERVISOR)
        needed = -(-runs // RUNS_PER_ACCOUNT)
        existing = self._customers(merchant).count()
        if existing < needed:
            users = User.objects.bulk_create(
                [User(username=f"bench-{index}", password="!") for index in range(existing, needed)]
            )
            users = list(User.objects.filter(username__in=[u.username for u in users]))
            Membership.objects.bulk_create(
                [Membership(user=u, merchant=merchant, role=Role.CUSTOMER) for u in users]
            )
            placed = datetime(2026, 11, 2, tzinfo=UTC)
            Order.objects.bulk_create(
                [
                    Order(
                        merchant=merchant,
                        number=f"ORD-{500000 + int(u.username.split('-')[1])}",
                        customer=u,
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
                    for u in users
                ]
            )
        return merchant

    def _customers(self, merchant: Merchant):
        return User.objects.filter(
            memberships__merchant=merchant, memberships__role=Role.CUSTOMER
        ).order_by("pk")

    def _clear(self, merchant: Merchant) -> None:
        """Forget the bench shop's earlier runs and refunds (and nothing of other shops)."""
        AgentRun.objects.filter(merchant=merchant).delete()
        Refund.objects.filter(merchant=merchant).delete()
        Order.objects.filter(merchant=merchant).update(refunded=0)

    def _queue(self, merchant: Merchant, count: int) -> None:
        customers = list(self._customers(merchant)[: -(-count // RUNS_PER_ACCOUNT)])
        for index in range(count):
            customer = customers[index // RUNS_PER_ACCOUNT]
            order = f"ORD-{500000 + int(customer.username.split('-')[1])}"
            message = MESSAGES[self.scenario].format(order=order)
            services.queue_run(
                merchant=merchant,
                account=customer,
                messages=[{"role": "user", "content": message}],
            )

    # --- phases ------------------------------------------------------------------------------

    def _calibrate(self, merchant: Merchant, count: int) -> tuple[float, float]:
        counter = Counter()
        with counter.counting():
            self._queue(merchant, count)
            tick_queries_from = counter.queries
            worker.tick()
            tick_queries = counter.queries - tick_queries_from
            if self.scenario == "approval":
                supervisor = User.objects.get(username=BENCH_SUPERVISOR)
                principal = Principal(merchant=merchant, role=Role.SUPERVISOR, user=supervisor)
                for approval in Approval.objects.filter(merchant=merchant).select_related("run"):
                    approval_services.approval_decide(
                        run=approval.run,
                        principal=principal,
                        request=approval_services.DecisionRequest(
                            interrupt_id=approval.interrupt_id, decision="approve"
                        ),
                    )
                resumed_from = counter.queries
                worker.tick()
                tick_queries += counter.queries - resumed_from
        done = AgentRun.objects.filter(merchant=merchant, status=RunStatus.COMPLETED)
        if done.count() != count:
            raise CommandError(f"calibration: {done.count()} of {count} runs completed")
        steps = done.aggregate(steps=Sum("step"))["steps"]
        return tick_queries / steps, counter.commits / count

    def _throughput(self, merchant: Merchant, runs: int, workers: int, timeout: float) -> dict:
        self._queue(merchant, runs)
        cluster = self._start_cluster(workers)
        try:
            ends = time.monotonic() + timeout
            pending = AgentRun.objects.filter(merchant=merchant).exclude(
                status__in=[RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELLED]
            )
            while pending.exists():
                if time.monotonic() > ends or cluster.poll() is not None:
                    raise CommandError(f"{pending.count()} runs unfinished; see the cluster log")
                time.sleep(0.05)
        finally:
            self._stop_cluster(cluster)
        return self._figures(merchant, runs)

    def _figures(self, merchant: Merchant, runs: int) -> dict:
        finished = AgentRun.objects.filter(merchant=merchant)
        failed = finished.exclude(status=RunStatus.COMPLETED).count()
        if failed:
            raise CommandError(f"{failed} runs did not complete")
        span = finished.aggregate(end=Max("finished_at"), steps=Sum("step"))
        start = RunEvent.objects.filter(run__merchant=merchant, type="run.started").aggregate(
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

    def _decisions(self, merchant: Merchant, runs: int, workers: int, timeout: float) -> dict:
        """Refunds run by `runportal` until they wait; 32 clients approve them over HTTP."""
        supervisor = User.objects.get(username=BENCH_SUPERVISOR)
        _, key = api_key_create(merchant=merchant, role="supervisor", user=supervisor)
        self._queue(merchant, runs)
        port, portal = self._start_portal(workers)
        try:
            ends = time.monotonic() + timeout
            waiting = Approval.objects.filter(
                merchant=merchant, status=ApprovalStatus.PENDING_APPROVAL
            )
            while waiting.count() < runs:
                if time.monotonic() > ends or portal.poll() is not None:
                    raise CommandError(f"only {waiting.count()} of {runs} runs came to wait")
                time.sleep(0.1)
            decided = _decide_concurrently(
                base=f"http://127.0.0.1:{port}",
                key=key,
                interrupt_ids=list(waiting.values_list("interrupt_id", flat=True)),
            )
            self.stderr.write(f"decisions: {json.dumps(decided)}")
            pending = AgentRun.objects.filter(merchant=merchant).exclude(
                status__in=[RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELLED]
            )
            while pending.exists():
                if time.monotonic() > ends or portal.poll() is not None:
                    raise CommandError(f"{pending.count()} runs unfinished after decisions")
                time.sleep(0.05)
        finally:
            if portal.poll() is None:
                portal.send_signal(signal.SIGTERM)
                portal.wait(timeout=60)
        result = self._figures(merchant, runs)
        result["decisions"] = decided
        return result

    def _start_portal(self, workers: int) -> tuple[int, subprocess.Popen]:
        port = _free_port()
        portal = subprocess.Popen(
            [
                sys.executable,
                str(settings.BASE_DIR / "manage.py"),
                "runportal",
                "--port",
                str(port),
                "--workers",
                str(workers),
            ],
            stdout=subprocess.DEVNULL,
            stderr=self._portal_log,
        )
        ends = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2).close()
                return port, portal
            except OSError:
                if time.monotonic() > ends or portal.poll() is not None:
                    raise CommandError("runportal did not come up") from None
                time.sleep(0.2)

    def _stops(self, merchant: Merchant, stops: int, timeout: float) -> dict:
        """/stop while the only worker waits on the warehouse; a second conversation's run
        waits behind it, and its start marks the moment the worker let go."""
        customers = list(self._customers(merchant)[:2])
        keys = {
            c.pk: api_key_create(merchant=merchant, role="customer", user=c)[1] for c in customers
        }
        port, portal = self._start_portal(1)
        base = f"http://127.0.0.1:{port}/api/v1"
        request_ms, abandon_ms = [], []
        delays = random.Random(7)
        try:
            for index in range(stops):
                ends = time.monotonic() + timeout
                slow, other = customers[index % 2], customers[(index + 1) % 2]
                order = _order_of(slow)
                stopped = _post(base, keys[slow.pk], "/conversations", {})["id"]
                run_id = _post(
                    base,
                    keys[slow.pk],
                    f"/conversations/{stopped}/messages",
                    {"text": STOCK_QUESTION.format(order=order)},
                )["run_id"]
                while not RunEvent.objects.filter(
                    run_id=run_id, type="tool.started", data__tool="check_stock"
                ).exists():
                    if time.monotonic() > ends or portal.poll() is not None:
                        raise CommandError("the slow tool never started")
                    time.sleep(0.01)
                # Somewhere inside the warehouse call, at random: a fixed delay would always
                # hit the same phase of the worker's 250 ms cancellation poll.
                time.sleep(delays.uniform(0.3, 1.5))
                behind = _post(base, keys[other.pk], "/conversations", {})["id"]
                waiting = _post(
                    base,
                    keys[other.pk],
                    f"/conversations/{behind}/messages",
                    {"text": MESSAGES["plain"].format(order=_order_of(other))},
                )["run_id"]
                started = time.perf_counter()
                _post(base, keys[slow.pk], f"/conversations/{stopped}/messages", {"text": "/stop"})
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
            if portal.poll() is None:
                portal.send_signal(signal.SIGTERM)
                portal.wait(timeout=60)
        return {
            "stops": {"count": stops, "request_ms": _p(request_ms), "abandon_ms": _p(abandon_ms)}
        }

    def _start_cluster(self, workers: int) -> subprocess.Popen:
        env = {**os.environ, "AGENTPORTAL_WORKERS": str(workers)}
        return subprocess.Popen(
            [sys.executable, str(settings.BASE_DIR / "manage.py"), "qcluster"],
            env=env,
            stdout=self._portal_log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def _stop_cluster(self, cluster: subprocess.Popen) -> None:
        if cluster.poll() is None:
            cluster.send_signal(signal.SIGTERM)
            try:
                cluster.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(cluster.pid, signal.SIGKILL)
                cluster.wait()


def _order_of(customer: User) -> str:
    return f"ORD-{500000 + int(customer.username.split('-')[1])}"


def _p(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {
        "p50": round(statistics.median(ordered), 1),
        "p95": round(ordered[max(0, int(len(ordered) * 0.95) - 1)], 1),
    }


def _post(base: str, key: str, path: str, body: dict) -> dict:
    request = urllib.request.Request(
        f"{base}{path}",
        data=json.dumps(body).encode(),
        headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _decide_concurrently(*, base: str, key: str, interrupt_ids: list[str]) -> dict:
    """Approve every interrupt over HTTP from DECISION_CLIENTS threads; rate and latency."""
    work: queue.Queue[str] = queue.Queue()
    for interrupt_id in interrupt_ids:
        work.put(interrupt_id)
    latencies: list[float] = []
    statuses: list[int] = []
    lock = threading.Lock()

    def client() -> None:
        while True:
            try:
                interrupt_id = work.get_nowait()
            except queue.Empty:
                return
            request = urllib.request.Request(
                f"{base}/api/v1/approvals/{interrupt_id}/decision",
                data=json.dumps({"decision": "approve"}).encode(),
                headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"},
                method="POST",
            )
            started = time.perf_counter()
            try:
                with urllib.request.urlopen(request, timeout=30) as response:
                    status = response.status
            except urllib.error.HTTPError as error:
                status = error.code
            except OSError:
                status = 0  # no answer at all: counted as an error
            with lock:
                latencies.append((time.perf_counter() - started) * 1000)
                statuses.append(status)

    started = time.perf_counter()
    threads = [threading.Thread(target=client) for _ in range(DECISION_CLIENTS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    wall = time.perf_counter() - started
    latencies.sort()
    return {
        "count": len(statuses),
        "per_s": round(len(statuses) / wall, 1),
        "p50_ms": round(statistics.median(latencies), 1),
        "p95_ms": round(latencies[max(0, int(len(latencies) * 0.95) - 1)], 1),
        "statuses": {str(code): statuses.count(code) for code in sorted(set(statuses))},
    }
