"""The benchmark's `llm` scenario: runs whose model calls take seconds, through the real worker
cluster and the real openai client, over many shops.

The endpoint is the one in OPENAI_BASE_URL when AGENTPORTAL_MODEL=openai says so; otherwise a
stub on loopback (approvals.bench.model_stub) that waits --model-latency seconds a call and
answers like the scripted model (a tool call, then text), or with text at once (--one-call).
Runs in flight
are sampled from the database while the cluster works; `ideal_runs_per_s` is what the slots
(the shops' capacities and the workers' in-flight limits) and the latency allow.

While the cluster works, the bench listens to the answers' deltas as a web process does
(runs.deltas: LISTEN/NOTIFY, Redis pub/sub, or the files of the runs it watches on SQLite).
`first_delta_ms` is, per run, from the start of the model call that wrote its answer (the
`created_at` of its `model.requested` event: the worker's clock as it recorded the attempt, in
the claim or the step's commit that precedes the request) to when the first text of that call
was heard here (the same machine's clock).
`publish_to_heard_ms` is the part from the worker's publishing of that text (the delta's `at`),
and with the stub `first_word_ms` is how long it took to send an answer's first word.

By default every run is queued before the workers start (a burst: the figures say how fast a
backlog drains). With --rate R the workers start first, warm up on a run per shop, and the runs
then arrive at R a second, round the shops, as customers' messages would: below what the slots
allow, queued -> done is then what a customer waits.
"""

import threading
import time

from django.conf import settings
from django.core.management.base import CommandError
from django.db import connection

from approvals.bench.calibrated import calibrated
from approvals.bench.context import Bench
from approvals.bench.deltas import DeltaListener, first_deltas
from approvals.bench.measure import percentiles
from approvals.bench.model_stub import ModelStub
from approvals.bench.processes import cluster_stop, peak_rss_mb
from approvals.bench.registry import Option, Scenario, register
from approvals.bench.shop import ORDER_STATUS, BenchShop, bench_shop
from approvals.bench.throughput import figures, repeated
from runs.models import FINISHED_STATUSES, AgentRun, ModelAttempt, RunStatus


def llm(bench: Bench) -> dict:
    options = bench.options
    if (
        options["shops"] < 1
        or options["capacity"] < 1
        or options["model_latency"] < 0
        or options["rate"] < 0
    ):
        raise CommandError(
            "--shops and --capacity must be at least 1, a latency and a rate 0 or more"
        )
    return calibrated(bench, ORDER_STATUS, lambda _: repeated(bench, lambda: _throughput(bench)))


