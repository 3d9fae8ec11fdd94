"""Every state change of a run. The only place in `runs` that opens transactions or takes locks.

Lock order, everywhere: Merchant -> Membership -> Conversation -> AgentRun -> Approval / Ticket.
On SQLite select_for_update() does nothing; each transaction takes the database's write lock at
BEGIN (IMMEDIATE), and every transition is also a conditional UPDATE whose row count decides.
"""

import hashlib
import json
import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.db.models import (
    Case,
    Count,
    Exists,
    F,
    IntegerField,
    OuterRef,
    Q,
    Subquery,
    Value,
    When,
)
from django.db.models.functions import Coalesce
from django.utils import timezone

from agentportal.models import Membership, Merchant
from agentportal.problems import Problem
from runs.models import (
    ACTIVE_STATUSES,
    AgentRelease,
    AgentRun,
    AttemptStatus,
    ErrorCode,
    ModelAttempt,
    Node,
    RunEvent,
    RunStatus,
    ToolExecution,
    WorkerHeartbeat,
)
from runs.releases import DEFAULT_GRAPH_VERSION, GRAPH_RELEASES, ReleaseManifest, default_manifest

logger = logging.getLogger(__name__)

# Hooks the domain apps register at start-up (AppConfig.ready); `runs` never imports them.
# Each is called inside the transaction that holds the run's lock.
RUN_FINISH_HOOKS: list[Callable[[AgentRun, str], None]] = []
MAINTENANCE_HOOKS: list[Callable[[], int]] = []


def _config(name: str) -> Any:
    return settings.AGENTPORTAL[name]


def tick_enqueue(count: int = 1) -> None:
    """Wake workers once the current transaction commits (the message is only a wake-up)."""

    def send() -> None:
        from django_q.tasks import async_task

        for _ in range(count):
            async_task("runs.tasks.tick", q_options={"ack_failure": True})

    transaction.on_commit(send)


# --- events --------------------------------------------------------------------------------


def events_append(*, run: AgentRun, events: list[tuple[str, dict]]) -> list[RunEvent]:
    """Append events to a run's timeline.

    Call holding the run's lock; the caller saves run.last_event_seq (it is advanced here).
    """
    created = []
    now = timezone.now()
    for event_type, data in events:
        run.last_event_seq += 1
        created.append(
            RunEvent(
                run_id=run.pk, seq=run.last_event_seq, type=event_type, data=data, created_at=now
            )
        )
    if created:
        RunEvent.objects.bulk_create(created)
    return created


# --- queueing ------------------------------------------------------------------------------


