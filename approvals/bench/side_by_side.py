"""The portal and its peer, side by side on the same machine and the same PostgreSQL server
(a database each): `manage.py bench` against `approvals.bench.langgraph_peer`, one after the
other, `--repeats` times for each pair of `--pairs`:

- `plain`: the bench's plain scenario (its scripted model answering at once, as the bench
  pins it; `--plain-runs`, W workers) against LangGraph + PostgresSaver (P processes, the
  same runs);
- `llm`: model calls of `--latency` seconds through an endpoint outside both (the stub as a
  process of its own, `python -m approvals.bench.model_stub`, streaming), the bench's llm scenario
  (`--llm-runs` over `--shops` shops of `--capacity`, answers' deltas published) against
  LangGraph-async (P processes x `--in-flight` runs at once, deltas on its custom stream).

The two sides alternate (the portal first in even repeats, the peer first in odd ones) so that
a machine slowing down or warming up weighs on both. The portal's database is DATABASE_URL's;
the peer's is `--peer-database-url` (default: the same server, the name with `_langgraph`);
both are made when missing. Prints a table (each figure, min/median/max, the ratio of the
medians and its target), then one JSON line. The portal runs as deployed: DEBUG off, with
DJANGO_SECRET_KEY or a random key for this run.
"""

import argparse
import json
import os
import secrets
import statistics
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg
from psycopg import sql

from approvals.bench import langgraph_peer

ROOT = Path(__file__).resolve().parents[2]
TARGETS = {"plain": 3.0, "llm": 2.0}
PEERS = {"plain": "langgraph", "llm": "langgraph-async"}


def database_url_with_name(url: str, name: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path=f"/{name}"))


def database_ensure(url: str) -> None:
    """Make the database `url` names unless it exists (through the server's `postgres` one)."""
    name = urlsplit(url).path.lstrip("/")
    with psycopg.connect(database_url_with_name(url, "postgres"), autocommit=True) as conn:
        found = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone()
        if not found:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))


class Stub:
    """The model endpoint as a process of its own (approvals.bench.model_stub's command line)."""

    def __init__(self, env: dict[str, str], latency: float) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "approvals.bench.model_stub", "--latency", str(latency)],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.base_url = self.process.stdout.readline().strip()
        if not self.base_url.startswith("http"):
            self.process.kill()
            raise SystemExit("the model stub did not start")

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=30)


def _last_json(output: str) -> dict:
    return json.loads(output.strip().splitlines()[-1])


def ours(options, env: dict[str, str], pair: str, stub: Stub | None) -> dict:
    command = [sys.executable, "manage.py", "bench", "--workers", str(options.workers)]
    command += ["--repeat", "1"]  # this harness repeats, alternating with the peer
    run_env = dict(env)
    if pair == "plain":
        command += ["--scenario", "plain", "--runs", str(options.plain_runs)]
    else:
        command += [
            "--scenario",
            "llm",
            "--runs",
            str(options.llm_runs),
            "--shops",
            str(options.shops),
            "--capacity",
            str(options.capacity),
            "--model-latency",
            str(options.latency),
        ]
        run_env.update({"AGENTPORTAL_MODEL": "openai", "OPENAI_BASE_URL": stub.base_url})
    done = subprocess.run(command, cwd=ROOT, env=run_env, capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"the bench failed:\n{done.stderr[-3000:]}")
    return _last_json(done.stdout)


def peer(options, pair: str, stub: Stub | None) -> dict:
    return langgraph_peer.measure(
        {
            "database_url": options.peer_database_url,
            "runs": options.plain_runs if pair == "plain" else options.llm_runs,
            "processes": options.processes,
            "base_url": stub.base_url if pair == "llm" else "",
            "in_flight": options.in_flight,
            "pool": options.pool,
            "durability": "sync",
            "timeout": options.timeout,
        }
    )


def spread(values: list[float]) -> dict[str, float]:
    return {
        "min": min(values),
        "median": round(statistics.median(values), 1),
        "max": max(values),
    }


