"""`scale`: how each hot path's cost grows with the history.

At each size (shops, finished runs) it seeds the history (scale.seed) and times each path by
calling what the product calls there, in this process (scale.paths). At the largest size it
starts the portal and reads the resident memory of a worker process and a web process once
they have served (scale.memory). It writes a table, a plot and the figures to the artifacts
directory.
"""

import json
import time
from pathlib import Path

from django.conf import settings
from django.core.management.base import CommandError
from django.db import connection

from approvals.bench.context import Bench
from approvals.bench.registry import Option, Scenario, register
from approvals.bench.scale.memory import rss_by_role
from approvals.bench.scale.paths import paths_timed
from approvals.bench.scale.plot import curves_svg, curves_table
from approvals.bench.scale.seed import scale_seed
from runs.models import RunEvent

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


def scale(bench: Bench) -> dict:
    sizes = sizes_parse(bench.options["sizes"])
    artifacts = Path(bench.options["artifacts"] or settings.BASE_DIR / "artifacts")
    points = []
    for shops, runs in sizes:
        started = time.perf_counter()
        seeded = scale_seed(shops=shops, runs=runs)
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
                "ms": paths_timed(seeded, bench.repeat),
            }
        )
        bench.say(f"scale: {shops} shops, {runs} runs: {points[-1]['ms']}")
    first, last = points[0]["ms"], points[-1]["ms"]
    growth = {path: round(last[path] / max(first[path], 0.001), 2) for path in first}
    result = {
        "sizes": points,
        "growth": growth,
        "within": WITHIN,
        "over": sorted(path for path, ratio in growth.items() if ratio > WITHIN),
        "rss_mb": None if bench.options["no_rss"] else rss_by_role(seeded, bench.processes),
    }
    artifacts.mkdir(parents=True, exist_ok=True)
    (artifacts / "scale.json").write_text(json.dumps(result, indent=2) + "\n")
    (artifacts / "scale.md").write_text(curves_table(result))
    (artifacts / "scale.svg").write_text(curves_svg(result))
    result["artifacts"] = [str(artifacts / name) for name in ("scale.md", "scale.svg")]
    return {"scale": result, "scenario": bench.scenario, "database": connection.vendor}


register(
    Scenario(
        name="scale",
        run=scale,
        options=(
            Option(
                "--sizes",
                "sizes as shops:finished-runs pairs, growing",
                type=str,
                default="1000:100000,10000:1000000",
            ),
            Option(
                "--no-rss",
                "skip starting the portal to read its processes' memory",
                action="store_true",
            ),
            Option("--artifacts", "where the curves are written (default: artifacts/)", type=str),
        ),
        repeat=15,
    )
)
