"""Serve the site and run the worker cluster together: the demo's one process tree."""

import os
import signal
import subprocess
import sys
import time

from django.conf import settings
from django.core.management.base import BaseCommand


class Command(BaseCommand):
    help = "Run the web server and the django-q2 cluster until interrupted."

    def add_arguments(self, parser):
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--port", type=int, default=8000)
        parser.add_argument("--workers", type=int, default=settings.Q_CLUSTER["workers"])

    def handle(self, *args, host, port, workers, **options):
        manage = [sys.executable, str(settings.BASE_DIR / "manage.py")]
        env = {**os.environ, "AGENTPORTAL_WORKERS": str(workers)}
        # Each child gets its own session, so a terminal's Ctrl-C reaches only this process;
        # it then signals each child's main process. Signalling the cluster's whole process
        # group makes django-q2 hang.
        web = subprocess.Popen(
            [*manage, "serveweb", "--host", host, "--port", str(port)],
            env=env,
            start_new_session=True,
        )
        cluster = subprocess.Popen([*manage, "qcluster"], env=env, start_new_session=True)
        children = [web, cluster]
        stopping = False

        def stop(signum, frame):
            nonlocal stopping
            stopping = True

        signal.signal(signal.SIGINT, stop)
        signal.signal(signal.SIGTERM, stop)
        self.stdout.write(
            f"Agent Portal is running on http://{host}:{port}/ with {workers} workers.\n"
            f"  Supervisors' inbox:    http://{host}:{port}/portal/ (sam / demo)\n"
            f"  Customers' chat:       http://{host}:{port}/portal/chat/ (alice / demo)\n"
            f"  Admin:                 http://{host}:{port}/admin/ (admin / demo)\n"
            f"  REST API docs:         http://{host}:{port}/api/v1/docs/\n"
            "  Stop with Ctrl-C."
        )
        while not stopping and all(child.poll() is None for child in children):
            time.sleep(0.2)
        for child in children:
            if child.poll() is None:
                child.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 30
        for child in children:
            try:
                child.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()
        failed = [child.returncode for child in children if child.returncode not in (0, -15)]
        if failed and not stopping:
            sys.exit(1)
