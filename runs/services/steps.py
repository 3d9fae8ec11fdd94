"""Committing the steps of the runs a worker holds: each run's writes guarded by its own
conditional UPDATE (the one guard against stale writers), all of a round's in one transaction."""

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from django.db import DatabaseError, InterfaceError, OperationalError, connection, transaction
from django.utils import timezone

from runs import locks
from runs.models import (
    AgentRun,
    AttemptStatus,
    ErrorCode,
    ModelAttempt,
    Node,
    RunStatus,
    ToolExecution,
)
from runs.services.changes import RunChange, run_changes_write
from runs.services.leases import Lease, lease_expires_at, why_lost
from runs.services.queueing import tick_enqueue
from runs.services.scheduling import attempt_add, attempts_insert
from runs.services.statements import (
    ATTEMPT_FINISH_SQL,
    GUARDED_UPDATE_SQL,
    assignments,
    held_by_params,
    pipelined,
)

logger = logging.getLogger(__name__)


@dataclass
class StepCommit:
    """What one graph step commits, all at once, under runs_update_guarded."""

    next_node: str
    advance_step: bool = True
    messages: list[dict[str, Any]] = field(default_factory=list)
    events: list[tuple[str, dict]] = field(default_factory=list)
    attempt_status: str | None = None
    attempt_usage: dict[str, int] = field(default_factory=dict)
    attempt_latency_ms: int | None = None
    attempt_error: str = ""
    tool_executions: list[ToolExecution] = field(default_factory=list)
    complete_with: str | None = None
    fail_with: tuple[str, str] | None = None
    # Extra fields of the run's row (a pause: status, snapshot, wait deadline).
    run_fields: dict[str, Any] = field(default_factory=dict)
    # Called with the run inside the transaction, after its row was locked (domain records).
    on_locked: Callable[[AgentRun], None] | None = None


@dataclass
class _StepChange:
    lease: Lease
    commit: StepCommit
    change: RunChange
    attempt: ModelAttempt | None
    held: bool = False


def runs_update_guarded(updates: list[tuple[Lease, dict[str, Any]]]) -> list[bool]:
    """Apply each (lease, fields) to its run with one conditional UPDATE, the one guard
    against stale writers; for each, True when the worker still holds the run.

    The UPDATE matches only while the worker still holds the run (statements.held_by_sql:
    RUNNING under its lease token and control version, unexpired), unchanged since the worker
    last wrote it, its merchant active and its account still a member; it takes the row's lock
    on PostgreSQL (SQLite holds its write lock from BEGIN), in the order given. The updates go
    in one round trip (pipelined). Call inside the transaction that writes the steps: a step
    whose UPDATE matches nothing must write nothing.
    """
    now = timezone.now()
    # A cursor each: a cursor's rowcount is its last statement's, read after the block.
    cursors = [connection.cursor() for _ in updates]
    try:
        with pipelined():
            for cursor, (lease, fields) in zip(cursors, updates, strict=True):
                clause, params = assignments(AgentRun, fields)
                params += [*held_by_params(lease, now), lease.run.version, True, True]
                cursor.execute(GUARDED_UPDATE_SQL.format(assignments=clause), params)
        return [cursor.rowcount == 1 for cursor in cursors]
    finally:
        for cursor in cursors:
            cursor.close()


