"""The `scale` scenario: how each hot path's cost grows with the history.

At each size (shops, finished runs) it seeds the history (_scale_seed) and times each path by
calling what the product calls there, in this process: the median of --repeat runs after one
unmeasured run. Paths that write (the claim, a prune batch) run in a transaction rolled back,
so every repeat and every size finds the same work. At the largest size it starts the portal
and reads the resident memory of a worker process and a web process once they have served.
It writes a table, a plot and the figures to the artifacts directory.
"""

import json
import statistics
import time
import urllib.request
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

from django.core.management.base import CommandError
from django.db import connection, transaction
from django.test import Client
from django.utils import timezone

from approvals import plans
from approvals.bench.scale.plot import curves_svg, curves_table
from approvals.bench.scale.seed import CLAIMABLE, Scale, scale_seed
from approvals.live import Topic, page_states
from runs import selectors
from runs.models import AgentRun, RunEvent, RunStatus
from runs.serializers import RunEventSerializer
from runs.services.retention import runs_prune_batch
from runs.services.scheduling import runs_claim

PRUNE_AGE = timedelta(days=90)
PRUNE_BATCH = 500  # prune's default --batch-size
LIVE_PAGES = 20  # approval pages open beside the inbox
# A hot path may cost this many times as much at the largest size as at the smallest.
WITHIN = 2.0


def sizes_parse(text: str) -> list[tuple[int, int]]:
    """`1000:100000,10000:1000000` as [(shops, runs), ...], growing."""
    try:
        sizes = [tuple(int(part) for part in size.split(":")) for size in text.split(",")]
    except ValueError:
        sizes = []
    if not sizes or any(len(size) != 2 or min(size) < 1 for size in sizes):
        raise CommandError("--sizes takes shops:runs pairs, like 1000:100000,10000:1000000")
    if sizes != sorted(sizes) or len(set(sizes)) != len(sizes):
        raise CommandError("--sizes must grow: each pair larger than the one before")
    return sizes


