"""Throughput and cost of scripted after-sales runs through the real worker cluster, on the
database in DATABASE_URL: one of the scenarios in approvals/bench/scenarios/, each measured
as its module says. The last line printed is one JSON object."""

import json
import os

from django.core.management.base import BaseCommand

import approvals.bench.scenarios  # noqa: F401 (importing them registers them)
from approvals.bench import registry
from approvals.bench.runner import bench_run


class Command(BaseCommand):
    help = "Benchmark scripted runs through the real worker cluster; prints one JSON line last."

    def add_arguments(self, parser):
        scenarios = registry.scenarios()
        parser.add_argument("--scenario", choices=[s.name for s in scenarios], default="plain")
        parser.add_argument("--runs", type=int, default=1000)
        parser.add_argument("--workers", type=int, default=2)
        parser.add_argument("--calibration-runs", type=int, default=30)
        parser.add_argument("--timeout", type=float, default=600.0)
        parser.add_argument("--log", default=os.devnull, help="Where the workers' output goes.")
        parser.add_argument(
            "--repeat",
            type=int,
            help=(
                "Throughput runs (plain, auto_approval, llm; default 3): the figures are the "
                "median run's, with the spread of all; or timings of each path per size "
                "(scale; default 15)."
            ),
        )
        configured = [s.name for s in scenarios if s.stream_ms is None]
        parser.add_argument(
            "--stream-ms",
            type=int,
            help=(
                "The scripted model's pause between words (ms) in this process's calibration "
                "and in the workers and web server the bench starts. Default 0, answers at "
                f"once; {', '.join(configured)}: AGENTPORTAL_SCRIPTED_STREAM_MS as configured "
                "(20 unless set), since what it measures includes the answers' words."
            ),
        )
        registry.options_add(parser)

    def handle(
        self,
        *args,
        scenario,
        runs,
        workers,
        calibration_runs,
        timeout,
        log,
        repeat,
        stream_ms,
        **options,
    ):
        result = bench_run(
            registry.scenario_get(scenario),
            runs=runs,
            workers=workers,
            calibration_runs=calibration_runs,
            timeout=timeout,
            log=log,
            repeat=repeat,
            stream_ms=stream_ms,
            options=options,
            say=self.stderr.write,
        )
        self.stdout.write(json.dumps(result))
