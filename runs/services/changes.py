"""Changes of a run computed before the transaction and applied inside it: ending a run,
resuming it, moving or expiring its wait.

On SQLite the lock helpers take no row lock; each transaction takes the database's write lock
at BEGIN (IMMEDIATE), and every transition is also a conditional UPDATE whose row count decides.
"""

import logging
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from django.db import transaction
from django.utils import timezone

from agentportal import errors
from agentportal.logs import about
from runs import deltas, extensions
from runs.locks import run_lock
from runs.models import FINISHED_STATUSES, AgentRun, ErrorCode, Node, RunEvent, RunStatus
from runs.services.queueing import tick_enqueue
from runs.services.statements import rows_insert
from runs.snapshot import WaitState

logger = logging.getLogger(__name__)

WAITING_STATUSES = (RunStatus.WAITING_USER, RunStatus.WAITING_APPROVAL)


@dataclass
class RunChange:
    """The new values of a run's row and the events to append, prepared outside any
    transaction so that the write lock is held only for the statements themselves."""

    run: AgentRun
    fields: dict[str, Any] = field(default_factory=dict)
    events: list[tuple[str, dict]] = field(default_factory=list)

    @property
    def finished(self) -> bool:
        return self.fields.get("status", self.run.status) in FINISHED_STATUSES

    def finish(self, status: str, event: tuple[str, dict], **fields: Any) -> None:
        self.fields.update(status=status, next_node=Node.DONE, lease_expires_at=None, **fields)
        self.events.append(event)

    def fail(self, code: str, detail: str) -> None:
        self.finish(
            RunStatus.FAILED,
            ("run.failed", {"error_code": code, "detail": detail}),
            error_code=code,
            error_detail=detail,
        )

    def row_fields(self, now) -> dict[str, Any]:
        """The UPDATE's SET clause: every change, a version bump and the new event counter."""
        fields = {
            **self.fields,
            "version": self.run.version + 1,
            "last_event_seq": self.run.last_event_seq + len(self.events),
            "updated_at": now,
        }
        if self.finished:
            fields["finished_at"] = now
        return fields

    def event_rows(self, now) -> list[RunEvent]:
        return [
            RunEvent(
                run_id=self.run.pk,
                seq=self.run.last_event_seq + offset,
                type=kind,
                data=data,
                created_at=now,
            )
            for offset, (kind, data) in enumerate(self.events, start=1)
        ]

    def apply(self, now) -> None:
        """Bring the in-memory run up to date with what was written."""
        for name, value in self.row_fields(now).items():
            setattr(self.run, name, value)


def run_changes_write(changes: list[RunChange], now) -> None:
    """Bring the runs in memory up to date, run the run-end hooks of those that end and insert
    all their events in one statement. Call holding the runs' locks, after their rows were
    updated with row_fields().

    What the hooks report about the items an ending run owned goes into its timeline before
    its final event, which stays the last (a client reading the timeline stops there).
    """
    previous = [change.run.status for change in changes]
    rows = [change.event_rows(now) for change in changes]
    for change in changes:
        change.apply(now)
    for change, status, own_rows in zip(changes, previous, rows, strict=True):
        if (
            change.finished
            and status == RunStatus.RUNNING
            and change.run.status != RunStatus.COMPLETED
        ):
            # Stopped while it may be writing an answer: nothing it writes from now on is
            # heard (a completed run's answer ended with its own call).
            deltas.run_ended(change.run.pk)
        if change.finished and status not in FINISHED_STATUSES:
            reported = [
                event
                for hook in extensions.run_end_hooks()
                for event in hook(change.run, status) or ()
            ]
            if reported:
                _reported_before_the_end(change.run, own_rows, reported, now)
    inserted = [row for own_rows in rows for row in own_rows]
    if inserted:
        rows_insert(
            RunEvent,
            [
                {
                    "run": row.run_id,
                    "seq": row.seq,
                    "type": row.type,
                    "data": row.data,
                    "created_at": row.created_at,
                }
                for row in inserted
            ],
        )


def _reported_before_the_end(
    run: AgentRun, rows: list[RunEvent], reported: list[tuple[str, dict]], now
) -> None:
    """Number the events the run-end hooks reported before the run's final event (the last of
    `rows`), and move the run's event counter past them by a conditional UPDATE."""
    final = rows.pop()
    for offset, (kind, data) in enumerate(reported):
        rows.append(
            RunEvent(run_id=run.pk, seq=final.seq + offset, type=kind, data=data, created_at=now)
        )
    final.seq += len(reported)
    rows.append(final)
    moved = AgentRun.objects.filter(pk=run.pk, last_event_seq=run.last_event_seq).update(
        last_event_seq=run.last_event_seq + len(reported)
    )
    if moved != 1:
        raise transaction.TransactionManagementError(f"run {run.pk} changed under its lock")
    run.last_event_seq += len(reported)


