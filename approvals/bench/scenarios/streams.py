"""The benchmark's `streams` scenario: many customers' pages hold event streams open on the
production web server while a supervisor decides approvals at a steady rate.

`runportal` (web and workers) runs --streams + --runs refunds until each waits on an approval.
One event stream is opened on each of the first --streams runs with its customer's key, spread
over 30 s, and held open as the customer's page would: a stream that ends (after 4 to 5
minutes, or its run's last event) is opened again at once, with Last-Event-ID; when its run
finished it moves to a run still waiting. Then the first --runs
approvals are decided at --rate a second over HTTP. It reports the decisions' latency, how long
each decision took to reach the streams watching its run, how many streams were held, and the
CPU the web server used.
"""

import asyncio
import os
import queue
import threading
import time
import urllib.error
from collections import Counter
from pathlib import Path

from django.conf import settings
from django.contrib.auth.models import User
from django.core.management.base import CommandError

from agentportal.services import api_key_create
from approvals.bench.calibrated import approvals_approve, calibrated
from approvals.bench.context import Bench
from approvals.bench.measure import percentiles, post_json
from approvals.bench.processes import descendants, portal_stop
from approvals.bench.registry import Option, Scenario, register
from approvals.bench.shop import BENCH_SUPERVISOR, REFUND, BenchShop, bench_shop
from approvals.models import Approval, ApprovalStatus
from runs.models import FINISHED_STATUSES, AgentRun

DECIDERS = 8
RAMP_SECONDS = 30.0


def streams(bench: Bench) -> dict:
    held, rate = bench.options["streams"], bench.options["rate"]
    web_processes = bench.options["web_processes"]
    if web_processes is None:
        web_processes = settings.AGENTPORTAL["WEB_PROCESSES"]
    if held < 0 or web_processes < 1 or rate < 0:
        raise CommandError("--streams must be 0 or more, --web-processes at least 1")
    if held and bench.runs > held:
        raise CommandError("--runs (the decisions) must not exceed --streams")
    return calibrated(
        bench,
        REFUND,
        lambda shop: _streams(
            bench,
            shop,
            decisions=bench.runs,
            streams=held,
            rate=rate or 20.0,
            web_processes=web_processes,
        ),
        resume=approvals_approve,
    )


def _streams(
    bench: Bench,
    shop: BenchShop,
    *,
    decisions: int,
    streams: int,
    rate: float,
    web_processes: int,
) -> dict:
    bench_shop(streams + decisions, shop.message)  # customers for the watched runs too
    merchant = shop.merchant
    supervisor = User.objects.get(username=BENCH_SUPERVISOR)
    _, key = api_key_create(merchant=merchant, role="supervisor", user=supervisor)
    shop.queue(streams + decisions)
    port, portal = bench.processes.portal(bench.workers, web_processes=web_processes)
    try:
        ends = time.monotonic() + bench.timeout
        waiting = Approval.objects.filter(merchant=merchant, status=ApprovalStatus.PENDING_APPROVAL)
        while waiting.count() < streams + decisions:
            if time.monotonic() > ends or portal.poll() is not None:
                raise CommandError(f"only {waiting.count()} runs came to wait")
            time.sleep(0.2)
        approvals = list(waiting.order_by("run__created_at").values_list("run_id", "interrupt_id"))
        runs = AgentRun.objects.filter(merchant=merchant)
        cursors = {str(pk): seq for pk, seq in runs.values_list("pk", "last_event_seq")}
        customer_keys = {
            customer.pk: api_key_create(merchant=merchant, role="customer", user=customer)[1]
            for customer in User.objects.filter(agent_runs__merchant=merchant).distinct()
        }
        keys = {
            str(pk): customer_keys[account] for pk, account in runs.values_list("pk", "account")
        }
        watched = [str(run_id) for run_id, _ in approvals[:streams]]
        spares = [str(run_id) for run_id, _ in approvals[streams:]]
        pages = _Pages(port, keys, watched, spares, cursors)
        opened = pages.start().wait_open(streams, ends) if streams else 0.0
        web = [pid for pid in descendants(portal.pid) if _is_web(pid)]
        cpu_before, phase_began = _cpu_seconds(web), time.monotonic()

        sent: dict[str, float] = {}
        latencies, statuses, achieved = _decide_at_rate(
            f"http://127.0.0.1:{port}/api/v1", key, approvals[:decisions], rate, sent
        )
        time.sleep(2)  # the last decisions' events reach their streams
        cpu_s = _cpu_seconds(web) - cpu_before
        phase_s = time.monotonic() - phase_began
        if streams:
            pages.stop()
        delivery = [
            (seen - sent[run_id]) * 1000
            for run_id, seen in pages.decided_seen
            if run_id in sent and seen >= sent[run_id]
        ]
        pending = AgentRun.objects.filter(pk__in=[r for r, _ in approvals[:decisions]])
        while pending.exclude(status__in=FINISHED_STATUSES).exists():
            if time.monotonic() > ends or portal.poll() is not None:
                raise CommandError("the decided runs did not finish")
            time.sleep(0.1)
    finally:
        portal_stop(portal)
    return {
        "streams": {
            "held": streams,
            "web_processes": web_processes,
            "opened_over_s": round(opened, 1),
            "fewest_open": pages.fewest_open,
            "reopened": pages.reopened,
            "refused": dict(pages.refused),
            "decision_to_stream_ms": percentiles(delivery) if delivery else None,
            "web_cpu_percent": round(100 * cpu_s / phase_s, 1),
        },
        "decisions": {
            "count": len(latencies),
            "per_s": round(achieved, 1),
            **{f"{name}_ms": value for name, value in percentiles(latencies).items()},
            "p99_ms": round(sorted(latencies)[max(0, int(len(latencies) * 0.99) - 1)], 1),
            "statuses": dict(Counter(statuses)),
        },
    }


