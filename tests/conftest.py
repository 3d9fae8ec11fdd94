import asyncio
import importlib
import inspect
import io
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from django.apps import apps as django_apps
from django.conf import settings
from django.core.cache import cache
from django.core.management import call_command
from django.db import connection
from rest_framework.test import APIClient

from agentportal.models import Merchant
from approvals.bench.measure import free_port
from approvals.models import Approval
from runs.models import RunStatus
from tests import factories
from tests.approvals.policy_helpers import approval_of, big_order, policy_set, refund_run
from tests.approvals.refund_helpers import Waiting, refund_run_waiting

ROOT = Path(settings.BASE_DIR)


def pytest_configure(config):
    # A test run killed mid-way leaves SQLite's -wal and -shm files beside the test database;
    # next to a freshly created database file they read as a corrupt one ("disk I/O error").
    test_name = settings.DATABASES["default"].get("TEST", {}).get("NAME")
    if settings.DATABASES["default"]["ENGINE"].endswith("sqlite3") and test_name:
        for stale in Path(test_name).parent.glob(f"{Path(test_name).name}*-[ws][ah][lm]"):
            stale.unlink(missing_ok=True)


@pytest.fixture(autouse=True)
def fast_passwords(settings):
    """The demo data hashes seven passwords; the slow default hasher proves nothing here."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def fresh_cache(db):
    """An empty shared cache, before and after: what the rate limits and sign-in counts see."""
    cache.clear()
    yield
    cache.clear()


@pytest.fixture
def stock_latency(settings):
    """stock_latency(seconds): how long the warehouse's stock check takes."""

    def set_latency(seconds: float) -> None:
        settings.AGENTPORTAL = {**settings.AGENTPORTAL, "STOCK_LATENCY_SECONDS": seconds}

    return set_latency


@pytest.fixture
def demo(db):
    """The documented demo data (API.md, Operations)."""
    call_command("seed_demo", stdout=io.StringIO())
    return Merchant.objects.get(slug="demo-shop")


@pytest.fixture
def refund_waiting(demo) -> Waiting:
    """alice's refund of 20.00 on ORD-1003, waiting for a supervisor's decision."""
    return refund_run_waiting()


@pytest.fixture
def large_refund(demo) -> Approval:
    """alice's refund of 500.00 on ORD-9001, waiting under a policy that wants two people
    from 200.00."""
    policy_set(demo, two_approvers_from="200.00")
    big_order(demo)
    run = refund_run(demo, "500", order="ORD-9001")
    assert run.status == RunStatus.WAITING_APPROVAL, (run.status, run.error_detail)
    approval = approval_of(run)
    assert approval.required_approvals == 2
    return approval


@pytest.fixture
def api() -> Callable[..., APIClient]:
    """api("alice") -> a client with a fresh bearer key acting as alice in her shop."""

    def client_for(username: str | None = None, *, merchant: str = "demo-shop", role=None):
        from django.contrib.auth.models import User

        shop = Merchant.objects.get(slug=merchant)
        user = User.objects.get(username=username) if username else None
        key = factories.api_key_for(user, shop, role or ("service" if user is None else None))
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
        return client

    return client_for


def database_url() -> str:
    """The test database as a DATABASE_URL, for subprocesses (the worker cluster)."""
    db = connection.settings_dict
    if connection.vendor == "sqlite":
        return f"sqlite:///{db['NAME']}"
    return (
        f"postgres://{db['USER']}:{db['PASSWORD']}@{db['HOST'] or '127.0.0.1'}:"
        f"{db['PORT'] or 5432}/{db['NAME']}"
    )


