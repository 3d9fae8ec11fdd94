"""`runportal`: the web server and the worker cluster as one process tree."""

import json
import os
import signal
import subprocess
import sys
import urllib.request

import pytest

from approvals.bench.measure import free_port
from runs.models import AgentRun, RunStatus
from tests import factories
from tests.conftest import ROOT, database_url, wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.django_db(transaction=True)]


def _children(pid: int) -> list[int]:
    found = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True)
    return [int(line) for line in found.stdout.split()]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _get(url: str, headers: dict | None = None):
    request = urllib.request.Request(url, headers=headers or {})
    with urllib.request.urlopen(request, timeout=5) as response:
        return response.status, json.loads(response.read())


def test_runportal_serves_runs_and_stops_both_children_on_sigterm(demo):
    # given: the portal started as the demo starts it
    alice = demo.memberships.get(user__username="alice").user
    key = factories.api_key_for(alice, demo)
    port = free_port()
    portal = subprocess.Popen(
        [sys.executable, str(ROOT / "manage.py"), "runportal", "--port", str(port)],
        env={**os.environ, "DATABASE_URL": database_url()},
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:

        def healthy() -> bool:
            try:
                return _get(f"{base}/healthz")[0] == 200
            except OSError:
                return False

        wait_for(healthy, timeout=60)
        children = _children(portal.pid)
        assert len(children) == 2

        # when: a run is posted over HTTP
        request = urllib.request.Request(
            f"{base}/api/v1/runs",
            data=json.dumps({"message": "What is the status of order ORD-1002?"}).encode(),
            headers={
                "Authorization": f"Bearer {key}",
                "Idempotency-Key": "portal-1",
                "Content-Type": "application/json",
            },
            method="POST",
        )
        with urllib.request.urlopen(request, timeout=5) as response:
            run_id = json.loads(response.read())["id"]

        # then: the portal's own worker finishes it
        wait_for(lambda: AgentRun.objects.get(pk=run_id).is_finished, timeout=60)
        assert AgentRun.objects.get(pk=run_id).status == RunStatus.COMPLETED

        # when: stopped
        portal.send_signal(signal.SIGTERM)
        output, _ = portal.communicate(timeout=40)
    finally:
        if portal.poll() is None:
            # A failed test must not leave the children (each in its own session) behind.
            for child in _children(portal.pid):
                os.killpg(child, signal.SIGKILL)
            portal.kill()
            portal.wait()

    # then: it told the user where to go, and nothing is left running
    assert f"http://127.0.0.1:{port}/" in output
    assert portal.returncode == 0
    wait_for(lambda: not any(_alive(child) for child in children), timeout=10)
