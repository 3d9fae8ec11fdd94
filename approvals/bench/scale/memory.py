"""The resident memory of the portal's processes at the scale scenario's largest size."""

import time
import urllib.request
from pathlib import Path

from django.core.management.base import CommandError

from approvals.bench.processes import Processes, portal_stop
from approvals.bench.scale.seed import Scale
from runs.models import AgentRun, RunStatus


def rss_by_role(scale: Scale, processes: Processes) -> dict[str, float]:
    """Resident memory of a web process and a worker process of the portal, once the web
    one answered the supervisor's pages and the worker one ran the queued runs."""
    port, portal = processes.portal(1, web_processes=1)
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
        return _largest_by_role(portal.pid)
    finally:
        portal_stop(portal)


def _get_json(base: str, key: str, path: str) -> None:
    request = urllib.request.Request(f"{base}{path}", headers={"Authorization": f"Bearer {key}"})
    with urllib.request.urlopen(request, timeout=30) as response:
        response.read()


def _largest_by_role(root: int) -> dict[str, float]:
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