def request_hash(payload: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()


def release_resolve(*, merchant: Merchant) -> dict[str, Any]:
    """The release a new run copies: the merchant's published one, or the defaults."""
    release = AgentRelease.objects.filter(merchant=merchant, published=True).first()
    if release is None:
        return {
            "version": None,
            "graph_version": DEFAULT_GRAPH_VERSION,
            "manifest": default_manifest().model_dump(),
        }
    manifest = ReleaseManifest.model_validate(release.manifest)
    return {
        "version": release.version,
        "graph_version": release.graph_version,
        "manifest": manifest.model_dump(),
    }


def _replay(*, scope: str, key: str, payload_hash: str) -> AgentRun | None:
    run = AgentRun.objects.filter(idempotency_scope=scope, idempotency_key=key).first()
    if run is not None and run.request_hash != payload_hash:
        raise Problem(
            422,
            "idempotency_key_reused",
            "This Idempotency-Key was used for another request body.",
        )
    return run


def queue_run(
    *,
    merchant: Merchant,
    account,
    messages: list[dict[str, Any]],
    idempotency_scope: str = "",
    idempotency_key: str | None = None,
    payload_hash: str = "",
) -> tuple[AgentRun, bool]:
    """Accept a run; return it and whether it was created (False: an idempotent replay).

    A replay is answered before any limit is counted; the caller re-checks that the principal
    may still see the run. The open-run limit is counted under the account's Membership lock so
    that racing requests cannot both pass it.
    """
    if idempotency_key is not None:
        existing = _replay(scope=idempotency_scope, key=idempotency_key, payload_hash=payload_hash)
        if existing is not None:
            return existing, False
    release = release_resolve(merchant=merchant)
    if release["graph_version"] not in GRAPH_RELEASES:
        raise Problem(
            409,
            "invalid_transition",
            f"Graph version {release['graph_version']} is not registered in this build.",
        )
    limits = release["manifest"]["limits"]
    try:
        with transaction.atomic():
            membership = (
                Membership.objects.select_for_update()
                .filter(user=account, merchant=merchant, active=True)
                .first()
            )
            if membership is None:
                raise Problem(403, "permission_denied", "The account is not a member of this shop.")
            if idempotency_key is not None:
                existing = _replay(
                    scope=idempotency_scope, key=idempotency_key, payload_hash=payload_hash
                )
                if existing is not None:
                    return existing, False
            open_runs = AgentRun.objects.filter(
                merchant=merchant, account=account, status__in=ACTIVE_STATUSES
            ).count()
            if open_runs >= _config("MAX_OPEN_RUNS_PER_ACCOUNT"):
                raise Problem(
                    429,
                    "too_many_open_runs",
                    f"This account already has {open_runs} unfinished runs; wait for one to end.",
                )
            now = timezone.now()
            run = AgentRun(
                merchant=merchant,
                account=account,
                messages=[
                    {"role": "system", "content": release["manifest"]["system_prompt"]},
                    *messages,
                ],
                graph_version=release["graph_version"],
                release_snapshot=release,
                deadline_at=now + timedelta(seconds=limits["run_deadline_seconds"]),
                idempotency_scope=idempotency_scope,
                idempotency_key=idempotency_key,
                request_hash=payload_hash,
            )
            run.save(force_insert=True)
            events_append(run=run, events=[("run.queued", {"graph_version": run.graph_version})])
            AgentRun.objects.filter(pk=run.pk).update(last_event_seq=run.last_event_seq)
            tick_enqueue()
    except IntegrityError:
        # A concurrent request with the same key won the insert.
        existing = _replay(scope=idempotency_scope, key=idempotency_key, payload_hash=payload_hash)
        if existing is None:
            raise Problem(
                409,
                "idempotency_key_in_flight",
                "A request with this Idempotency-Key is being processed; retry shortly.",
            ) from None
        return existing, False
    return run, True


# --- cancelling and finishing -------------------------------------------------------------


def _finish(run: AgentRun, *, status: str, event: tuple[str, dict], **fields: Any) -> None:
    """Move a locked run to a final status, with its event, and run the finish hooks.

    Call holding the run's lock, inside the transaction.
    """
    now = timezone.now()
    events_append(run=run, events=[event])
    changes = {
        "status": status,
        "next_node": Node.DONE,
        "lease_expires_at": None,
        "finished_at": now,
        "updated_at": now,
        "version": F("version") + 1,
        "last_event_seq": run.last_event_seq,
        **fields,
    }
    updated = AgentRun.objects.filter(pk=run.pk, status=run.status).update(**changes)
    if updated != 1:
        raise transaction.TransactionManagementError(f"run {run.pk} changed under its lock")
    previous = run.status
    run.status, run.next_node, run.finished_at = status, Node.DONE, now
    for name, value in fields.items():
        setattr(run, name, value)
    run.version += 1
    for hook in RUN_FINISH_HOOKS:
        hook(run, previous)


def run_cancel(*, run: AgentRun, reason: str = "cancelled") -> AgentRun:
    """Cancel a run at once; a worker still holding it can commit nothing more."""
    with transaction.atomic():
        locked = AgentRun.objects.select_for_update().get(pk=run.pk)
        if locked.is_finished:
            raise Problem(409, "run_finished", f"The run has already ended ({locked.status}).")
        _finish(locked, status=RunStatus.CANCELLED, event=("run.cancelled", {"reason": reason}))
    return locked


def run_fail_locked(run: AgentRun, *, code: str, detail: str, **fields: Any) -> None:
    """Fail a run. Call holding the run's lock, inside the transaction."""
    _finish(
        run,
        status=RunStatus.FAILED,
        event=("run.failed", {"error_code": code, "detail": detail}),
        error_code=code,
        error_detail=detail,
        **fields,
    )


# --- claiming and leases --------------------------------------------------------------------


@dataclass
class Lease:
    """What a worker holds while it executes a run; locked_run compares it with the row."""

    run_id: Any
    token: int
    control_version: int
    attempt_id: int | None = None
    attempt_no: int = 0
    run: AgentRun | None = field(default=None, repr=False)


class LostRun(Exception):
    """The worker no longer holds the run (cancelled, expired lease, taken over, finished)."""


class AccessRevoked(Exception):
    """The run's merchant was deactivated or its account lost its membership."""


def _claimable(now) -> Q:
    return Q(status=RunStatus.QUEUED) | Q(status=RunStatus.RUNNING, lease_expires_at__lt=now)


def _running_count(now) -> Subquery:
    return Subquery(
        AgentRun.objects.filter(
            merchant=OuterRef("pk"), status=RunStatus.RUNNING, lease_expires_at__gte=now
        )
        .order_by()
        .values("merchant")
        .annotate(count=Count("pk"))
        .values("count"),
        output_field=IntegerField(),
    )


CLAIM_AGAIN = object()


def run_claim() -> Lease | None:
    """Claim the next run fairly and take its lease; None when nothing is claimable.

    Shops under their reserved slots first, then the shop scheduled longest ago, then its
    oldest run; a shop at its running-run capacity is passed over. The Merchant row's lock
    makes the capacity check exact across workers.
    """
    for _ in range(100):
        now = timezone.now()
        candidates = list(
            Merchant.objects.filter(active=True)
            .filter(Exists(AgentRun.objects.filter(_claimable(now), merchant=OuterRef("pk"))))
            .annotate(running=Coalesce(_running_count(now), Value(0)))
            .annotate(
                under_reserve=Case(
                    When(running__lt=F("reserved_slots"), then=Value(0)),
                    default=Value(1),
                    output_field=IntegerField(),
                )
            )
            .filter(running__lt=F("max_running_runs"))
            .order_by("under_reserve", F("last_scheduled_at").asc(nulls_first=True), "pk")
            .values_list("pk", flat=True)[:8]
        )
        outcome = None
        for merchant_id in candidates:
            outcome = _claim_from(merchant_id)
            if outcome is not None:
                break
        if outcome is not CLAIM_AGAIN:
            return outcome
    return None


def _claim_from(merchant_id: int) -> Lease | object | None:
    """Claim one run of a merchant; CLAIM_AGAIN when the run found had to be failed instead."""
    with transaction.atomic():
        now = timezone.now()
        merchant = Merchant.objects.select_for_update().get(pk=merchant_id)
        running = AgentRun.objects.filter(
            merchant_id=merchant_id, status=RunStatus.RUNNING, lease_expires_at__gte=now
        ).count()
        if not merchant.active or running >= merchant.max_running_runs:
            return None
        lock = (
            {"skip_locked": True} if connection.features.has_select_for_update_skip_locked else {}
        )
        run = (
            AgentRun.objects.select_for_update(**lock)
            .filter(_claimable(now), merchant_id=merchant_id)
            .order_by("created_at")
            .first()
        )
        if run is None:
            return None
        expires = now + timedelta(seconds=_config("LEASE_SECONDS"))
        won = AgentRun.objects.filter(
            pk=run.pk, status=run.status, lease_token=run.lease_token
        ).update(
            status=RunStatus.RUNNING, lease_token=F("lease_token") + 1, lease_expires_at=expires
        )
        if won != 1:
            return None
        Merchant.objects.filter(pk=merchant_id).update(last_scheduled_at=now)
        run.status, run.lease_token, run.lease_expires_at = (
            RunStatus.RUNNING,
            run.lease_token + 1,
            expires,
        )
        run.merchant = merchant
        lease = Lease(
            run_id=run.pk, token=run.lease_token, control_version=run.control_version, run=run
        )
        if run.deadline_at is not None and run.deadline_at <= now:
            run_fail_locked(
                run, code=ErrorCode.DEADLINE_EXCEEDED, detail="The run's deadline passed."
            )
            return CLAIM_AGAIN
        events: list[tuple[str, dict]] = [("run.started", {"lease": run.lease_token})]
        changes: dict[str, Any] = {}
        if run.next_node == Node.LOAD:
            run.next_node = changes["next_node"] = Node.MODEL
        if run.next_node == Node.MODEL:
            # A STARTED attempt left by a lost worker may or may not have reached the model.
            ModelAttempt.objects.filter(
                run=run, step=run.step, status=AttemptStatus.STARTED
            ).update(status=AttemptStatus.UNKNOWN, finished_at=now)
            exhausted = _budget_exhausted(run)
            if exhausted:
                events_append(run=run, events=events)
                run_fail_locked(run, code=ErrorCode.BUDGET_EXHAUSTED, detail=exhausted, **changes)
                return CLAIM_AGAIN
            _attempt_begin(run, lease, events, changes, previous_attempts=None)
        events_append(run=run, events=events)
        AgentRun.objects.filter(pk=run.pk).update(
            last_event_seq=run.last_event_seq, updated_at=now, **changes
        )
        return lease


def _budget_exhausted(run: AgentRun) -> str:
    """Why the run may not call the model again, or "" when it may."""
    limits = run.release_snapshot["manifest"]["limits"]
    if run.model_calls >= limits["max_model_calls"]:
        return f"The run used all {run.model_calls} model calls it is allowed."
    if run.step >= limits["max_steps"]:
        return f"The run used all {run.step} steps it is allowed."
    return ""


def _attempt_begin(
    run: AgentRun, lease: Lease, events: list, changes: dict, *, previous_attempts: int | None
) -> None:
    """Record a STARTED model attempt before the call; it counts against the budget.

    Call holding the run's lock. previous_attempts: how many attempts this step already had
    (None: count them).
    """
    if previous_attempts is None:
        previous_attempts = ModelAttempt.objects.filter(run=run, step=run.step).count()
    attempt = ModelAttempt.objects.create(
        run=run, step=run.step, attempt=previous_attempts + 1, status=AttemptStatus.STARTED
    )
    lease.attempt_id, lease.attempt_no = attempt.pk, attempt.attempt
    run.model_calls += 1
    changes["model_calls"] = run.model_calls
    events.append(("model.requested", {"step": run.step, "attempt": attempt.attempt}))


@contextmanager
def locked_run(lease: Lease) -> Iterator[AgentRun]:
    """Lock the run and check the worker may still write to it; the one guard on stale writers.

    The run must still be RUNNING under this lease token and control version, its merchant
    active and its account still a member. Raises LostRun or AccessRevoked otherwise, and
    nothing inside the block is committed.
    """
    with transaction.atomic():
        run = (
            AgentRun.objects.select_for_update(of=("self",))
            .select_related("merchant")
            .annotate(
                account_allowed=Exists(
                    Membership.objects.filter(
                        user_id=OuterRef("account_id"),
                        merchant_id=OuterRef("merchant_id"),
                        active=True,
                    )
                )
            )
            .get(pk=lease.run_id)
        )
        if (
            run.status != RunStatus.RUNNING
            or run.lease_token != lease.token
            or run.control_version != lease.control_version
        ):
            raise LostRun(f"run {run.pk} is {run.status}, lease {run.lease_token}")
        if not run.merchant.active or not run.account_allowed:
            raise AccessRevoked(f"run {run.pk}")
        yield run


@dataclass
class StepCommit:
    """What one graph step commits, all at once, under locked_run."""

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
    # Called with the locked run inside the transaction (interrupt handlers of domain apps).
    on_locked: Callable[[AgentRun], dict[str, Any]] | None = None


def run_step_commit(*, lease: Lease, commit: StepCommit) -> AgentRun:
    """Commit a step's effects and the next node in one transaction, then return the run.

    When the next node is the model, its STARTED attempt is recorded in the same commit, so the
    following model call costs no commit of its own.
    """
    with locked_run(lease) as run:
        now = timezone.now()
        if commit.attempt_status is not None and lease.attempt_id is not None:
            ModelAttempt.objects.filter(pk=lease.attempt_id).update(
                status=commit.attempt_status,
                usage=commit.attempt_usage,
                latency_ms=commit.attempt_latency_ms,
                error=commit.attempt_error,
                finished_at=now,
            )
        if commit.tool_executions:
            ToolExecution.objects.bulk_create(commit.tool_executions)
        events = list(commit.events)
        fields: dict[str, Any] = {}
        if commit.messages:
            run.messages = fields["messages"] = [*run.messages, *commit.messages]
        if commit.on_locked is not None:
            fields.update(commit.on_locked(run))
        if commit.advance_step:
            run.step += 1
        fields["step"] = run.step
        if commit.fail_with is not None:
            code, detail = commit.fail_with
            events_append(run=run, events=events)
            run_fail_locked(run, code=code, detail=detail, **fields)
            return run
        if commit.complete_with is not None:
            events.append(("message.assistant", {"text": commit.complete_with}))
            events_append(run=run, events=events)
            _finish(
                run,
                status=RunStatus.COMPLETED,
                event=("run.completed", {"result": commit.complete_with}),
                result=commit.complete_with,
                **fields,
            )
            return run
        run.next_node = commit.next_node
        if run.next_node == Node.MODEL:
            exhausted = _budget_exhausted(run)
            if exhausted:
                events_append(run=run, events=events)
                run_fail_locked(run, code=ErrorCode.BUDGET_EXHAUSTED, detail=exhausted, **fields)
                return run
            _attempt_begin(
                run,
                lease,
                events,
                fields,
                previous_attempts=0 if commit.advance_step else lease.attempt_no,
            )
        events_append(run=run, events=events)
        updated = AgentRun.objects.filter(
            pk=run.pk, status=RunStatus.RUNNING, lease_token=lease.token
        ).update(
            next_node=run.next_node,
            version=F("version") + 1,
            lease_expires_at=now + timedelta(seconds=_config("LEASE_SECONDS")),
            last_event_seq=run.last_event_seq,
            updated_at=now,
            **fields,
        )
        if updated != 1:
            raise LostRun(f"run {run.pk} changed under its lock")
        run.version += 1
        return run


def run_release(*, lease: Lease) -> None:
    """Give a run back to the queue (its slice is spent); another tick continues it."""
    with transaction.atomic():
        AgentRun.objects.filter(
            pk=lease.run_id, status=RunStatus.RUNNING, lease_token=lease.token
        ).update(status=RunStatus.QUEUED, lease_expires_at=None, updated_at=timezone.now())
        tick_enqueue()


def run_fail(*, lease: Lease, code: str, detail: str) -> bool:
    """Fail a run the worker still holds (model error, tool error). False if it was lost."""
    try:
        with locked_run(lease) as run:
            run_fail_locked(run, code=code, detail=detail)
            return True
    except LostRun:
        return False


def run_fail_access_revoked(*, lease: Lease) -> None:
    """The run's shop or account lost access: fail it, whatever the lease says now."""
    with transaction.atomic():
        run = AgentRun.objects.select_for_update().get(pk=lease.run_id)
        if run.status == RunStatus.RUNNING and run.lease_token == lease.token:
            run_fail_locked(
                run,
                code=ErrorCode.PERMISSION_REVOKED,
                detail="The shop was deactivated or the customer's membership was revoked.",
            )


# --- maintenance ----------------------------------------------------------------------------


def heartbeat_beat(*, name: str = "worker") -> None:
    WorkerHeartbeat.objects.update_or_create(name=name, defaults={"seen_at": timezone.now()})


def leases_expired_requeue() -> int:
    """Runs whose worker vanished go back to the queue (one conditional UPDATE)."""
    with transaction.atomic():
        return AgentRun.objects.filter(
            status=RunStatus.RUNNING, lease_expires_at__lt=timezone.now()
        ).update(status=RunStatus.QUEUED, lease_expires_at=None, updated_at=timezone.now())


def deadlines_enforce() -> int:
    """Fail runs whose active time ran out while nobody was working on them."""
    failed = 0
    overdue = AgentRun.objects.filter(
        status__in=[RunStatus.QUEUED, RunStatus.RUNNING], deadline_at__lt=timezone.now()
    ).values_list("pk", flat=True)
    for run_id in list(overdue[:500]):
        with transaction.atomic():
            run = AgentRun.objects.select_for_update().get(pk=run_id)
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


def ticks_for_queued() -> int:
    """Enqueue ticks for queued runs, never more than the free capacity (or the workers)."""
    now = timezone.now()
    queued = AgentRun.objects.filter(status=RunStatus.QUEUED).count()
    if not queued:
        return 0
    free = 0
    for merchant in Merchant.objects.filter(active=True).annotate(
        running=Coalesce(_running_count(now), Value(0))
    ):
        free += max(0, merchant.max_running_runs - merchant.running)
    count = min(queued, free, settings.Q_CLUSTER["workers"])
    if count:
        with transaction.atomic():
            tick_enqueue(count)
    return count


def maintain() -> dict[str, int]:
    """The once-a-minute backstop: sweep what no event announced."""
    heartbeat_beat()
    report = {
        "requeued": leases_expired_requeue(),
        "deadlines": deadlines_enforce(),
        "hooks": sum(hook() for hook in MAINTENANCE_HOOKS),
    }
    report["ticks"] = ticks_for_queued()
    return report
