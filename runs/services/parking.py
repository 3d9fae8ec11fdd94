"""Runs a worker gives up: handed back to the queue, parked for an operator, failed when their
access was revoked; and the leases of runs in slow calls, renewed."""

import logging
from datetime import UTC, datetime, timedelta

from django.db import transaction
from django.db.models import F
from django.utils import timezone

from runs.locks import run_lock
from runs.models import AgentRun, ErrorCode, RunStatus
from runs.services.changes import RunChange, run_fail_locked, run_update_locked
from runs.services.leases import Lease, lease_expires_at
from runs.services.queueing import tick_enqueue
from runs.services.statements import held_by

logger = logging.getLogger(__name__)

PARKED_UNTIL = datetime(9999, 1, 1, tzinfo=UTC)


def run_park(*, lease: Lease, reason: str) -> None:
    """Leave a run the worker cannot make sense of (an invalid snapshot, a bug) to an
    operator: it keeps its status and state, and a lease no claim or sweep will take away,
    so it is never expired or failed behind anyone's back."""
    with transaction.atomic():
        parked = AgentRun.objects.filter(
            pk=lease.run_id, status=RunStatus.RUNNING, lease_token=lease.token
        ).update(lease_expires_at=PARKED_UNTIL, updated_at=timezone.now())
    logger.error("run %s parked for an operator: %s", lease.run_id, reason)
    if not parked:
        logger.error("run %s was no longer held when parking it", lease.run_id)


def run_unpark(*, run_id) -> bool:
    """Hand a run parked for an operator back to the queue, once its cause was repaired; its
    active time starts again. False when it is not (or no longer) parked."""
    with transaction.atomic():
        run = run_lock(run_id)
        if run.status != RunStatus.RUNNING or run.lease_expires_at != PARKED_UNTIL:
            return False
        now = timezone.now()
        limits = run.release_snapshot["manifest"]["limits"]
        change = RunChange(run)
        change.fields.update(
            status=RunStatus.QUEUED,
            lease_expires_at=None,
            deadline_at=now + timedelta(seconds=limits["run_deadline_seconds"]),
        )
        change.events.append(("run.unparked", {}))
        run_update_locked(run, change, now)
        tick_enqueue()
    return True


def runs_release(leases: list[Lease]) -> int:
    """Hand runs a worker can no longer execute back to the queue at once, rather than when
    their leases expire; each only while that worker still holds it. They go on from their
    last commit."""
    now = timezone.now()
    released = 0
    with transaction.atomic():
        for lease in leases:
            released += AgentRun.objects.filter(
                pk=lease.run_id, status=RunStatus.RUNNING, lease_token=lease.token
            ).update(
                status=RunStatus.QUEUED,
                lease_expires_at=None,
                version=F("version") + 1,
                updated_at=now,
            )
        if released:
            tick_enqueue()
    return released


def leases_renew(leases: list[Lease]) -> list[Lease]:
    """Renew the leases of runs whose worker waits on a slow call, while it still holds
    them; the leases it no longer holds."""
    now = timezone.now()
    expires = lease_expires_at(now)
    lost = []
    with transaction.atomic():
        for lease in leases:
            renewed = AgentRun.objects.filter(held_by(lease, now)).update(lease_expires_at=expires)
            if renewed:
                lease.run.lease_expires_at = expires
            else:
                lost.append(lease)
    return lost


def run_fail_access_revoked(*, lease: Lease) -> None:
    """The run's shop or account lost access: fail it, whatever its copy in memory says."""
    with transaction.atomic():
        run = run_lock(lease.run_id)
        if run.status == RunStatus.RUNNING and run.lease_token == lease.token:
            run_fail_locked(
                run,
                code=ErrorCode.PERMISSION_REVOKED,
                detail="The shop was deactivated or the customer's membership was revoked.",
            )
