"""The benchmark's `llm` scenario: runs whose model calls take seconds, through the real worker
cluster and the real openai client, over many shops.

The endpoint is the one in OPENAI_BASE_URL when AGENTPORTAL_MODEL=openai says so; otherwise a
stub on loopback (runs.model_stub) that waits --model-latency seconds a call and answers like
the scripted model (a tool call, then text), or with text at once (--one-call). Runs in flight
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

import asyncio
import os
import threading
import time
import uuid
from pathlib import Path

from django.conf import settings
from django.core.management.base import CommandError
from django.db import connection

from approvals.bench.measure import percentiles
from runs import deltas
from runs.model_stub import ModelStub
from runs.models import FINISHED_STATUSES, AgentRun, ModelAttempt, RunEvent, RunStatus


class LlmScenario:
    """The bench command's `llm` scenario; the command supplies the shops, the queue, the
    cluster and the figures."""

    def _llm_throughput(
        self,
        *,
        runs: int,
        workers: int,
        shops: int,
        capacity: int,
        latency: float,
        one_call: bool,
        timeout: float,
        rate: float = 0.0,
    ) -> dict:
        merchants = [
            self._bench_shop(-(-runs // shops), slug=f"bench-llm-{index}", capacity=capacity)
            for index in range(shops)
        ]
        for merchant in merchants:
            self._clear(merchant)
        if not rate:
            for index, merchant in enumerate(merchants):
                self._queue(merchant, runs // shops + (1 if index < runs % shops else 0))

        stub = None
        if settings.AGENTPORTAL["MODEL"] == "openai" and os.environ.get("OPENAI_BASE_URL"):
            base_url = os.environ["OPENAI_BASE_URL"]
        else:
            stub = ModelStub(latency=latency, text_only=one_call).start()
            base_url = stub.base_url
        runs_of = AgentRun.objects.filter(merchant__in=merchants)
        arrivals = None
        pending = runs_of.exclude(status__in=FINISHED_STATUSES)
        running = runs_of.filter(status=RunStatus.RUNNING)
        listener = _DeltaListener()
        cluster = None
        most_in_flight = 0
        try:
            listener.listen()
            watched = listener.watch_runs(pending)
            cluster = self._start_cluster(
                workers, env={"AGENTPORTAL_MODEL": "openai", "OPENAI_BASE_URL": base_url}
            )
            ends = time.monotonic() + timeout
            if rate:
                self._warm_up(merchants, cluster, ends)
                arrivals = self._arrivals(merchants, runs, rate)
            while (arrivals is not None and arrivals.is_alive()) or watched():
                if arrivals is not None and arrivals.error is not None:
                    raise CommandError(f"queueing the runs failed: {arrivals.error}")
                if listener.error is not None:
                    raise CommandError(f"listening to the deltas failed: {listener.error!r}")
                if time.monotonic() > ends or cluster.poll() is not None:
                    raise CommandError(f"{pending.count()} runs unfinished; see the cluster log")
                most_in_flight = max(most_in_flight, running.count())
                time.sleep(0.05)
            rss_mb = _peak_rss_mb(cluster.pid)
        finally:
            if cluster is not None:
                self._stop_cluster(cluster)
            listener.stop()
            if stub is not None:
                stub.stop()

        result = self._figures(merchants, runs)
        result.update(_first_deltas(runs_of, listener.first))
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
        for merchant in merchants:
            self._clear(merchant)
        return result

    def _warm_up(self, merchants, cluster, ends: float) -> None:
        """A run per shop through the started cluster (its processes up, their clients made),
        then forgotten, so that the figures are of the arrivals alone."""
        for merchant in merchants:
            self._queue(merchant, 1)
        runs_of = AgentRun.objects.filter(merchant__in=merchants)
        while runs_of.exclude(status__in=FINISHED_STATUSES).exists():
            if time.monotonic() > ends or cluster.poll() is not None:
                raise CommandError("the warm-up runs did not finish; see the cluster log")
            time.sleep(0.05)
        runs_of.delete()

    def _arrivals(self, merchants, runs: int, rate: float) -> "_Arrivals":
        senders = [self._senders(merchant, -(-runs // len(merchants))) for merchant in merchants]
        plan = [
            (
                merchants[index % len(merchants)],
                senders[index % len(merchants)][index // len(merchants)],
            )
            for index in range(runs)
        ]
        arrivals = _Arrivals(lambda index: self._queue_one(*plan[index]), runs=runs, rate=rate)
        arrivals.start()
        return arrivals


class _DeltaListener(threading.Thread):
    """Hears the answers' deltas as a web process does (runs.deltas.channel().listen), on an
    event loop of its own: when the first text of each model call, a (run, gen), was heard
    here and when its worker published it (epoch seconds, this machine's clock)."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.channel = deltas.channel()
        self.first: dict[tuple[str, str], tuple[float, float]] = {}
        self.error: BaseException | None = None
        # A run id no run has: what listen() publishes to know the channel is heard.
        self.probe = f"bench-probe-{uuid.uuid4()}"
        # The runs the file channel reads (the broadcast ones hear every run anyway).
        self.watched: set[str] = {self.probe}
        self._heard_probe = threading.Event()
        self._loop = asyncio.new_event_loop()
        self._task: asyncio.Task | None = None

    def listen(self, timeout: float = 30.0) -> None:
        """Start, and return once a message published from now on is heard: on PostgreSQL
        and Redis, one published before the listener subscribed is not."""
        self.start()
        ends = time.monotonic() + timeout
        while True:
            # A call's end on a run that does not exist: a web process ignores it.
            self.channel.publish_in_transaction({"run": self.probe, "gen": "0.0", "done": True})
            if self._heard_probe.wait(0.1):
                return
            if self.error is not None or time.monotonic() > ends:
                raise CommandError(f"the delta channel was not heard: {self.error!r}")

    def watch_runs(self, pending):
        """A function that says whether runs are pending; on the file channel it also keeps
        the pending ones watched (a query of their ids each time)."""
        if self.channel.broadcast:
            return pending.exists

        def watched() -> bool:
            runs = {str(pk) for pk in pending.values_list("pk", flat=True)}
            self.watched = runs | {self.probe}
            return bool(runs)

        watched()
        return watched

    def run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._task = self._loop.create_task(self._hear())
        try:
            self._loop.run_until_complete(self._task)
        except asyncio.CancelledError:
            pass
        except BaseException as error:
            self.error = error
        finally:
            self._loop.close()

    async def _hear(self) -> None:
        while True:
            async for message in self.channel.listen(lambda: set(self.watched)):
                heard = time.time()
                if "text" in message:
                    self.first.setdefault((message["run"], message["gen"]), (heard, message["at"]))
                elif message.get("run") == self.probe:
                    self._heard_probe.set()
            # The file channel stops when it watches nothing; it watches the probe at least.
            await asyncio.sleep(deltas.FILE_POLL_SECONDS)

    def stop(self) -> None:
        if self.is_alive() and self._task is not None:
            self._loop.call_soon_threadsafe(self._task.cancel)
            self.join(timeout=10)
        forget = getattr(self.channel, "forget", None)
        if forget is not None:
            forget(self.probe)


def _first_deltas(runs_of, first: dict[tuple[str, str], tuple[float, float]]) -> dict:
    """Per run, from the start of the model call that wrote its answer to the first text of
    that call heard. That call is the run's last one: its `model.requested` event is the run's
    last, and its gen ("step.attempt") the largest heard of the run, of the same step."""
    requested: dict[str, tuple[int, float]] = {}
    events = RunEvent.objects.filter(run__in=runs_of, type="model.requested").order_by("seq")
    for run_id, data, created_at in events.values_list("run_id", "data", "created_at"):
        requested[str(run_id)] = (data.get("step"), created_at.timestamp())
    calls: dict[str, tuple[tuple[int, int], float, float]] = {}
    for (run, gen), (heard, published) in first.items():
        step, _, attempt = gen.partition(".")
        key = (int(step), int(attempt))
        if run in requested and (run not in calls or key > calls[run][0]):
            calls[run] = (key, heard, published)
    first_ms, transit_ms = [], []
    for run, ((step, _), heard, published) in calls.items():
        requested_step, started = requested[run]
        if step == requested_step:
            first_ms.append((heard - started) * 1000)
            transit_ms.append((heard - published) * 1000)
    return {
        "stream_deltas": settings.AGENTPORTAL["STREAM_DELTAS"],
        "first_delta_ms": percentiles(first_ms) if first_ms else None,
        "first_delta_runs": len(first_ms),
        "publish_to_heard_ms": percentiles(transit_ms) if transit_ms else None,
    }


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


def _peak_rss_mb(root: int) -> list[float]:
    """The peak resident memory of each process under `root` (the cluster's workers among
    them), largest first."""
    found = []
    for pid in _descendants(root):
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            continue
        for line in status.splitlines():
            if line.startswith("VmHWM:"):
                found.append(round(int(line.split()[1]) / 1024, 1))
    return sorted(found, reverse=True)


def _descendants(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(parent, []).append(int(entry.name))
    found, frontier = [], [root]
    while frontier:
        pid = frontier.pop()
        found.append(pid)
        frontier.extend(children.get(pid, []))
    return found
