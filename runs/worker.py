"""Executing claimed runs: each run's node (runs.nodes, or a domain's, found through
runs.extensions), one committed step at a time for each run, the steps of the runs a worker
holds committed together.

Nothing slow happens inside a transaction: the model and the tools are called between commits,
and every commit goes through runs.services.runs_step_commit, which re-checks each lease.
"""

import logging
import math
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import DatabaseError, close_old_connections, connection
from django.utils import timezone

from agentportal.logs import about
from runs import extensions, handback, inflight, services, tool_threads
from runs.models import (
    AgentRun,
    RunStatus,
)
from runs.services import AccessRevoked, Lease, LostRun, StepCommit
from runs.services.statements import held_by_row
from runs.step_protocol import CallTimedOut, RunAbandoned, SlowCall, Step

logger = logging.getLogger(__name__)


# How often a worker process records what it holds.
REPORT_SECONDS = 2.0


def _config(name: str) -> Any:
    return settings.AGENTPORTAL[name]


def tick() -> int:
    """Claim and execute runs until nothing is claimable or the claim budget is spent.

    Safe to run any number of times at once: the claim in the database decides who works on
    what, never the task message.
    """
    started = time.monotonic()
    claims = _Claims(until=started + _config("TICK_CLAIM_SECONDS"))
    # Every slice ends by then, so a tick stays inside django-q2's task timeout (150 s) even
    # with a step in flight when its slice ends.
    run_slices([], ends=started + _config("TICK_BUDGET_SECONDS"), claims=claims)
    return claims.count


@dataclass
class _Claims:
    """A tick's claims: runs join its batch while the batch has room (half of it, so that
    runs are claimed in groups), until the claim budget is spent."""

    until: float
    count: int = 0
    spent: bool = False
    retry_at: float = 0.0
    # The last claim took all it asked for: more runs are likely waiting.
    full: bool = False

    def more(self, *, holding: int) -> list[Lease]:
        slots = _config("WORKER_IN_FLIGHT")
        now = time.monotonic()
        self.full = False
        if self.spent:
            return []
        if now >= self.until:
            # Runs may be waiting: hand over to a fresh tick now, not when this batch ends.
            self.spent = True
            _record_quietly(services.tick_enqueue)
            return []
        # Only for slots free here, and a round's worth at a time: the worker processes take
        # turns at the queue, so that one of them cannot take a shop's whole capacity while
        # the others idle.
        group = min(2 * _config("ROUND_RUNS"), slots)
        if holding and (slots - holding < group or now < self.retry_at):
            return []
        try:
            leases = services.runs_claim(limit=group, processes=settings.Q_CLUSTER["workers"])
        except DatabaseError:
            logger.exception("claiming runs failed; trying again after a poll")
            leases = []
        self.count += len(leases)
        self.full = len(leases) == group
        if not leases:
            # Nothing claimable: look again after a poll, not at every round.
            self.retry_at = now + _config("CANCEL_POLL_SECONDS")
        return leases


def run_slices(
    leases: list[Lease], *, ends: float = math.inf, claims: _Claims | None = None
) -> None:
    """Execute claimed runs together until each finishes, waits, spends its slice or is
    lost; with `claims`, more runs join while there is room."""
    _batch_execute(_batch_join(leases, ends=ends), ends=ends, claims=claims)


def _batch_join(leases: list[Lease], *, ends: float) -> list["_RunInBatch"]:
    """Start executing claimed runs, each up to the end of its slice."""
    slice_ends = min(ends, time.monotonic() + _config("SLICE_SECONDS"))
    batch = []
    for lease in leases:
        lease.slice_ends = slice_ends
        batch.append(_RunInBatch(lease, _slice(lease)))
    return batch


