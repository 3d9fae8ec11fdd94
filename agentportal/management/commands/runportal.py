"""Start the portal: its web server, its worker cluster, or both. The demo and production start
the same way; on separate machines, web nodes run `--role web` and worker nodes `--role worker`.

A child that dies is started again after a pause that grows while it keeps dying (and starts
over once it has run for a minute); the portal stops only when it is told to.
"""

import contextlib
import ipaddress
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

import redis
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

ROLES = {"all": ("web", "worker"), "web": ("web",), "worker": ("worker",)}
# Seconds before a child that died is started again: the first time, then the next times in a
# row; a child that ran for STEADY_SECONDS starts over at the first.
RESTART_PAUSES = (1, 2, 5, 10, 30)
STEADY_SECONDS = 60


def _broker_reachable(url: str) -> None:
    """Refuse to start against a Redis broker that does not answer: every role sends or takes
    wake-ups through it."""
    client = redis.Redis.from_url(url, socket_connect_timeout=3, socket_timeout=3)
    try:
        client.ping()
    except redis.RedisError as error:
        parts = urlsplit(url)  # shown without its password
        where = f"{parts.scheme}://{parts.hostname}:{parts.port or 6379}{parts.path}"
        raise CommandError(
            f"Cannot reach the broker in AGENTPORTAL_BROKER_URL ({where}): {error}"
        ) from None
    finally:
        client.close()


@dataclass
class Child:
    name: str
    argv: list[str]
    env: dict[str, str] | None = None
    process: subprocess.Popen | None = None
    started_at: float = 0.0
    deaths: int = 0
    restart_at: float | None = None

    def start(self) -> None:
        # A session of its own, so a terminal's Ctrl-C reaches only runportal, which then
        # signals each child's main process (signalling django-q2's group makes it hang).
        self.process = subprocess.Popen(
            self.argv, env={**os.environ, **(self.env or {})}, start_new_session=True
        )
        self.started_at, self.restart_at = time.monotonic(), None

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def kill_leftovers(self) -> None:
        """Kill what is left of the child's process group once its main process is gone: the
        workers of a server killed outright would otherwise go on serving its port."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, signal.SIGKILL)


class Command(BaseCommand):
    help = "Run the web server, the worker cluster, or both (--role), until interrupted."

    def add_arguments(self, parser):
        parser.add_argument("--role", choices=sorted(ROLES), default="all")
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--port", type=int, default=8000)
        parser.add_argument(
            "--web-processes", type=int, default=settings.AGENTPORTAL["WEB_PROCESSES"]
        )
        parser.add_argument("--workers", type=int, default=settings.Q_CLUSTER["workers"])

    def handle(self, *args, role, host, port, web_processes, workers, **options):
        if web_processes < 1 or workers < 1:
            raise CommandError("--web-processes and --workers must be at least 1.")
        if not 0 < port < 65536:
            raise CommandError(f"--port must be between 1 and 65535, not {port}.")
        if settings.BROKER_URL:
            _broker_reachable(settings.BROKER_URL)
        children = [
            self._child(name, host=host, port=port, web_processes=web_processes, workers=workers)
            for name in ROLES[role]
        ]
        stopping = False

        def stop(signum, frame):
            nonlocal stopping
            stopping = True

        signal.signal(signal.SIGINT, stop)
        signal.signal(signal.SIGTERM, stop)
        for child in children:
            child.start()
        self._welcome(role, host, port, workers)
        if "web" in ROLES[role]:
            self._warn_if_anyone_reaches(host)
        while not stopping:
            for child in children:
                self._supervise(child)
            time.sleep(0.2)
        self._stop(children)

    def _child(self, name: str, *, host, port, web_processes, workers) -> Child:
        if name == "web":
            argv = [
                sys.executable,
                "-m",
                "gunicorn",
                "--config",
                "python:agentportal.gunicorn_conf",
                "--bind",
                f"{host}:{port}",
                "--workers",
                str(web_processes),
            ]
            return Child("web server", argv)
        argv = [sys.executable, str(settings.BASE_DIR / "manage.py"), "qcluster"]
        # The cluster reads its size from the settings, which read this variable.
        return Child("worker cluster", argv, env={"AGENTPORTAL_WORKERS": str(workers)})

    def _supervise(self, child: Child) -> None:
        now = time.monotonic()
        if child.restart_at is not None:
            if now >= child.restart_at:
                self.stderr.write(f"runportal: starting the {child.name} again.")
                child.start()
            return
        if child.running():
            return
        child.kill_leftovers()
        if now - child.started_at >= STEADY_SECONDS:
            child.deaths = 0
        pause = RESTART_PAUSES[min(child.deaths, len(RESTART_PAUSES) - 1)]
        child.deaths += 1
        child.restart_at = now + pause
        self.stderr.write(
            f"runportal: the {child.name} exited with code {child.process.returncode}; "
            f"starting it again in {pause} s."
        )

    def _stop(self, children: list[Child]) -> None:
        for child in children:
            if child.running():
                child.process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 30
        for child in children:
            if child.process is None:
                continue
            try:
                child.process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                child.process.kill()
                child.process.wait()
            child.kill_leftovers()

    def _warn_if_anyone_reaches(self, host: str) -> None:
        """Serving every address with no proxy named: either clients reach the server directly
        (it should listen only where the proxy reaches it), or a proxy is in front and every
        client is counted as the proxy's address."""
        try:
            everyone = ipaddress.ip_address(host).is_unspecified
        except ValueError:
            everyone = host == ""
        if everyone and not settings.AGENTPORTAL["TRUSTED_PROXIES"]:
            self.stderr.write(
                f"runportal: listening on {host or 'every address'} and "
                "AGENTPORTAL_TRUSTED_PROXIES is not set: bind the web server where only your "
                "proxy reaches it (--host), and set AGENTPORTAL_TRUSTED_PROXIES to the proxy's "
                "address so that the lockout and rate limits count each client, not the proxy."
            )

    def _welcome(self, role: str, host: str, port: int, workers: int) -> None:
        if role == "worker":
            self.stdout.write(f"Agent Portal's worker cluster is running with {workers} workers.")
            return
        base = f"http://{host}:{port}"
        self.stdout.write(
            f"Agent Portal is running on {base}/"
            + (f" with {workers} workers.\n" if role == "all" else " (web only).\n")
            + f"  Supervisors' inbox:    {base}/portal/ (sam / demo)\n"
            f"  Customers' chat:       {base}/portal/chat/ (alice / demo)\n"
            f"  Admin:                 {base}/admin/ (admin / demo)\n"
            f"  REST API docs:         {base}/api/v1/docs/\n"
            "  Stop with Ctrl-C."
        )
