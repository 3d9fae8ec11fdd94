"""Runs a worker gives up: handed back to the queue, parked for an operator, failed when their
access was revoked; and the leases of runs in slow calls, renewed."""

import logging
from datetime import timedelta
from typing import Any

from django.db import transaction
from django.db.models import Exists, F, OuterRef
from django.utils import timezone

from agentportal.logs import about
from runs.locks import run_lock
from runs.models import AgentRun, ErrorCode, RunStatus, WorkerHeartbeat
from runs.services.changes import RunChange, run_fail_locked, run_update_locked
from runs.services.leases import Lease, lease_expires_at
from runs.services.queueing import tick_enqueue
from runs.services.statements import held_by

logger = logging.getLogger(__name__)


def run_park(*, lease: Lease, reason: str) -> None:
    """Leave a run the worker cannot make sense of (an invalid snapshot, a bug) to an
    operator: PARKED, with the reason, until they hand it back or fail it, or until the wait
    limit fails it with INTERNAL_ERROR. It frees its shop's capacity and its customer's
    open-run slot; it is never expired or failed behind anyone's back before that."""
    logger.error(
        "run %s parked for an operator: %s",
        lease.run_id,
        reason,
        extra=about(lease.run, run_id=lease.run_id),
    )
    with transaction.atomic():
        run = run_lock(lease.run_id)
        if run.status != RunStatus.RUNNING or run.lease_token != lease.token:
            logger.error("run %s was no longer held when parking it", lease.run_id)
            return
        now = timezone.now()
        wait = run.release_snapshot["manifest"]["limits"]["wait_seconds"]
        change = RunChange(run)
        change.fields.update(
            status=RunStatus.PARKED,
            lease_expires_at=None,
            wait_deadline_at=now + timedelta(seconds=wait),
            error_detail=reason[:2000],
        )
        change.events.append(("run.parked", {"reason": reason[:500]}))
        run_update_locked(run, change, now)


def run_unpark(*, run_id) -> bool:
    """Hand a run parked for an operator back to the queue, once its cause was repaired; its
    active time starts again. False when it is not (or no longer) parked."""
    with transaction.atomic():
        run = run_lock(run_id)
        if run.status != RunStatus.PARKED:
            return False
        now = timezone.now()
        limits = run.release_snapshot["manifest"]["limits"]
        change = RunChange(run)
        change.fields.update(
            status=RunStatus.QUEUED,
            wait_deadline_at=None,
            error_detail="",
            deadline_at=now + timedelta(seconds=limits["run_deadline_seconds"]),
        )
        change.events.append(("run.unparked", {}))
        run_update_locked(run, change, now)
        tick_enqueue()
    return True


def run_parked_fail(*, run_id, detail: str) -> bool:
    """Fail a parked run with INTERNAL_ERROR (an operator gave up on it, or nobody repaired it
    in time). False when it is not (or no longer) parked."""
    with transaction.atomic():
        run = run_lock(run_id)
        if run.status != RunStatus.PARKED:
            return False
        run_fail_locked(run, code=ErrorCode.INTERNAL_ERROR, detail=detail)
    return True


def parked_expire() -> int:
    """`maintain`'s sweep: parked runs nobody repaired within the wait limit fail."""
    due = AgentRun.objects.filter(
        status=RunStatus.PARKED, wait_deadline_at__lte=timezone.now()
    ).values_list("pk", flat=True)
    return sum(
        run_parked_fail(run_id=run_id, detail="Nobody repaired the run in time.")
        for run_id in list(due[:500])
    )


def runs_release(leases: list[Lease]) -> int:
    """Hand runs a worker can no longer execute back to the queue at once, rather than when
    their leases expire; each only while that worker still holds it. They go on from their
    last commit."""
    return _requeue_held([(lease.run_id, lease.token) for lease in leases])


def _requeue_held(held: list[tuple[Any, int]]) -> int:
    """Queue again each (run id, lease token) while the run is still RUNNING under that token
    (one conditional UPDATE each), and wake the workers; how many were."""
    if not held:
        return 0
    now = timezone.now()
    released = 0
    with transaction.atomic():
        for run_id, token in held:
            released += AgentRun.objects.filter(
                pk=run_id, status=RunStatus.RUNNING, lease_token=token
            ).update(
                status=RunStatus.QUEUED,
                lease_expires_at=None,
                version=F("version") + 1,
                updated_at=now,
            )
        if released:
            tick_enqueue()
    return released


# A worker process holding runs reports every 2 s; one silent for this long is taken for dead.
PROCESS_LOST_AFTER = timedelta(seconds=15)


def leases_of_lost_processes_release() -> int:
    """Hand back to the queue the runs of worker processes that stopped reporting (killed, out
    of memory, their machine gone), rather than when their leases expire: each RUNNING run
    whose holder has not reported for PROCESS_LOST_AFTER and that has not changed in that
    time (a run claimed a moment ago waits for its holder's first report). A holder that was
    only slow loses its runs and commits nothing more of them (its lease token is stale)."""
    now = timezone.now()
    since = now - PROCESS_LOST_AFTER
    reporting = WorkerHeartbeat.objects.filter(name=OuterRef("lease_holder"), seen_at__gte=since)
    lost = list(
        AgentRun.objects.filter(status=RunStatus.RUNNING, updated_at__lt=since)
        .exclude(lease_holder="")
        .exclude(Exists(reporting))
        .values_list("pk", "lease_token")
    )
    released = _requeue_held(lost)
    if released:
        logger.warning("handed back %d runs of worker processes that stopped", released)
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
