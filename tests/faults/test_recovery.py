"""Recovery under load, on a PostgreSQL instance these tests start for themselves (stopping it
disturbs no other test) with the whole product on it (`runportal`: web and workers):

- PostgreSQL stopped for 5 s: the API answers 503 meanwhile, the queue moves again once it is
  back, and every run completes with each tool run once;
- a worker process SIGKILLed: its runs go back to the queue when its silence is noticed and
  complete elsewhere;
- the web server SIGKILLed: runportal starts it again and the cluster keeps working.

Each prints its recovery figures and adds them to artifacts/recovery.json."""

import contextlib
import json
import os
import pwd
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psycopg
import pytest
from django.conf import settings

from approvals.bench.measure import free_port
from tests import http
from tests.conftest import ROOT, wait_for

PG_BINARIES = sorted(Path("/usr/lib/postgresql").glob("*/bin"), key=lambda p: int(p.parent.name))

pytestmark = [
    pytest.mark.skipif(
        settings.DATABASES["default"]["ENGINE"] != "django.db.backends.postgresql",
        reason="the PostgreSQL pass runs it",
    ),
    pytest.mark.skipif(not PG_BINARIES, reason="needs the postgresql package's binaries"),
]


class PrivatePostgres:
    """A PostgreSQL instance in a directory of its own, on a port of its own."""

    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="agentportal-pg-"))
        self.data, self.port = self.root / "data", free_port()
        self.url = f"postgres://postgres@127.0.0.1:{self.port}/portal"
        self.bin = PG_BINARIES[-1]
        if os.geteuid() == 0:  # PostgreSQL refuses to run as root
            owner = pwd.getpwnam("postgres")
            os.chown(self.root, owner.pw_uid, owner.pw_gid)
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust", "--no-sync")

    def _run(self, program: str, *args: str) -> None:
        argv = [str(self.bin / program), *args]
        if os.geteuid() == 0:
            argv = ["runuser", "-u", "postgres", "--", *argv]
        subprocess.run(argv, check=True, capture_output=True, cwd=self.root)

    def start(self) -> None:
        options = f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off"
        self._run(
            "pg_ctl",
            "-D",
            str(self.data),
            "-l",
            str(self.root / "log"),
            "-w",
            "-o",
            options,
            "start",
        )

    def stop(self) -> None:
        self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop")

    def remove(self) -> None:
        with contextlib.suppress(subprocess.CalledProcessError):  # stopped already
            self.stop()
        shutil.rmtree(self.root, ignore_errors=True)


