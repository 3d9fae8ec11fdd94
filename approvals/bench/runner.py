"""One scenario run as `manage.py bench` runs it: the common options checked, the scripted
model's word streaming pinned here and in the processes it starts, and the workers' output
sent to --log."""

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from django.conf import settings
from django.core.management.base import CommandError

from approvals.bench.context import Bench
from approvals.bench.processes import Processes
from approvals.bench.registry import Scenario


def bench_run(
    scenario: Scenario,
    *,
    runs: int,
    workers: int,
    calibration_runs: int,
    timeout: float,
    log: str,
    repeat: int | None,
    stream_ms: int | None,
    options: dict[str, Any],
    say: Callable[[str], None],
) -> dict:
    """The JSON line's object of `scenario`."""
    if runs < 1 or workers < 1 or calibration_runs < 1:
        raise CommandError("--runs, --workers and --calibration-runs must be at least 1")
    repeat = repeat or scenario.repeat
    if repeat < 1:
        raise CommandError("--repeat must be at least 1")
    if stream_ms is None:
        stream_ms = scenario.stream_ms
    if stream_ms is None:
        stream_ms = settings.AGENTPORTAL["SCRIPTED_STREAM_MS"]
    if stream_ms < 0:
        raise CommandError("--stream-ms must be 0 or more")
    with open(log, "a") as output, _scripted_stream_ms(stream_ms):
        bench = Bench(
            scenario=scenario.name,
            runs=runs,
            workers=scenario.workers or workers,
            calibration_runs=calibration_runs,
            timeout=timeout,
            repeat=repeat,
            options=options,
            processes=Processes(output, {"AGENTPORTAL_SCRIPTED_STREAM_MS": str(stream_ms)}),
            say=say,
        )
        return scenario.run(bench)


@contextmanager
def _scripted_stream_ms(ms: int) -> Iterator[None]:
    """The scripted model of this process pauses `ms` between words while the bench runs (its
    calibration runs in this process, and so do the tests that call the command)."""
    configured = settings.AGENTPORTAL
    settings.AGENTPORTAL = {**configured, "SCRIPTED_STREAM_MS": ms}
    try:
        yield
    finally:
        settings.AGENTPORTAL = configured
