"""The production web server (gunicorn with uvicorn's ASGI workers) as runportal starts it:
idle sockets and open event streams cost it no thread, and a web server that dies is started
again."""

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from django.contrib.auth.models import User

from approvals.bench.measure import free_port
from tests import factories, http
from tests.conftest import ROOT, database_url, wait_for

STATUS = "What is the status of order ORD-1001?"


@pytest.mark.usefixtures("fresh_cache")
def test_half_open_connections_and_open_streams_do_not_stop_other_clients(demo, web_server):
    # given one web process, 50 connections that sent half a request and wait, and 200 event
    # streams of one key held open on a run that stays queued
    base = web_server(AGENTPORTAL_MAX_EVENT_STREAMS_PER_KEY="200")
    port = int(base.rsplit(":", 1)[1])
    alice = User.objects.get(username="alice")
    run = factories.run_queue(customer=alice, merchant=demo, message=STATUS)
    key = factories.api_key_for(alice, demo)
    half_open = []
    for _ in range(50):
        sock = socket.create_connection(("127.0.0.1", port))
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
        half_open.append(sock)
    streams = [
        http.open_stream(base, f"/api/v1/runs/{run.pk}/events/stream", key=key) for _ in range(200)
    ]

    # when another client asks
    health = http.get(base, "/healthz", timeout=10)
    page = http.get(base, f"/api/v1/runs/{run.pk}", key=factories.api_key_for(alice, demo))

    # then it is answered, and every stream is still open
    assert health.status == 200
    assert page.status == 200
    assert [stream.status for stream in streams] == [200] * 200
    assert not any(stream.isclosed() for stream in streams)
    for stream in streams:
        stream.close()
    for sock in half_open:
        sock.close()


def _runportal(port: int, log: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [
            *(sys.executable, str(ROOT / "manage.py"), "runportal", "--role", "web"),
            *("--port", str(port), "--web-processes", "1"),
        ],
        env={
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "agentportal.settings",
            "DATABASE_URL": database_url(),
        },
        cwd=ROOT,
        stdout=log.open("w"),
        stderr=subprocess.STDOUT,
    )


def _descendants(pid: int) -> set[int]:
    """The processes under `pid` (the portal's web server and its workers)."""
    found = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True)
    children = {int(child) for child in found.stdout.split()}
    return children.union(*(_descendants(child) for child in children))


def _alive(pids: set[int]) -> set[int]:
    alive = set()
    for pid in pids:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            continue
        alive.add(pid)
    return alive


def _answers(base: str) -> bool:
    try:
        return http.get(base, "/healthz", timeout=2).status == 200
    except OSError:
        return False


@pytest.mark.django_db(transaction=True)
def test_runportal_starts_a_killed_web_server_again_and_leaves_nothing_behind(tmp_path):
    # given the portal's web role, answering
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    log = tmp_path / "portal.log"
    portal = _runportal(port, log)
    try:
        wait_for(lambda: _answers(base), timeout=60)
        servers = _descendants(portal.pid)
        assert len(servers) == 2  # gunicorn and its one worker process

        # when its web server is killed outright, workers and all
        for pid in servers:
            os.kill(pid, signal.SIGKILL)

        # then runportal says so and starts it again, and it answers
        wait_for(lambda: "starting the web server again" in log.read_text(), timeout=30)
        wait_for(lambda: _answers(base), timeout=60)
        assert "exited with code -9" in log.read_text()
        assert not _alive(servers)
        restarted = _descendants(portal.pid)
    finally:
        portal.send_signal(signal.SIGTERM)
        portal.wait(timeout=60)

    # and once it is stopped, none of its servers is left
    wait_for(lambda: not _alive(restarted), timeout=20)


def test_runportal_refuses_an_unknown_role():
    done = subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), "runportal", "--role", "cook"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "DJANGO_SETTINGS_MODULE": "agentportal.settings"},
        timeout=60,
    )

    assert done.returncode != 0
    assert "invalid choice: 'cook'" in done.stderr


def _runportal_refused(**env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), "runportal", "--role", "worker"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "DJANGO_SETTINGS_MODULE": "agentportal.settings", **env},
        timeout=60,
    )


@pytest.mark.parametrize(
    ("env", "sentence"),
    [
        (
            {"AGENTPORTAL_BROKER_URL": "amqp://broker/"},
            "AGENTPORTAL_BROKER_URL must be a redis:// or rediss:// URL, not 'amqp://broker/'.",
        ),
        (
            {"AGENTPORTAL_BROKER_URL": "redis://someone:secret@127.0.0.1:1/0"},
            "Cannot reach the broker in AGENTPORTAL_BROKER_URL (redis://127.0.0.1:1/0)",
        ),
        ({"DATABASE_URL": "mongodb://db/portal"}, "DATABASE_URL cannot be read"),
        ({"DATABASE_URL": "postgres://u:p@host:port/db"}, "DATABASE_URL cannot be read"),
    ],
    ids=["broker-not-redis", "broker-unreachable", "database-scheme", "database-port"],
)
def test_runportal_refuses_bad_configuration_in_one_sentence(env, sentence):
    done = _runportal_refused(**env)

    assert done.returncode != 0
    assert sentence in done.stderr
    assert "secret" not in done.stderr
    assert "Traceback" not in done.stderr
