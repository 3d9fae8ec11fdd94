"""Retention: what a finished run keeps after a while. Its events, model attempts and input
receipts go; the run itself stays, and so does what a domain recorded about it."""

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import transaction
from django.utils import timezone

from runs.models import FINISHED_STATUSES, AgentRun, ModelAttempt, RunEvent, RunInput

# An input receipt holds its idempotency key, which API.md promises to keep at least this long
# (a client may retry until then), whatever age a prune is given.
RECEIPTS_KEPT = timedelta(hours=24)


@dataclass
class PruneBatch:
    runs: int = 0
    events: int = 0
    attempts: int = 0
    inputs: int = 0
    # Where the next batch starts: after this (created_at, id); None when there is no more.
    resume_after: tuple[datetime, object] | None = None


def runs_prune_batch(
    *, finished_before: datetime, resume_after: tuple | None = None, batch_size: int = 500
) -> PruneBatch:
    """Delete the events, model attempts and input receipts of up to `batch_size` runs that
    finished before `finished_before`, taking the runs in order of creation after
    `resume_after`. Each batch is one short transaction, so a long prune never holds a lock
    for long (on SQLite, the database's write lock); running it again deletes nothing twice.
    Receipts younger than RECEIPTS_KEPT stay; a later prune deletes them."""
    candidates = AgentRun.objects.filter(
        status__in=FINISHED_STATUSES, created_at__lt=finished_before
    ).order_by("created_at", "pk")
    if resume_after is not None:
        created_at, pk = resume_after
        candidates = candidates.filter(created_at__gte=created_at).exclude(
            created_at=created_at, pk__lte=pk
        )
    page = list(candidates.values_list("created_at", "pk", "finished_at")[:batch_size])
    old = [pk for _created, pk, finished in page if finished and finished < finished_before]
    batch = PruneBatch(runs=len(old))
    if old:
        with transaction.atomic():
            batch.events, _ = RunEvent.objects.filter(run_id__in=old).delete()
            batch.attempts, _ = ModelAttempt.objects.filter(run_id__in=old).delete()
            batch.inputs, _ = RunInput.objects.filter(
                run_id__in=old, created_at__lt=timezone.now() - RECEIPTS_KEPT
            ).delete()
    if len(page) == batch_size:
        batch.resume_after = page[-1][:2]
    return batch