def runs_step_commit(steps: list[tuple[Lease, StepCommit]]) -> list[AgentRun | Exception]:
    """Commit several runs' steps in one transaction: for each, its run or what stopped it
    (LostRun or AccessRevoked when its worker no longer holds it).

    Each run's writes are guarded by its own conditional UPDATE (runs_update_guarded): a run
    its worker lost, or whose access was revoked, commits nothing while the others commit.
    When the next node is the model, its STARTED attempt is recorded in the same commit, so
    the following model call costs no commit of its own. A step its worker lost still records
    how its model call went, on the attempt alone (model_attempt_finish): the call cost what
    it cost, whoever holds the run now. If writing one run's step fails, the
    transaction is rolled back and every step is committed again on its own, so that the
    failure stays that run's; a transient database error is every step's outcome instead.
    """
    now = timezone.now()
    outcomes: list[AgentRun | Exception | None] = [None] * len(steps)
    changes: list[tuple[int, _StepChange, dict[str, Any]]] = []
    for index, (lease, commit) in enumerate(steps):
        try:
            changes.append((index, _step_change(lease, commit, now), _memory_copy(lease)))
        except Exception as error:
            outcomes[index] = error
    try:
        _steps_write([step for _index, step, _copy in changes], now)
    except Exception as error:
        for _index, step, copy in changes:
            _memory_restore(step.lease, step.commit, copy)
        # A transient error (a lock, a deadlock, a lost connection) would only be met again
        # one step at a time: every run goes on from its last commit instead.
        alone = len(changes) > 1 and not database_error_transient(error)
        for index, step, _copy in changes:
            outcomes[index] = runs_step_commit([(step.lease, step.commit)])[0] if alone else error
        return outcomes
    for index, step, _copy in changes:
        if step.held:
            outcomes[index] = step.lease.run
        else:
            _attempt_finish_unheld(step)
            outcomes[index] = why_lost(step.lease)
    return outcomes


def model_attempt_finish(
    *,
    attempt_id: int,
    status: str,
    usage: dict[str, int] | None = None,
    latency_ms: int | None = None,
    error: str = "",
) -> bool:
    """Record how a model call went on its attempt alone, without the run's lease: what a
    worker that lost the run while the model answered (stopped, taken over, its lease expired)
    still records. Nothing else of the run changes. Decided by a conditional UPDATE on a
    STARTED attempt: the first outcome recorded stays, and an attempt a new lease holder
    already marked UNKNOWN stays so. True when this call recorded it."""
    with transaction.atomic():
        finished = ModelAttempt.objects.filter(pk=attempt_id, status=AttemptStatus.STARTED).update(
            status=status,
            usage=usage or {},
            latency_ms=latency_ms,
            error=error,
            finished_at=timezone.now(),
        )
    return finished == 1


def _attempt_finish_unheld(step: _StepChange) -> None:
    commit, lease = step.commit, step.lease
    if commit.attempt_status is None or lease.attempt_id is None:
        return
    try:
        model_attempt_finish(
            attempt_id=lease.attempt_id,
            status=commit.attempt_status,
            usage=commit.attempt_usage,
            latency_ms=commit.attempt_latency_ms,
            error=commit.attempt_error,
        )
    except DatabaseError:
        # The run is lost either way: the other runs' steps go on.
        logger.exception("could not record model attempt %s of a lost run", lease.attempt_id)


# What a database error that comes and goes looks like: PostgreSQL's SQLSTATE classes for a
# lost connection, and its codes for serialization failures, deadlocks, lock and statement
# timeouts and a server shutting down; SQLite's busy database.
# Connection failures, serialization failures and deadlocks, lock and statement timeouts, and
# the server shutting down, crashed or starting up.
TRANSIENT_SQLSTATE_PREFIXES = (
    *("08", "40001", "40P01", "55P03", "57014"),
    *("57P01", "57P02", "57P03"),
)


def database_error_transient(error: BaseException) -> bool:
    """Whether a database error is worth trying again later rather than a bug."""
    if isinstance(error, InterfaceError):
        return True
    if not isinstance(error, OperationalError):
        return False
    cause = error.__cause__
    sqlstate = getattr(cause, "sqlstate", None)
    if sqlstate:
        return sqlstate.startswith(TRANSIENT_SQLSTATE_PREFIXES)
    if type(cause).__module__.startswith("psycopg"):
        # PostgreSQL never answered with a code: the connection failed (refused, closed,
        # timed out), as when the server is away.
        return True
    return "database is locked" in str(error) or "database table is locked" in str(error)


def _attempt_finish(attempt_id: int, commit: StepCommit, now) -> None:
    """Record how a model call went, on its STARTED attempt."""
    clause, params = assignments(
        ModelAttempt,
        {
            "status": commit.attempt_status,
            "usage": commit.attempt_usage,
            "latency_ms": commit.attempt_latency_ms,
            "error": commit.attempt_error,
            "finished_at": now,
        },
    )
    with connection.cursor() as cursor:
        cursor.execute(ATTEMPT_FINISH_SQL.format(assignments=clause), [*params, attempt_id])