class ScaleScenario:
    """The bench command's `scale` scenario (a mixin: it starts the portal as the others do)."""

    def _scale(
        self, *, sizes: list[tuple[int, int]], repeat: int, rss: bool, artifacts: Path
    ) -> dict:
        points = []
        for shops, runs in sizes:
            started = time.perf_counter()
            scale = scale_seed(shops=shops, runs=runs)
            seed_s = time.perf_counter() - started
            if connection.vendor == "postgresql":
                with connection.cursor() as cursor:
                    cursor.execute("ANALYZE")  # the planner sees the history just written
            points.append(
                {
                    "shops": shops,
                    "runs": runs,
                    "events": RunEvent.objects.count(),
                    "seed_s": round(seed_s, 1),
                    "ms": self._scale_paths(scale, repeat),
                }
            )
            self.stderr.write(f"scale: {shops} shops, {runs} runs: {points[-1]['ms']}")
        first, last = points[0]["ms"], points[-1]["ms"]
        growth = {path: round(last[path] / max(first[path], 0.001), 2) for path in first}
        result = {
            "sizes": points,
            "growth": growth,
            "within": WITHIN,
            "over": sorted(path for path, ratio in growth.items() if ratio > WITHIN),
            "rss_mb": self._scale_rss(scale) if rss else None,
        }
        artifacts.mkdir(parents=True, exist_ok=True)
        (artifacts / "scale.json").write_text(json.dumps(result, indent=2) + "\n")
        (artifacts / "scale.md").write_text(curves_table(result))
        (artifacts / "scale.svg").write_text(curves_svg(result))
        result["artifacts"] = [str(artifacts / name) for name in ("scale.md", "scale.svg")]
        return {"scale": result}

    def _scale_paths(self, scale: Scale, repeat: int) -> dict[str, float]:
        supervisor = Client(secure=True)
        supervisor.force_login(scale.supervisor)
        api = Client(secure=True, headers={"Authorization": f"Bearer {scale.api_key}"})
        approval = scale.pending[0]
        # The inbox page lists the oldest calls first, the API the newest.
        shown, newest = approval.interrupt_id, scale.pending[-1].interrupt_id
        topics = [Topic("inbox", str(scale.supervisor.pk))] + [
            Topic("approval", str(call.pk)) for call in scale.pending[:LIVE_PAGES]
        ]
        # The streams' cursors one event short of each run's last: every read finds news.
        cursors = {call.run_id: max(0, call.run.last_event_seq - 1) for call in scale.pending}

        def page(client: Client, path: str, shows: str) -> Callable[[], None]:
            def get() -> None:
                response = client.get(path)
                if response.status_code != 200 or shows not in response.content.decode():
                    raise CommandError(
                        f"GET {path} answered {response.status_code} without {shows}"
                    )

            return get

        def claim() -> None:
            with transaction.atomic():
                if len(runs_claim(limit=10)) != min(10, CLAIMABLE):
                    raise CommandError("the claim did not find the queued runs")
                transaction.set_rollback(True)

        def streams() -> None:
            for events, _finished in selectors.runs_events_since(cursors).values():
                RunEventSerializer(events, many=True).data  # noqa: B018 (as the streams send them)

        def prune() -> None:
            with transaction.atomic():
                batch = runs_prune_batch(
                    finished_before=timezone.now() - PRUNE_AGE, batch_size=PRUNE_BATCH
                )
                if batch.runs == 0:
                    raise CommandError("prune found no runs old enough")
                transaction.set_rollback(True)

        paths: dict[str, Callable[[], object]] = {
            "claim": claim,
            "inbox_portal": page(supervisor, "/portal/", shown),
            "inbox_api": page(api, "/api/v1/approvals?status=PENDING_APPROVAL", newest),
            "run_page_portal": page(supervisor, f"/portal/approvals/{shown}/", shown),
            "run_api": page(api, f"/api/v1/runs/{approval.run_id}", str(approval.run_id)),
            "live_pages": lambda: page_states(topics),
            "run_streams": streams,
            "reconcile": plans.plans_reconcile_due,
            "prune_batch": prune,
        }
        return {name: _median_ms(path, repeat) for name, path in paths.items()}

    def _scale_rss(self, scale: Scale) -> dict[str, float]:
        """Resident memory of a web process and a worker process of the portal, once the web
        one answered the supervisor's pages and the worker one ran the queued runs."""
        port, portal = self._start_portal(1, web_processes=1)
        try:
            base = f"http://127.0.0.1:{port}/api/v1"
            for _ in range(20):
                for path in (
                    "/approvals?status=PENDING_APPROVAL",
                    f"/approvals/{scale.pending[0].interrupt_id}",
                    f"/runs/{scale.pending[0].run_id}",
                ):
                    _get_json(base, scale.api_key, path)
            queued = AgentRun.objects.filter(
                merchant=scale.shop, status__in=[RunStatus.QUEUED, RunStatus.RUNNING]
            )
            ends = time.monotonic() + 120
            while queued.exists():
                if time.monotonic() > ends or portal.poll() is not None:
                    raise CommandError("the portal's workers did not run the queued runs")
                time.sleep(0.2)
            return _rss_by_role(portal.pid)
        finally:
            self._stop_portal(portal)


def _median_ms(path: Callable[[], object], repeat: int) -> float:
    path()  # once unmeasured: imports, caches, prepared statements
    timings = []
    for _ in range(repeat):
        started = time.perf_counter()
        path()
        timings.append((time.perf_counter() - started) * 1000)
    return round(statistics.median(timings), 1)


def _get_json(base: str, key: str, path: str) -> None:
    request = urllib.request.Request(f"{base}{path}", headers={"Authorization": f"Bearer {key}"})
    with urllib.request.urlopen(request, timeout=30) as response:
        response.read()


def _rss_by_role(root: int) -> dict[str, float]:
    """The largest resident memory (MB) among the web server's processes and among the worker
    cluster's, below `root`: the served web process and the worker that ran the runs."""
    parents, commands = {}, {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
                commands[int(entry.name)] = (entry / "cmdline").read_bytes().replace(b"\0", b" ")
            except OSError:
                continue  # a process that ended meanwhile
            parents[int(entry.name)] = int(stat.rpartition(")")[2].split()[1])
    largest: dict[str, float] = {}
    for pid in parents:
        role, ancestor = None, pid
        while ancestor in parents and ancestor != root:
            command = commands.get(ancestor, b"")
            role = role or ("web" if b"gunicorn" in command else None)
            role = role or ("worker" if b"qcluster" in command else None)
            ancestor = parents[ancestor]
        if ancestor != root or role is None:
            continue
        status = Path(f"/proc/{pid}/status")
        try:
            kb = next(
                int(line.split()[1])
                for line in status.read_text().splitlines()
                if line.startswith("VmRSS:")
            )
        except (OSError, StopIteration):
            continue
        largest[role] = max(largest.get(role, 0.0), round(kb / 1024, 1))
    return largest