class Portal:
    """The product (`runportal --role all`) on the private instance, and reads of its data."""

    def __init__(self, database: PrivatePostgres, model_url: str) -> None:
        self.database = database
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "agentportal.settings",
            "DATABASE_URL": database.url,
            "AGENTPORTAL_MODEL": "openai",
            "OPENAI_BASE_URL": model_url,
            "AGENTPORTAL_Q_POLL": "0.05",
        }
        self.orders = 10_000
        self.log = (ROOT / "artifacts" / "recovery-portal.log").open("a")
        self.process: subprocess.Popen | None = None

    def manage(self, *args: str) -> str:
        done = subprocess.run(
            [sys.executable, str(ROOT / "manage.py"), *args],
            env=self.env,
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    def start(self) -> None:
        self.process = subprocess.Popen(
            [
                *(sys.executable, str(ROOT / "manage.py"), "runportal", "--role", "all"),
                *("--port", str(self.port), "--workers", "2", "--web-processes", "1"),
            ],
            env=self.env,
            cwd=ROOT,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        wait_for(lambda: self.healthz() == 200, timeout=60)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()

    def healthz(self) -> int:
        try:
            return http.get(self.base, "/healthz", timeout=5).status
        except OSError:
            return 0

    def queue(self, count: int) -> list[str]:
        first, self.orders = self.orders, self.orders + count
        script = f"from tests.faults.load import queue; queue({count}, {first})"
        return json.loads(self.manage("shell", "-c", script).strip().splitlines()[-1])

    def query(self, sql: str, *params) -> list[tuple]:
        """Rows of `sql` on the private database; [] while it cannot be reached."""
        try:
            with psycopg.connect(self.database.url, autocommit=True, connect_timeout=2) as db:
                return db.execute(sql, params).fetchall()
        except psycopg.OperationalError:
            return []

    def count(self, runs: list[str], *statuses: str) -> int:
        rows = self.query(
            "SELECT count(*) FROM runs_agentrun WHERE id = ANY(%s::uuid[]) AND status = ANY(%s)",
            runs,
            list(statuses),
        )
        return rows[0][0] if rows else -1

    def assert_nothing_lost(self, runs: list[str]) -> None:
        """Every run completed, each of its tools ran once, and its events are numbered
        without a gap."""
        wait_for(lambda: self.count(runs, "COMPLETED") == len(runs), timeout=300, interval=0.5)
        tools = self.query(
            "SELECT run_id, count(*) FROM runs_toolexecution WHERE run_id = ANY(%s::uuid[])"
            " GROUP BY run_id",
            runs,
        )
        assert len(tools) == len(runs)
        assert {count for _, count in tools} == {1}
        gaps = self.query(
            "SELECT run_id FROM runs_runevent WHERE run_id = ANY(%s::uuid[]) GROUP BY run_id"
            " HAVING count(*) <> max(seq) OR min(seq) <> 1",
            runs,
        )
        assert gaps == []


def _record(name: str, figures: dict) -> None:
    print(f"{name}: {json.dumps(figures)}")
    path = ROOT / "artifacts" / "recovery.json"
    recorded = json.loads(path.read_text()) if path.exists() else {}
    recorded[name] = figures
    path.write_text(json.dumps(recorded, indent=2))


@pytest.fixture(scope="module")
def portal():
    from approvals.bench.model_stub import ModelStub

    (ROOT / "artifacts").mkdir(exist_ok=True)
    database = PrivatePostgres()
    endpoint = ModelStub(latency=0.5, text_only=False).start()
    product = Portal(database, endpoint.base_url)
    try:
        database.start()
        subprocess.run(
            [
                *(str(database.bin / "createdb"), "-h", "127.0.0.1"),
                *("-p", str(database.port), "-U", "postgres", "portal"),
            ],
            check=True,
            capture_output=True,
        )
        product.manage("migrate", "-v", "0")
        product.manage("seed_demo")
        product.start()
        yield product
    finally:
        product.stop()
        endpoint.stop()
        database.remove()


def _moved_after(portal: Portal, runs: list[str], since_count: int, began: float) -> float:
    """Seconds from `began` until more of `runs` completed than `since_count`."""
    wait_for(lambda: portal.count(runs, "COMPLETED") > since_count, timeout=120, interval=0.05)
    return time.monotonic() - began


def test_a_five_second_database_outage_under_load_loses_nothing(portal):
    # given 300 runs working through a shop of 16 slots, a model call taking half a second
    runs = portal.queue(300)
    wait_for(lambda: portal.count(runs, "COMPLETED") >= 30, timeout=120)

    # when PostgreSQL stops for 5 s
    unfinished = len(runs) - portal.count(runs, "COMPLETED")
    portal.database.stop()
    stopped = time.monotonic()
    answer = http.get(portal.base, "/api/v1/runs", key="ap_0000_anything", timeout=20)
    health = portal.healthz()
    time.sleep(max(0.0, stopped + 5 - time.monotonic()))
    portal.database.start()
    back = time.monotonic()
    completed_at_return = portal.count(runs, "COMPLETED")

    # then the API said 503 meanwhile, and the queue moves again once it is back
    assert answer.status == 503
    assert json.loads(answer.body)["code"] == "service_unavailable"
    assert health == 503
    moved_s = _moved_after(portal, runs, completed_at_return, back)
    # and every run completes, nothing twice and nothing missing
    portal.assert_nothing_lost(runs)
    _record(
        "database_outage",
        {
            "runs_unfinished_at_stop": unfinished,
            "outage_s": round(back - stopped, 1),
            "queue_moved_after_return_s": round(moved_s, 1),
            "all_done_after_return_s": round(time.monotonic() - back, 1),
            "runs": len(runs),
        },
    )


def test_a_worker_process_killed_under_load_has_its_runs_finished_elsewhere(portal):
    # given 600 runs working (some forty seconds of work), and a worker process holding some
    runs = portal.queue(600)

    def holder_with_runs() -> str:
        rows = portal.query(
            "SELECT lease_holder FROM runs_agentrun WHERE id = ANY(%s::uuid[])"
            " AND status = 'RUNNING' AND lease_holder <> '' LIMIT 1",
            runs,
        )
        return rows[0][0] if rows else ""

    wait_for(lambda: bool(holder_with_runs()), timeout=60, interval=0.05)
    holder = holder_with_runs()
    held = [
        str(run_id)
        for (run_id,) in portal.query(
            "SELECT id FROM runs_agentrun WHERE status = 'RUNNING' AND lease_holder = %s", holder
        )
    ]

    # when that process is SIGKILLed
    os.kill(int(holder.rsplit(":", 1)[1]), signal.SIGKILL)
    killed = time.monotonic()

    # then its runs are taken up again by another process, and every run completes once
    def taken_up() -> bool:
        rows = portal.query(
            "SELECT count(*) FROM runs_agentrun WHERE id = ANY(%s::uuid[])"
            " AND (status <> 'RUNNING' OR lease_holder <> %s)",
            held,
            holder,
        )
        return bool(rows) and rows[0][0] == len(held)

    wait_for(taken_up, timeout=120, interval=0.1)
    resumed_s = time.monotonic() - killed
    portal.assert_nothing_lost(runs)
    _record(
        "worker_process_killed",
        {"runs_held": len(held), "taken_up_after_s": round(resumed_s, 1), "runs": len(runs)},
    )


def test_the_web_server_killed_is_started_again_and_the_cluster_keeps_working(portal):
    # given the portal's web server (gunicorn's supervising process)
    def web_server() -> int | None:
        found = subprocess.run(
            ["pgrep", "-o", "-f", f"gunicorn.*127.0.0.1:{portal.port}"],
            capture_output=True,
            text=True,
        )
        return int(found.stdout) if found.stdout.strip() else None

    killed_pid = web_server()

    # when it is SIGKILLed
    os.kill(killed_pid, signal.SIGKILL)
    killed = time.monotonic()

    # then runportal starts another, which answers, and runs queued afterwards complete
    wait_for(lambda: web_server() not in (None, killed_pid), timeout=60, interval=0.1)
    wait_for(lambda: portal.healthz() == 200, timeout=60, interval=0.1)
    answering_s = time.monotonic() - killed
    runs = portal.queue(20)
    portal.assert_nothing_lost(runs)
    assert portal.process.poll() is None
    _record("web_server_killed", {"answering_again_after_s": round(answering_s, 1)})
