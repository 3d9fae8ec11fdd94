"""The once-a-minute backstop: sweeps for what no event announced, and the worker's heartbeat."""

import logging
from collections.abc import Callable

from django.conf import settings
from django.db import transaction
from django.db.models import F, Value
from django.db.models.functions import Coalesce
from django.utils import timezone

from agentportal.models import Merchant
from runs import delta_channels, extensions
from runs.locks import run_lock
from runs.models import AgentRun, ErrorCode, RunStatus, WorkerHeartbeat
from runs.services.changes import WAITING_STATUSES, run_fail_locked, run_wait_expire_locked
from runs.services.parking import leases_of_lost_processes_release, parked_expire
from runs.services.queueing import tick_enqueue
from runs.services.statements import lease_expired, occupying_count

logger = logging.getLogger(__name__)


def heartbeat_record(*, name: str = "worker", report: dict | None = None) -> None:
    defaults = {"seen_at": timezone.now()}
    if report is not None:
        defaults["report"] = report
    WorkerHeartbeat.objects.update_or_create(name=name, defaults=defaults)


def leases_expired_requeue() -> int:
    """Runs whose worker vanished go back to the queue (one conditional UPDATE)."""
    with transaction.atomic():
        return AgentRun.objects.filter(lease_expired(timezone.now())).update(
            status=RunStatus.QUEUED,
            lease_expires_at=None,
            version=F("version") + 1,
            updated_at=timezone.now(),
        )


def deadlines_enforce() -> int:
    """Fail runs whose active time ran out while nobody was working on them."""
    failed = 0
    overdue = AgentRun.objects.filter(
        status__in=[RunStatus.QUEUED, RunStatus.RUNNING], deadline_at__lt=timezone.now()
    ).values_list("pk", flat=True)
    for run_id in list(overdue[:500]):
        with transaction.atomic():
            run = run_lock(run_id)
            now = timezone.now()
            if run.status not in (RunStatus.QUEUED, RunStatus.RUNNING) or run.deadline_at >= now:
                continue
            if (
                run.status == RunStatus.RUNNING
                and run.lease_expires_at
                and run.lease_expires_at > now
            ):
                continue  # its worker notices the deadline at its next step
            run_fail_locked(
                run, code=ErrorCode.DEADLINE_EXCEEDED, detail="The run's deadline passed."
            )
            failed += 1
    return failed


def waits_expire() -> int:
    """Fail runs whose wait nobody answered in time (WAIT_EXPIRED)."""
    failed = 0
    due = AgentRun.objects.filter(
        status__in=WAITING_STATUSES, wait_deadline_at__lte=timezone.now()
    ).values_list("pk", flat=True)
    for run_id in list(due[:500]):
        with transaction.atomic():
            run = run_lock(run_id)
            if run_wait_expire_locked(run):
                failed += 1
    return failed


def ticks_for_queued() -> int:
    """Enqueue ticks for queued runs, never more than the free capacity (or the workers)."""
    queued = AgentRun.objects.filter(status=RunStatus.QUEUED).count()
    if not queued:
        return 0
    free = 0
    for merchant in Merchant.objects.filter(active=True).annotate(
        running=Coalesce(occupying_count(), Value(0))
    ):
        free += max(0, merchant.max_running_runs - merchant.running)
    count = min(queued, free, settings.Q_CLUSTER["workers"])
    if count:
        with transaction.atomic():
            tick_enqueue(count)
    return count


def maintain() -> dict[str, int]:
    """The once-a-minute backstop: sweep what no event announced.

    Each sweep is on its own: one that fails is logged and the others still run. The
    heartbeat comes last, so /healthz reports a worker whose sweeps complete.
    """
    sweeps: list[tuple[str, Callable[[], int]]] = [
        ("requeued", leases_expired_requeue),
        ("lost_processes", leases_of_lost_processes_release),
        ("deadlines", deadlines_enforce),
        ("waits_expired", waits_expire),
        ("parked_expired", parked_expire),
        ("delta_files", delta_channels.files_forget_old),
        *extensions.sweeps().items(),
        ("ticks", ticks_for_queued),
    ]
    report: dict[str, int] = {}
    for name, sweep in sweeps:
        try:
            report[name] = sweep()
        except Exception:
            logger.exception("maintain: %s failed", name)
            report[name] = -1
    if all(count >= 0 for count in report.values()):
        heartbeat_record()
    return report