def _memory_copy(lease: Lease) -> dict[str, Any]:
    """What a step's writes change in memory: the run's fields and the lease's attempt."""
    copy = {f.attname: getattr(lease.run, f.attname) for f in AgentRun._meta.concrete_fields}
    return {"run": copy, "attempt": (lease.attempt_id, lease.attempt_no)}


def _memory_restore(lease: Lease, commit: StepCommit, copy: dict[str, Any]) -> None:
    """Undo in memory what a rolled-back transaction wrote, before the step is written again."""
    lease.run.__dict__.update(copy["run"])
    lease.attempt_id, lease.attempt_no = copy["attempt"]
    for execution in commit.tool_executions:
        execution.pk = None  # its id was rolled back; another writer may have it by now


def _step_change(lease: Lease, commit: StepCommit, now) -> _StepChange:
    """What a step writes, decided before the transaction."""
    run = lease.run
    change = RunChange(run)
    step = run.step + 1 if commit.advance_step else run.step
    change.fields.update(
        {
            "step": step,
            "next_node": commit.next_node,
            "lease_expires_at": lease_expires_at(now),
            **commit.run_fields,
        }
    )
    change.events.extend(commit.events)
    if commit.messages:
        change.fields["messages"] = [*run.messages, *commit.messages]
    attempt = None
    if commit.fail_with is not None:
        change.fail(*commit.fail_with)
    elif commit.complete_with is not None:
        change.events.append(("message.assistant", {"text": commit.complete_with}))
        change.finish(
            RunStatus.COMPLETED,
            ("run.completed", {"result": commit.complete_with}),
            result=commit.complete_with,
        )
    elif commit.run_fields.get("status", RunStatus.RUNNING) != RunStatus.RUNNING:
        # A pause: the run waits for a person. Waiting does not count against the deadline,
        # which restarts on the resume, so a pause wins over a deadline that just passed.
        pass
    elif run.deadline_at is not None and run.deadline_at <= now:
        change.fail(ErrorCode.DEADLINE_EXCEEDED, "The run's deadline passed.")
    elif lease.slice_spent():
        # Back to the queue in this same commit; the next claim records the model attempt.
        change.fields.update(status=RunStatus.QUEUED, lease_expires_at=None)
    elif commit.next_node == Node.MODEL:
        attempt_no = 1 if commit.advance_step else lease.attempt_no + 1
        attempt = attempt_add(change, step=step, attempt_no=attempt_no)
    return _StepChange(lease=lease, commit=commit, change=change, attempt=attempt)


def _steps_write(steps: list[_StepChange], now) -> None:
    """Write the steps of runs their workers still hold; mark which ones were.

    Locks in the one order: the conversations of the runs that end (ending a run frees its
    conversation), then the runs, by id.
    """
    with transaction.atomic():
        ending = sorted(
            {step.change.run.conversation_id for step in steps if step.change.finished} - {None}
        )
        if ending:
            locks.conversations_lock(ending)
        ordered = sorted(steps, key=lambda step: str(step.lease.run_id))
        matched = runs_update_guarded(
            [(step.lease, step.change.row_fields(now)) for step in ordered]
        )
        for step, held in zip(ordered, matched, strict=True):
            step.held = held
        held = [step for step in steps if step.held]
        executions = [execution for step in held for execution in step.commit.tool_executions]
        with pipelined():
            for step in held:
                commit, lease = step.commit, step.lease
                if commit.attempt_status is not None and lease.attempt_id is not None:
                    _attempt_finish(lease.attempt_id, commit, now)
            if executions:
                ToolExecution.objects.bulk_create(executions)
            attempts_insert([(step.attempt, step.lease) for step in held if step.attempt])
        run_changes_write([step.change for step in held], now)
        for step in held:
            if step.commit.on_locked is not None:
                step.commit.on_locked(step.lease.run)
        if any(step.change.fields.get("status") == RunStatus.QUEUED for step in held):
            tick_enqueue()