def _decide_at_rate(base, key, approvals, rate, sent) -> tuple[list[float], list[int], float]:
    """Approve each (run id, interrupt id) at its moment on a steady schedule, from a few
    threads so that one slow answer does not hold the next decision back."""
    work: queue.Queue = queue.Queue()
    began = time.monotonic() + 0.5
    for index, approval in enumerate(approvals):
        work.put((began + index / rate, approval))
    latencies: list[float] = []
    statuses: list[int] = []
    lock = threading.Lock()

    def decider() -> None:
        while True:
            try:
                due, (run_id, interrupt_id) = work.get_nowait()
            except queue.Empty:
                return
            time.sleep(max(0.0, due - time.monotonic()))
            started = time.perf_counter()
            sent[str(run_id)] = started
            try:
                post_json(base, key, f"/approvals/{interrupt_id}/decision", {"decision": "approve"})
                status = 200
            except urllib.error.HTTPError as error:
                status = error.code
            except OSError:
                status = 0
            with lock:
                latencies.append((time.perf_counter() - started) * 1000)
                statuses.append(status)

    threads = [threading.Thread(target=decider) for _ in range(DECIDERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    spread = max(sent.values()) - min(sent.values()) if len(sent) > 1 else 0.0
    return latencies, statuses, (len(sent) - 1) / spread if spread else 0.0


class _Pages(threading.Thread):
    """Pages holding event streams open, on an event loop of their own."""

    def __init__(self, port: int, keys: dict[str, str], watched, spares, cursors) -> None:
        super().__init__(daemon=True)
        self.port, self.keys = port, keys
        self.watched, self.spares, self.cursors = watched, spares, cursors
        self.open = 0
        self.fewest_open: int | None = None
        self.reopened = 0
        self.refused: Counter = Counter()
        self.decided_seen: list[tuple[str, float]] = []
        self.stopping = threading.Event()

    def start(self) -> "_Pages":
        super().start()
        return self

    def stop(self) -> None:
        self.stopping.set()
        self.join(timeout=30)

    def wait_open(self, count: int, ends: float) -> float:
        began = time.monotonic()
        while self.open < count:
            if time.monotonic() > ends:
                raise CommandError(f"only {self.open} of {count} streams opened")
            time.sleep(0.05)
        self.fewest_open = count
        return time.monotonic() - began

    def run(self) -> None:
        asyncio.run(self._main())

    async def _main(self) -> None:
        # Pages open over RAMP_SECONDS rather than all at once, as visitors arrive.
        spacing = RAMP_SECONDS / len(self.watched)
        pages = [
            asyncio.create_task(self._page(run_id, index * spacing))
            for index, run_id in enumerate(self.watched)
        ]
        while not self.stopping.is_set():
            if self.fewest_open is not None:
                self.fewest_open = min(self.fewest_open, self.open)
            await asyncio.sleep(0.05)
        for page in pages:
            page.cancel()
        await asyncio.gather(*pages, return_exceptions=True)

    async def _page(self, run_id: str, delay: float) -> None:
        await asyncio.sleep(delay)
        while True:
            if await self._stream(run_id):
                if not self.spares:
                    return
                run_id = self.spares.pop()
            self.reopened += 1

    async def _stream(self, run_id: str) -> bool:
        """One stream until the server ends it; whether the run finished."""
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", self.port)
        except OSError:
            self.refused["connect"] += 1
            await asyncio.sleep(1)
            return False
        try:
            writer.write(
                (
                    f"GET /api/v1/runs/{run_id}/events/stream HTTP/1.1\r\n"
                    "Host: 127.0.0.1\r\n"
                    f"Authorization: Bearer {self.keys[run_id]}\r\n"
                    "Accept: text/event-stream\r\n"
                    f"Last-Event-ID: {self.cursors[run_id]}\r\n"
                    "Connection: close\r\n\r\n"
                ).encode()
            )
            status = int((await reader.readline()).split()[1])
            while (await reader.readline()) not in (b"\r\n", b""):
                pass
            if status != 200:
                self.refused[str(status)] += 1
                await asyncio.sleep(1)
                return False
            self.open += 1
            try:
                while line := await reader.readline():
                    if line.startswith(b"id: "):
                        self.cursors[run_id] = int(line[4:])
                    elif line.startswith(b"event: approval.decided"):
                        self.decided_seen.append((run_id, time.perf_counter()))
                    elif line.startswith(b"event: run.completed"):
                        return True
            finally:
                self.open -= 1
            return False
        except (OSError, ValueError, IndexError):
            self.refused["broken"] += 1
            return False
        finally:
            writer.close()


def _is_web(pid: int) -> bool:
    try:
        return b"gunicorn" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def _cpu_seconds(pids: list[int]) -> float:
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / os.sysconf("SC_CLK_TCK")


register(
    Scenario(
        name="streams",
        run=streams,
        options=(
            Option(
                "--streams",
                "event streams held open (default 1000; 0: the decisions alone, for comparison)",
                type=int,
                default=1000,
            ),
            Option(
                "--web-processes",
                "the web server's processes (default: AGENTPORTAL_WEB_PROCESSES)",
                type=int,
            ),
            Option(
                "--rate",
                "decisions a second (default 20)",
                type=float,
                default=0.0,
            ),
        ),
        # The pages watching the decided runs hear their answers as they are written, as a
        # customer's page does: the web server's work includes sending those words.
        stream_ms=None,
    )
)
