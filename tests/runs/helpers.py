"""Driving the worker one run and one step at a time, as tests need it (production claims and
commits in batches: runs.services.runs_claim, runs_step_commit and runs.worker.run_slices)."""

import math

from runs import services, worker
from runs.models import AgentRun
from runs.services import Lease, StepCommit


def run_claim() -> Lease | None:
    """Claim the next run fairly and take its lease; None when nothing is claimable."""
    leases = services.runs_claim(limit=1)
    return leases[0] if leases else None


def run_step(lease: Lease) -> AgentRun:
    """Execute the node the run is at and commit its outcome, on its own.

    Raises what stopped it instead of handling it: LostRun or AccessRevoked when the worker
    no longer holds the run.
    """
    entry = worker._RunInBatch(lease, worker._step(lease), handle_stops=False)
    worker._batch_execute([entry], ends=math.inf)
    if entry.error is not None:
        raise entry.error
    return entry.result


def run_step_commit(*, lease: Lease, commit: StepCommit) -> AgentRun:
    """Commit a step's effects and the next node in one transaction; return the run.

    Raises LostRun or AccessRevoked, with nothing committed, when the worker lost the run.
    """
    [outcome] = services.runs_step_commit([(lease, commit)])
    if isinstance(outcome, Exception):
        raise outcome
    return outcome
