"""The benchmark's `llm` scenario: runs whose model calls take seconds, through the real worker
cluster and the real openai client, over many shops.

The endpoint is the one in OPENAI_BASE_URL when AGENTPORTAL_MODEL=openai says so; otherwise a
stub on loopback (runs.model_stub) that waits --model-latency seconds a call and answers like
the scripted model (a tool call, then text), or with text at once (--one-call). Runs in flight
are sampled from the database while the cluster works; `ideal_runs_per_s` is what the slots
(the shops' capacities and the workers' in-flight limits) and the latency allow.

By default every run is queued before the workers start (a burst: the figures say how fast a
backlog drains). With --rate R the workers start first, warm up on a run per shop, and the runs
then arrive at R a second, round the shops, as customers' messages would: below what the slots
allow, queued -> done is then what a customer waits.
"""

import os
import threading
import time
from pathlib import Path

from django.conf import settings
from django.core.management.base import CommandError
from django.db import connection

from runs.model_stub import ModelStub
from runs.models import FINISHED_STATUSES, AgentRun, ModelAttempt, RunStatus


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
        cluster = self._start_cluster(
            workers, env={"AGENTPORTAL_MODEL": "openai", "OPENAI_BASE_URL": base_url}
        )
        runs_of = AgentRun.objects.filter(merchant__in=merchants)
        arrivals = None
        pending = runs_of.exclude(status__in=FINISHED_STATUSES)
        running = runs_of.filter(status=RunStatus.RUNNING)
        most_in_flight = 0
        try:
            ends = time.monotonic() + timeout
            if rate:
                self._warm_up(merchants, cluster, ends)
                arrivals = self._arrivals(merchants, runs, rate)
            while (arrivals is not None and arrivals.is_alive()) or pending.exists():
                if arrivals is not None and arrivals.error is not None:
                    raise CommandError(f"queueing the runs failed: {arrivals.error}")
                if time.monotonic() > ends or cluster.poll() is not None:
                    raise CommandError(f"{pending.count()} runs unfinished; see the cluster log")
                most_in_flight = max(most_in_flight, running.count())
                time.sleep(0.05)
            rss_mb = _peak_rss_mb(cluster.pid)
        finally:
            self._stop_cluster(cluster)
            if stub is not None:
                stub.stop()

        result = self._figures(merchants, runs)
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
