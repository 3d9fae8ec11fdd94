"""The processes a scenario starts: the worker cluster (`qcluster`) or the whole portal
(`runportal`, web and workers), on the bench's database, their output to --log."""

import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import TextIO

from django.conf import settings
from django.core.management.base import CommandError

from approvals.bench.measure import free_port


class Processes:
    """Starts and stops them, each with `env` (what the bench pins) over this process's."""

    def __init__(self, log: TextIO, env: dict[str, str]) -> None:
        self.log, self.env = log, env

    def cluster(self, workers: int, env: dict[str, str] | None = None) -> subprocess.Popen:
        return subprocess.Popen(
            [sys.executable, str(settings.BASE_DIR / "manage.py"), "qcluster"],
            env={**os.environ, "AGENTPORTAL_WORKERS": str(workers), **self.env, **(env or {})},
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def portal(
        self, workers: int, *, web_processes: int | None = None
    ) -> tuple[int, subprocess.Popen]:
        """`runportal` on a free port, once it answers /healthz."""
        port = free_port()
        web = [] if web_processes is None else ["--web-processes", str(web_processes)]
        portal = subprocess.Popen(
            [
                sys.executable,
                str(settings.BASE_DIR / "manage.py"),
                "runportal",
                "--port",
                str(port),
                "--workers",
                str(workers),
                *web,
            ],
            stdout=subprocess.DEVNULL,
            stderr=self.log,
            # The benchmark measures throughput, not the per-key rate limit its clients share.
            env={**os.environ, "AGENTPORTAL_API_RATE": "1000000/minute", **self.env},
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


def portal_stop(portal: subprocess.Popen) -> None:
    if portal.poll() is None:
        portal.send_signal(signal.SIGTERM)
        portal.wait(timeout=60)


def cluster_stop(cluster: subprocess.Popen) -> None:
    if cluster.poll() is None:
        cluster.send_signal(signal.SIGTERM)
        try:
            cluster.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(cluster.pid, signal.SIGKILL)
            cluster.wait()


def peak_rss_mb(root: int) -> list[float]:
    """The peak resident memory of each process under `root` (the cluster's workers among
    them), largest first."""
    found = []
    for pid in descendants(root):
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            continue
        for line in status.splitlines():
            if line.startswith("VmHWM:"):
                found.append(round(int(line.split()[1]) / 1024, 1))
    return sorted(found, reverse=True)


def descendants(root: int) -> list[int]:
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