def _batch_execute(
    batch: list["_RunInBatch"], *, ends: float, claims: _Claims | None = None
) -> None:
    """Execute runs together until each finishes, waits, spends its slice or is lost; with
    `claims`, more runs join while there is room.

    They go in rounds: each run executes its node up to the node's commit, then the round's
    commits are written in one transaction, each guarded by its own lease. A run waiting on a
    slow call does not hold the others up: the call runs in a thread while they go on, and
    the run is polled so that /stop is noticed within CANCEL_POLL_SECONDS. A spent slice is
    noticed by the next step's commit, which hands the run back to the queue. Whatever stops
    this loop itself hands the runs still in it back to the queue at once.
    """
    polled = reported = time.monotonic()
    reports = 0
    try:
        while True:
            if not connection.in_atomic_block:
                # Between rounds, as between requests: a connection that broke is replaced.
                close_old_connections()
                handback.retry()
            batch[:] = [entry for entry in batch if not entry.done]
            if claims is not None:
                batch += _batch_join(claims.more(holding=len(batch)), ends=ends)
            if not batch:
                if reports:
                    _report(holding=0)  # what it said it held is over
                return
            # Cleared before looking, so a call that ends after the look wakes the wait below.
            tool_threads.call_ended.clear()
            now = time.monotonic()
            for entry in batch:
                if entry.call_done():
                    entry.advance(entry.call_outcome())
                elif entry.call_overdue(now):
                    entry.time_out()
            if time.monotonic() - polled >= _config("CANCEL_POLL_SECONDS"):
                _abandon_lost([entry for entry in batch if entry.in_call()])
                polled = time.monotonic()
            if time.monotonic() - reported >= REPORT_SECONDS:
                _report(holding=len(batch))
                reported, reports = time.monotonic(), reports + 1
            ready = [f for f in batch if not f.done and isinstance(f.wants, StepCommit)]
            if ready:
                # A round commits at most ROUND_RUNS steps (short transactions: on SQLite each
                # holds the database's write lock); the runs it committed go to the back of
                # the line, so every run gets its turn.
                ready = ready[: _config("ROUND_RUNS")]
                outcomes = services.runs_step_commit([(f.lease, f.wants) for f in ready])
                for entry, outcome in zip(ready, outcomes, strict=True):
                    entry.advance(outcome)
                committed = set(map(id, ready))
                batch[:] = [e for e in batch if id(e) not in committed] + ready
                continue
            if claims is not None and claims.full:
                continue  # fill the free slots before waiting on the calls
            if any(entry.in_call() for entry in batch):
                tool_threads.call_ended.wait(timeout=_poll_timeout(batch))
    finally:
        stranded = [entry for entry in batch if not entry.done]
        for entry in stranded:
            entry.drop()
        if stranded:
            handback.hand_back([entry.lease for entry in stranded])
        handback.retry_until(time.monotonic() + handback.WAIT_SECONDS)


def _report(*, holding: int) -> None:
    """What this process holds, for /healthz: runs in flight, free slots, and each model
    endpoint's calls in flight, waiting and paused."""
    report = {
        "in_flight": holding,
        "free_slots": _config("WORKER_IN_FLIGHT") - holding,
        "model_endpoints": inflight.gates_report(),
    }
    _record_quietly(services.heartbeat_record, name=services.process_name(), report=report)
    # Each busy process looks out for the others: a process that died (killed, out of
    # memory) stops reporting, and its runs go back to the queue now.
    _record_quietly(services.leases_of_lost_processes_release)


def _poll_timeout(batch: list["_RunInBatch"]) -> float:
    """How long to wait for a slow call: until the next poll, or the next call's deadline."""
    timeout = _config("CANCEL_POLL_SECONDS")
    deadlines = [e.wants.deadline for e in batch if e.in_call() and e.wants.deadline is not None]
    if deadlines:
        timeout = min(timeout, max(0.0, min(deadlines) - time.monotonic()))
    return timeout


def _slice(lease: Lease) -> Step:
    run = lease.run
    while run.status == RunStatus.RUNNING:
        run = yield from _step(lease)
    return run


def _step(lease: Lease) -> Step:
    """Execute the node the run is at up to its commit."""
    run = lease.run
    node = extensions.node(run.next_node)
    if node is None:
        raise LostRun(f"run {run.pk} has no node to execute at {run.next_node}")
    return (yield from node.step(run, lease))


