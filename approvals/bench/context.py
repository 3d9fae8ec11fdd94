"""What a scenario is given to run: the common options, its own, and how to start processes
and report progress."""

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from approvals.bench.processes import Processes


@dataclass(frozen=True)
class Bench:
    scenario: str
    runs: int
    workers: int
    calibration_runs: int
    timeout: float
    repeat: int
    # The scenarios' own options, by their names in Python (--model-latency: model_latency).
    options: dict[str, Any]
    processes: Processes
    # Progress for the person watching (stderr), never in the JSON line.
    say: Callable[[str], None]