def run_update_locked(run: AgentRun, change: RunChange, now) -> None:
    """Write a change, decided by a conditional UPDATE on the status and version read under
    the lock. Call holding the run's lock, inside the transaction."""
    updated = AgentRun.objects.filter(pk=run.pk, status=run.status, version=run.version).update(
        **change.row_fields(now)
    )
    if updated != 1:
        raise transaction.TransactionManagementError(f"run {run.pk} changed under its lock")
    run_changes_write([change], now)


def run_events_append_locked(
    run: AgentRun, *, events: list[tuple[str, dict]], **fields: Any
) -> None:
    """Add events to a run's timeline without changing its progress (a waiting run's item
    moved on; `fields`: what else changes with it, such as its state snapshot). Call holding
    the run's lock, inside the transaction."""
    run_update_locked(run, RunChange(run, fields=fields, events=events), timezone.now())


def run_finish_locked(run: AgentRun, change: RunChange) -> None:
    """Write a change that ends a run, decided by a conditional UPDATE on its status.

    Call holding the run's lock, inside the transaction.
    """
    run_update_locked(run, change, timezone.now())


def run_cancel(*, run: AgentRun, reason: str = "cancelled") -> AgentRun:
    """Cancel a run at once; a worker still holding it can commit nothing more."""
    with transaction.atomic():
        locked = run_lock(run.pk)
        if locked.is_finished:
            raise errors.RunFinished(f"The run has already ended ({locked.status}).")
        change = RunChange(locked)
        change.finish(RunStatus.CANCELLED, ("run.cancelled", {"reason": reason}))
        run_finish_locked(locked, change)
    return locked


def run_fail_locked(run: AgentRun, *, code: str, detail: str) -> None:
    """Fail a run. Call holding the run's lock, inside the transaction."""
    change = RunChange(run)
    change.fail(code, detail)
    run_finish_locked(run, change)


def run_resume_locked(run: AgentRun, *, events: list[tuple[str, dict]], **fields: Any) -> None:
    """Put a waiting run back in the queue after a person answered; its deadline restarts and
    its wait is over. `fields`: what else changes with it (the state snapshot).

    Call holding the run's lock, inside the transaction.
    """
    now = timezone.now()
    limits = run.release_snapshot["manifest"]["limits"]
    change = RunChange(run)
    change.fields.update(
        status=RunStatus.QUEUED,
        deadline_at=now + timedelta(seconds=limits["run_deadline_seconds"]),
        wait_deadline_at=None,
        wait_state=None,
        **fields,
    )
    change.events.extend(events)
    run_update_locked(run, change, now)
    tick_enqueue()


def wait_fields(run: AgentRun, *, status: str, wait: WaitState) -> dict[str, Any]:
    """The run's fields while it waits for a person: a fresh wait deadline for each new wait."""
    seconds = run.release_snapshot["manifest"]["limits"]["wait_seconds"]
    return {
        "status": status,
        "wait_state": wait.dump(),
        "wait_deadline_at": timezone.now() + timedelta(seconds=seconds),
        "lease_expires_at": None,
    }


def run_wait_move_locked(
    run: AgentRun, *, status: str, wait: WaitState, events: list[tuple[str, dict]]
) -> None:
    """A waiting run now waits for something else (the next stage of the same wait, say).
    Call holding the run's lock, inside the transaction."""
    now = timezone.now()
    change = RunChange(run)
    change.fields.update(wait_fields(run, status=status, wait=wait))
    change.events.extend(events)
    run_update_locked(run, change, now)


def run_snapshot_save_locked(run: AgentRun, *, state_snapshot: dict) -> None:
    """Record a new state of the pending call without touching the run's progress.

    Call holding the run's lock, inside the transaction. The version is left alone on
    purpose: the worker that holds the run will commit its step on top of it.
    """
    AgentRun.objects.filter(pk=run.pk).update(state_snapshot=state_snapshot)
    run.state_snapshot = state_snapshot


def _wait_due(run: AgentRun) -> bool:
    """Whether a run's wait is past its deadline. A wait whose stored state is unusable is
    left to an operator, never expired behind anyone's back."""
    if not (
        run.status in WAITING_STATUSES
        and run.wait_deadline_at is not None
        and run.wait_deadline_at <= timezone.now()
    ):
        return False
    if run.wait is None:
        logger.error(
            "run %s waits with an unusable wait state; left to an operator",
            run.pk,
            extra=about(run),
        )
        return False
    return True


def run_wait_expire_locked(run: AgentRun) -> bool:
    """Fail a run whose wait is past its deadline; False if it is not (or no longer) due.

    The interrupts' before_wait_expiry first apply what was decided in time but not applied
    yet (a decision whose task is late): a late task only delays.
    Call holding the run's lock, inside the transaction.
    """
    if not _wait_due(run):
        return False
    for hook in extensions.wait_expiry_hooks():
        hook(run)
    if not _wait_due(run):
        return False
    run_fail_locked(run, code=ErrorCode.WAIT_EXPIRED, detail="Nobody answered the run in time.")
    return True