def _record_quietly(action: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
    """Record what became of a run the worker gives up; a database that fails here only
    leaves the run to its lease's expiry."""
    try:
        action(*args, **kwargs)
    except DatabaseError:
        logger.exception("could not record what became of a run; its lease will expire")


class _RunInBatch:
    """A run a worker is executing among others: its steps, and what they wait for.

    With `handle_stops`, what stops the steps is dealt with here (a lost run dropped, a
    revoked one failed, a bug parked for an operator); without, it is kept in `error` for the
    caller.
    """

    def __init__(self, lease: Lease, steps: Step, *, handle_stops: bool = True) -> None:
        self.lease = lease
        self.steps = steps
        self.handle_stops = handle_stops
        self.wants: StepCommit | SlowCall | None = None
        self.future: Future | None = None
        self.done = False
        self.result: AgentRun | None = None
        self.error: Exception | None = None
        self.advance(None)

    def in_call(self) -> bool:
        return self.future is not None

    def call_done(self) -> bool:
        return self.future is not None and self.future.done()

    def call_overdue(self, now: float) -> bool:
        deadline = self.wants.deadline if self.future is not None else None
        return deadline is not None and now >= deadline

    def call_outcome(self) -> Any:
        future, self.future = self.future, None
        return future.exception() or future.result()

    def advance(self, outcome: Any) -> None:
        """Hand the steps what they waited for and run them to what they want next."""
        self.future = None
        try:
            if isinstance(outcome, BaseException):
                self.wants = self.steps.throw(outcome)
            else:
                self.wants = self.steps.send(outcome)
            if not isinstance(self.wants, StepCommit | SlowCall):
                raise TypeError(f"a step yielded {self.wants!r}")
        except StopIteration as finished:
            self.done, self.result = True, finished.value
            return
        except Exception as error:
            self.done = True
            if self.handle_stops:
                self._handle_stop(error)
            else:
                self.error = error
            return
        if isinstance(self.wants, SlowCall) and self.wants.awaited:
            self.future = inflight.submit(self.wants.function)
        elif isinstance(self.wants, SlowCall):
            self.future = tool_threads.tool_pool().submit(
                tool_threads.in_thread, self.wants.function
            )
        if self.future is not None:
            self.future.add_done_callback(tool_threads.wake)

    def _handle_stop(self, error: Exception) -> None:
        lease = self.lease
        if isinstance(error, LostRun | RunAbandoned):
            logger.info(
                "dropping run %s: %s",
                lease.run_id,
                error,
                extra=about(lease.run, run_id=lease.run_id),
            )
        elif isinstance(error, AccessRevoked):
            _record_quietly(services.run_fail_access_revoked, lease=lease)
        elif services.database_error_transient(error):
            # A lock timeout, a deadlock, a lost connection: nothing of the step was written,
            # and the run can go on from its last commit, here or in another worker.
            logger.warning(
                "run %s handed back to the queue: %s",
                lease.run_id,
                error,
                extra=about(lease.run, run_id=lease.run_id),
            )
            handback.hand_back([lease])
        else:
            logger.error(
                "run %s failed unexpectedly",
                lease.run_id,
                exc_info=error,
                extra=about(lease.run, run_id=lease.run_id),
            )
            _record_quietly(
                services.run_park, lease=lease, reason=f"{type(error).__name__}: {error}"
            )

    def abandon(self) -> None:
        """The run was stopped or taken over during its slow call: cancel the call."""
        self.drop()
        self.advance(RunAbandoned(f"run {self.lease.run_id} stopped while waiting"))

    def time_out(self) -> None:
        """The slow call ran past its deadline: cancel it and tell the step."""
        self.drop()
        self.advance(CallTimedOut(f"run {self.lease.run_id}: the call ran out of time"))

    def drop(self) -> None:
        if self.future is not None:
            self.future.cancel()  # one not started yet never runs
            self.wants.token.cancel()
            self.future = None


def _abandon_lost(batch: list[_RunInBatch]) -> None:
    """Abandon the slow calls of runs their worker no longer holds (/stop, a takeover), and
    renew the leases of the others before they run out, since a call may outlast a lease."""
    if not batch:
        return
    try:
        now = timezone.now()
        # One read of plain rows, however many runs wait (it comes every CANCEL_POLL_SECONDS
        # for hundreds of runs, so no model instances): the lease is checked on each row here.
        rows = {
            row.pk: row
            for row in AgentRun.objects.filter(
                pk__in=[entry.lease.run_id for entry in batch]
            ).values_list(
                "pk", "status", "lease_token", "control_version", "lease_expires_at", named=True
            )
        }
        # (by identity in sets: this runs over hundreds of entries four times a second)
        lost = {
            id(entry)
            for entry in batch
            if (row := rows.get(entry.lease.run_id)) is None
            or not held_by_row(row, entry.lease, now)
        }
        renew_by = now + timedelta(seconds=_config("LEASE_SECONDS") / 2)
        due = [
            entry.lease
            for entry in batch
            if id(entry) not in lost and entry.lease.run.lease_expires_at < renew_by
        ]
        expired = set(map(id, services.leases_renew(due))) if due else set()
    except DatabaseError:
        logger.exception("could not poll the runs in slow calls; polling again later")
        return
    for entry in batch:
        if id(entry) in lost or id(entry.lease) in expired:
            entry.abandon()