class Cluster:
    """The real django-q2 cluster (`manage.py qcluster`) in a subprocess on the test database."""

    def __init__(self, *, workers: int = 2, env: dict[str, str] | None = None):
        self.env = {
            **os.environ,
            "DATABASE_URL": database_url(),
            "AGENTPORTAL_WORKERS": str(workers),
            "AGENTPORTAL_Q_POLL": "0.05",
            **(env or {}),
        }
        self.process: subprocess.Popen | None = None

    def start(self) -> "Cluster":
        self.log = open(ROOT / "artifacts" / f"qcluster-{os.getpid()}.log", "a")  # noqa: SIM115
        self.process = subprocess.Popen(
            [sys.executable, str(ROOT / "manage.py"), "qcluster"],
            env=self.env,
            cwd=ROOT,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        return self

    def kill(self) -> None:
        """SIGKILL the whole cluster, workers included: a crash, not a shutdown."""
        if self.process and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        # The main process alone: signalling the group makes django-q2 hang.
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.kill()


@pytest.fixture
def cluster(transactional_db):
    """Start clusters on demand, with `maintain` scheduled as in production; every one is
    stopped after the test."""
    (ROOT / "artifacts").mkdir(exist_ok=True)
    # The migration schedules it; an earlier test's flush deleted that row with the rest.
    importlib.import_module("runs.migrations.0002_maintain_schedule").create_schedule(
        django_apps, None
    )
    started: list[Cluster] = []

    def start(**kwargs) -> Cluster:
        c = Cluster(**kwargs).start()
        started.append(c)
        return c

    yield start
    for c in started:
        c.stop()


@pytest.fixture
def stub():
    """stub(latency=..., text_only=..., script=...) -> an OpenAI-compatible endpoint on loopback
    (approvals.bench.model_stub), stopped after the test."""
    from approvals.bench.model_stub import ModelStub

    started = []

    def start(**kwargs):
        started.append(ModelStub(**kwargs).start())
        return started[-1]

    yield start
    for endpoint in started:
        endpoint.stop()


@pytest.fixture
def web_server(transactional_db):
    """web_server(**env) -> the base URL of the product's web server (`runportal --role web`:
    gunicorn and uvicorn, one process, the product's settings) on the test database; stopped
    after the test."""
    started: list[subprocess.Popen] = []

    def start(**env: str) -> str:
        port = free_port()
        server = subprocess.Popen(
            [
                *(sys.executable, str(ROOT / "manage.py"), "runportal", "--role", "web"),
                *("--port", str(port), "--web-processes", "1"),
            ],
            env={
                **os.environ,
                "DJANGO_SETTINGS_MODULE": "agentportal.settings",
                "DATABASE_URL": database_url(),
                **env,
            },
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        started.append(server)
        base = f"http://127.0.0.1:{port}"

        def healthy() -> bool:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    return True
            except OSError:
                return server.poll() is not None

        wait_for(healthy, timeout=30)
        assert server.poll() is None, "the web server did not start"
        return base

    yield start
    for server in started:
        server.terminate()
        server.wait(timeout=20)


def wait_for(
    predicate: Callable[[], bool],
    *,
    timeout: float = 60,
    interval: float = 0.1,
    message: str = "condition not met",
):
    """Poll until predicate() is true; the timeout only bounds a hung test, which fails
    saying `message`."""
    ends = time.monotonic() + timeout
    while time.monotonic() < ends:
        if predicate():
            return
        time.sleep(interval)
    raise AssertionError(f"{message} (waited {timeout}s)")


async def wait_for_async(
    predicate: Callable[[], bool | Awaitable[bool]],
    *,
    timeout: float = 10,
    interval: float = 0.01,
    message: str = "condition not met",
):
    """wait_for inside a running event loop: the loop's other tasks run between the polls,
    and the predicate may be a coroutine function."""
    ends = time.monotonic() + timeout
    while time.monotonic() < ends:
        met = predicate()
        if inspect.isawaitable(met):
            met = await met
        if met:
            return
        await asyncio.sleep(interval)
    raise AssertionError(f"{message} (waited {timeout}s)")


class AsgiLiveServer:
    """The portal served as in production, by uvicorn under ASGI (so that the pages' streams
    stream), in a thread of the test process: settings the test changes apply to it. Stands in
    for pytest-django's `live_server`, whose WSGI server would buffer a stream whole."""

    def __init__(self) -> None:
        import uvicorn
        from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler
        from django.core.asgi import get_asgi_application
        from django.test.utils import modify_settings

        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        self.server = uvicorn.Server(
            uvicorn.Config(
                ASGIStaticFilesHandler(get_asgi_application()),
                host="127.0.0.1",
                port=port,
                log_level="warning",
                lifespan="off",
                # A stream still open when the tests end is cut, not waited for.
                timeout_graceful_shutdown=1,
            )
        )
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        # pytest-django's helper turns this on for each test that uses the server.
        self._live_server_modified_settings = modify_settings(ALLOWED_HOSTS={"append": "127.0.0.1"})

    def start(self) -> None:
        self.thread.start()
        ends = time.monotonic() + 30
        while not self.server.started:
            if time.monotonic() > ends or not self.thread.is_alive():
                raise RuntimeError("the portal's ASGI server did not start")
            time.sleep(0.05)

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)
        if connection.vendor == "postgresql":
            # The server's threads may still hold a connection each (a stream cut when the
            # browser closed ends without request_finished); the test database must be
            # dropped after this.
            with connection.cursor() as cursor:
                cursor.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                    " WHERE datname = current_database() AND pid <> pg_backend_pid()"
                )


@pytest.fixture(scope="session")
def live_server(django_db_setup, django_db_blocker):
    server = AsgiLiveServer()
    with django_db_blocker.unblock():
        # Each request's connection is closed when it ends, so that none outlives the test
        # database (the server's threads are not the tests').
        from django.db import connections

        for database in connections.all():
            database.settings_dict["CONN_MAX_AGE"] = 0
    server.start()
    yield server
    with django_db_blocker.unblock():
        server.stop()