def _throughput(bench: Bench) -> dict:
    runs, workers = bench.runs, bench.workers
    shops, capacity = bench.options["shops"], bench.options["capacity"]
    latency, one_call = bench.options["model_latency"], bench.options["one_call"]
    rate = bench.options["rate"]
    bench_shops = [
        bench_shop(-(-runs // shops), ORDER_STATUS, slug=f"bench-llm-{index}", capacity=capacity)
        for index in range(shops)
    ]
    for shop in bench_shops:
        shop.clear()
    if not rate:
        for index, shop in enumerate(bench_shops):
            shop.queue(runs // shops + (1 if index < runs % shops else 0))
    merchants = [shop.merchant for shop in bench_shops]

    stub = None
    if settings.AGENTPORTAL["MODEL"] == "openai":
        base_url = settings.AGENTPORTAL["OPENAI_BASE_URL"]
    else:
        stub = ModelStub(latency=latency, text_only=one_call).start()
        base_url = stub.base_url
    runs_of = AgentRun.objects.filter(merchant__in=merchants)
    arrivals = None
    pending = runs_of.exclude(status__in=FINISHED_STATUSES)
    running = runs_of.filter(status=RunStatus.RUNNING)
    listener = DeltaListener()
    cluster = None
    most_in_flight = 0
    try:
        listener.listen()
        watched = listener.watch_runs(pending)
        cluster = bench.processes.cluster(
            workers, env={"AGENTPORTAL_MODEL": "openai", "OPENAI_BASE_URL": base_url}
        )
        ends = time.monotonic() + bench.timeout
        if rate:
            _warm_up(bench_shops, cluster, ends)
            arrivals = _arrivals(bench_shops, runs, rate)
        while (arrivals is not None and arrivals.is_alive()) or watched():
            if arrivals is not None and arrivals.error is not None:
                raise CommandError(f"queueing the runs failed: {arrivals.error}")
            if listener.error is not None:
                raise CommandError(f"listening to the deltas failed: {listener.error!r}")
            if time.monotonic() > ends or cluster.poll() is not None:
                raise CommandError(f"{pending.count()} runs unfinished; see the cluster log")
            most_in_flight = max(most_in_flight, running.count())
            time.sleep(0.05)
        rss_mb = peak_rss_mb(cluster.pid)
    finally:
        if cluster is not None:
            cluster_stop(cluster)
        listener.stop()
        if stub is not None:
            stub.stop()

    result = figures(merchants, runs)
    result.update(first_deltas(runs_of, listener.first))
    if stub is not None and stub.first_words:
        result["first_word_ms"] = percentiles([s * 1000 for s in stub.first_words])
    if arrivals is not None:
        result["arrival_rate"] = round(arrivals.achieved, 1)
    calls_per_run = 1 if one_call else 2
    slots = min(shops * capacity, workers * settings.AGENTPORTAL["WORKER_IN_FLIGHT"])
    result.update(
        {
            "shops": shops,
            "capacity": capacity,
            "model_latency_s": latency,
            "max_in_flight": max(most_in_flight, stub.max_in_flight if stub else 0),
            "model_calls": ModelAttempt.objects.filter(run__merchant__in=merchants).count(),
            "ideal_runs_per_s": round(slots / (latency * calls_per_run), 1),
            "rss_mb": rss_mb,
        }
    )
    for shop in bench_shops:
        shop.clear()
    return result


def _warm_up(shops: list[BenchShop], cluster, ends: float) -> None:
    """A run per shop through the started cluster (its processes up, their clients made),
    then forgotten, so that the figures are of the arrivals alone."""
    for shop in shops:
        shop.queue(1)
    runs_of = AgentRun.objects.filter(merchant__in=[shop.merchant for shop in shops])
    while runs_of.exclude(status__in=FINISHED_STATUSES).exists():
        if time.monotonic() > ends or cluster.poll() is not None:
            raise CommandError("the warm-up runs did not finish; see the cluster log")
        time.sleep(0.05)
    runs_of.delete()


def _arrivals(shops: list[BenchShop], runs: int, rate: float) -> "_Arrivals":
    senders = [shop.senders(-(-runs // len(shops))) for shop in shops]
    plan = [
        (shops[index % len(shops)], senders[index % len(shops)][index // len(shops)])
        for index in range(runs)
    ]

    def queue_one(index: int) -> None:
        shop, customer = plan[index]
        shop.queue_one(customer)

    arrivals = _Arrivals(queue_one, runs=runs, rate=rate)
    arrivals.start()
    return arrivals


class _Arrivals(threading.Thread):
    """Queues runs at a steady rate from a thread of its own (behind schedule, it catches up
    without pausing); `achieved` is the rate it kept."""

    def __init__(self, queue_one, *, runs: int, rate: float) -> None:
        super().__init__(daemon=True)
        self.queue_one, self.runs, self.rate = queue_one, runs, rate
        self.achieved = 0.0
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            began = time.monotonic()
            for index in range(self.runs):
                pause = began + index / self.rate - time.monotonic()
                if pause > 0:
                    time.sleep(pause)
                self.queue_one(index)
            self.achieved = self.runs / max(time.monotonic() - began, 1e-9)
        except BaseException as error:
            self.error = error
        finally:
            connection.close()


register(
    Scenario(
        name="llm",
        run=llm,
        options=(
            Option("--shops", "shops (default 20)", type=int, default=20),
            Option("--capacity", "each shop's capacity (default 32)", type=int, default=32),
            Option(
                "--model-latency",
                "seconds a model call takes (default 1)",
                type=float,
                default=1.0,
            ),
            Option("--one-call", "the model answers text at once", action="store_true"),
            Option(
                "--rate",
                "runs arriving a second while the workers run (default: all at once)",
                type=float,
                default=0.0,
            ),
        ),
    )
)