def report(figures: dict[str, dict[str, list[dict]]]) -> dict:
    """The table on stdout; what it shows, as a dict for the JSON line."""
    summary = {}
    print(f"{'pair':<6} {'side':<16} {'runs/s each':<30} {'min':>7} {'median':>7} {'max':>7}")
    for pair, sides in figures.items():
        rates = {side: [run["runs_per_s"] for run in runs] for side, runs in sides.items()}
        for side, values in rates.items():
            each = ", ".join(f"{value:g}" for value in values)
            low, middle, high = spread(values).values()
            print(f"{pair:<6} {side:<16} {each:<30} {low:>7} {middle:>7} {high:>7}")
        mine, theirs = spread(rates["ours"]), spread(rates[PEERS[pair]])
        ratio = round(mine["median"] / theirs["median"], 2)
        print(
            f"{pair:<6} ratio of medians {ratio}x (worst {mine['min'] / theirs['max']:.2f}x, "
            f"best {mine['max'] / theirs['min']:.2f}x); target {TARGETS[pair]}x: "
            f"{'met' if ratio >= TARGETS[pair] else 'NOT met'}"
        )
        summary[pair] = {
            "ours": {**mine, "each": rates["ours"]},
            PEERS[pair]: {**theirs, "each": rates[PEERS[pair]]},
            "ratio": ratio,
            "target": TARGETS[pair],
        }
    return summary


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m approvals.bench.side_by_side")
    parser.add_argument("--pairs", default="plain,llm", help="plain, llm or both (a list)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--database-url", default=os.environ.get("DATABASE_URL", ""))
    parser.add_argument("--peer-database-url", default="")
    parser.add_argument("--workers", type=int, default=2, help="The portal's workers.")
    parser.add_argument("--processes", type=int, default=2, help="The peer's processes.")
    parser.add_argument("--plain-runs", type=int, default=300)
    parser.add_argument("--llm-runs", type=int, default=2000)
    parser.add_argument("--shops", type=int, default=20)
    parser.add_argument("--capacity", type=int, default=32)
    parser.add_argument("--latency", type=float, default=1.0, help="Seconds a model call takes.")
    parser.add_argument("--in-flight", type=int, default=100, help="The peer's, per process.")
    parser.add_argument("--pool", type=int, default=10, help="The async peer's connections.")
    parser.add_argument("--timeout", type=float, default=900.0)
    options = parser.parse_args(argv)
    pairs = [pair.strip() for pair in options.pairs.split(",") if pair.strip()]
    if not pairs or set(pairs) - set(TARGETS) or options.repeats < 1:
        parser.error("--pairs takes plain and/or llm, --repeats at least 1")
    if urlsplit(options.database_url).scheme not in ("postgres", "postgresql"):
        parser.error("DATABASE_URL (or --database-url) must name a PostgreSQL database")
    if not options.peer_database_url:
        name = urlsplit(options.database_url).path.lstrip("/")
        options.peer_database_url = database_url_with_name(
            options.database_url, f"{name}_langgraph"
        )
    for url in (options.database_url, options.peer_database_url):
        database_ensure(url)

    env = {
        **os.environ,
        "DATABASE_URL": options.database_url,
        "DJANGO_DEBUG": "0",
        "DJANGO_SECRET_KEY": os.environ.get("DJANGO_SECRET_KEY") or secrets.token_urlsafe(50),
    }
    migrate = [sys.executable, "manage.py", "migrate", "--noinput"]
    subprocess.run(migrate, cwd=ROOT, env=env, check=True, stdout=subprocess.DEVNULL)
    stub = Stub(env, options.latency) if "llm" in pairs else None
    figures: dict[str, dict[str, list[dict]]] = {
        pair: {"ours": [], PEERS[pair]: []} for pair in pairs
    }
    try:
        for repeat in range(options.repeats):
            for pair in pairs:
                sides = [("ours", lambda p=pair: ours(options, env, p, stub))]
                sides.append((PEERS[pair], lambda p=pair: peer(options, p, stub)))
                for side, measure in sides if repeat % 2 == 0 else reversed(sides):
                    result = measure()
                    figures[pair][side].append(result)
                    print(f"{pair} {side}: {json.dumps(result)}", file=sys.stderr, flush=True)
    finally:
        if stub is not None:
            stub.stop()
    print(json.dumps(report(figures)))


if __name__ == "__main__":
    main()
