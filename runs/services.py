"""Every state change of a run. The only place in `runs` that opens transactions or takes locks.

Lock order, everywhere: Merchant -> Membership -> Conversation -> AgentRun -> the domain's rows.
On SQLite select_for_update() does nothing; each transaction takes the database's write lock at
BEGIN (IMMEDIATE), and every transition is also a conditional UPDATE whose row count decides.
"""

import hashlib
import json
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import IntegrityError, InterfaceError, OperationalError, connection, transaction
from django.db.models import (
    Count,
    F,
    IntegerField,
    OuterRef,
    Subquery,
    Value,
)
from django.db.models.functions import Coalesce
from django.utils import timezone
from pydantic import ValidationError

from agentportal.models import Membership, Merchant
from agentportal.problems import Problem
from runs import extensions, locks
from runs.locks import run_lock
from runs.models import (
    ACTIVE_STATUSES,
    FINISHED_STATUSES,
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
from runs.releases import (
    GRAPH_RELEASES,
    ReleaseManifest,
    default_manifest,
    graph_release_default,
)
from runs.snapshot import WaitState

logger = logging.getLogger(__name__)


def _config(name: str) -> Any:
    return settings.AGENTPORTAL[name]


def tick_enqueue(count: int = 1) -> None:
    """Wake workers once the current transaction commits.

    The message is only a wake-up: a tick drains every claimable run. So while enough wake-ups
    wait unclaimed in the broker (one per worker), another one would add nothing.
    """

    def send() -> None:
        from django_q.brokers import get_broker
        from django_q.tasks import async_task

        waiting = get_broker().queue_size() or 0
        for _ in range(min(count, settings.Q_CLUSTER["workers"] - waiting)):
            async_task("runs.tasks.tick")

    # A broker that is down must not turn a committed change into an error for its caller:
    # the run is in the database, and maintain wakes the workers later.
    transaction.on_commit(send, robust=True)


# --- queueing ------------------------------------------------------------------------------


def request_hash(payload: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()


def release_resolve(*, merchant: Merchant) -> dict[str, Any]:
    """The release a new run copies: the merchant's published one, or the defaults."""
    release = AgentRelease.objects.filter(merchant=merchant, published=True).first()
    if release is None:
        return {
            "version": None,
            "graph_version": graph_release_default().version,
            "manifest": default_manifest().model_dump(),
        }
    try:
        manifest = ReleaseManifest.model_validate(release.manifest)
    except ValidationError as error:
        logger.error("release %s of %s is invalid: %s", release.version, merchant.slug, error)
        raise Problem(
            409,
            "invalid_transition",
            "This shop's published agent release is invalid; an operator must fix it.",
        ) from error
    return {
        "version": release.version,
        "graph_version": release.graph_version,
        "manifest": manifest.model_dump(),
    }


def release_save(*, release: AgentRelease) -> AgentRelease:
    """Save a release; publishing it unpublishes the merchant's previous one. New runs copy
    the published release; runs already queued keep theirs."""
    with transaction.atomic():
        locks.merchant_lock(release.merchant_id)
        if release.published:
            AgentRelease.objects.filter(merchant_id=release.merchant_id, published=True).exclude(
                pk=release.pk
            ).update(published=False)
        release.save()
    return release


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
    """Accept a standalone run; return it and whether it was created (False: a replay).

    A replay is answered before any limit is counted; the caller re-checks that the principal
    may still see the run. The open-run limit is counted under the account's Membership lock so
    that racing requests cannot both pass it.
    """
    if idempotency_key is not None:
        existing = _replay(scope=idempotency_scope, key=idempotency_key, payload_hash=payload_hash)
        if existing is not None:
            return existing, False
    release = release_resolve(merchant=merchant)
    try:
        with transaction.atomic():
            membership_lock(merchant=merchant, account=account)
            if idempotency_key is not None:
                existing = _replay(
                    scope=idempotency_scope, key=idempotency_key, payload_hash=payload_hash
                )
                if existing is not None:
                    return existing, False
            open_runs_check(merchant=merchant, account=account)
            run = run_insert_locked(
                merchant=merchant,
                account=account,
                messages=messages,
                release=release,
                idempotency_scope=idempotency_scope,
                idempotency_key=idempotency_key,
                payload_hash=payload_hash,
            )
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


def membership_lock(*, merchant: Merchant, account) -> Membership:
    """Lock the account's membership (first in the lock order); 403 when it has none."""
    membership = locks.membership_lock(merchant=merchant, account=account)
    if membership is None:
        raise Problem(403, "permission_denied", "The account is not a member of this shop.")
    return membership


def open_runs_check(*, merchant: Merchant, account) -> None:
    """429 when the account has its limit of unfinished runs. Call holding its Membership
    lock, so that racing requests cannot both pass."""
    open_runs = AgentRun.objects.filter(
        merchant=merchant, account=account, status__in=ACTIVE_STATUSES
    ).count()
    if open_runs >= _config("MAX_OPEN_RUNS_PER_ACCOUNT"):
        raise Problem(
            429,
            "too_many_open_runs",
            f"This account already has {open_runs} unfinished runs; wait for one to end.",
        )


def _system_prompt(release: dict[str, Any]) -> str:
    graph = GRAPH_RELEASES[release["graph_version"]]
    return release["manifest"]["system_prompt"] or graph.system_prompt


def run_insert_locked(
    *,
    merchant: Merchant,
    account,
    messages: list[dict[str, Any]],
    release: dict[str, Any],
    conversation=None,
    idempotency_scope: str = "",
    idempotency_key: str | None = None,
    payload_hash: str = "",
) -> AgentRun:
    """Store a QUEUED run with its release and deadline, and wake a worker on commit.

    Call inside a transaction, after the open-run limit was checked.
    """
    if release["graph_version"] not in GRAPH_RELEASES:
        raise Problem(
            409,
            "invalid_transition",
            f"Graph version {release['graph_version']} is not registered in this build.",
        )
    limits = release["manifest"]["limits"]
    run = AgentRun(
        merchant=merchant,
        account=account,
        conversation=conversation,
        control_version=conversation.control_version if conversation else 1,
        messages=[{"role": "system", "content": _system_prompt(release)}, *messages],
        graph_version=release["graph_version"],
        release_snapshot=release,
        deadline_at=timezone.now() + timedelta(seconds=limits["run_deadline_seconds"]),
        idempotency_scope=idempotency_scope,
        idempotency_key=idempotency_key,
        request_hash=payload_hash,
        last_event_seq=1,
    )
    run.save(force_insert=True)
    RunEvent.objects.create(
        run=run, seq=1, type="run.queued", data={"graph_version": run.graph_version}
    )
    tick_enqueue()
    return run


# --- plans: a transition computed before the transaction, applied inside it ---------------


@dataclass
class RunPlan:
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


def plans_write(plans: list[RunPlan], now) -> None:
    """Bring the runs in memory up to date, insert all their events in one statement and run
    the finish hooks. Call holding the runs' locks, after their rows were updated with
    row_fields()."""
    previous = [plan.run.status for plan in plans]
    rows = [row for plan in plans for row in plan.event_rows(now)]
    for plan in plans:
        plan.apply(now)
    if rows:
        _insert(
            RunEvent,
            [
                {
                    "run": row.run_id,
                    "seq": row.seq,
                    "type": row.type,
                    "data": row.data,
                    "created_at": row.created_at,
                }
                for row in rows
            ],
        )
    for plan, status in zip(plans, previous, strict=True):
        if plan.finished and status not in FINISHED_STATUSES:
            for hook in extensions.run_end_hooks():
                hook(plan.run, status)


def run_finish_locked(run: AgentRun, plan: RunPlan) -> None:
    """Write a plan that ends a run, decided by a conditional UPDATE on its status.

    Call holding the run's lock (select_for_update), inside the transaction.
    """
    _run_update_locked(run, plan, timezone.now())


def run_cancel(*, run: AgentRun, reason: str = "cancelled") -> AgentRun:
    """Cancel a run at once; a worker still holding it can commit nothing more."""
    with transaction.atomic():
        locked = run_lock(run.pk)
        if locked.is_finished:
            raise Problem(409, "run_finished", f"The run has already ended ({locked.status}).")
        plan = RunPlan(locked)
        plan.finish(RunStatus.CANCELLED, ("run.cancelled", {"reason": reason}))
        run_finish_locked(locked, plan)
    return locked


def run_fail_locked(run: AgentRun, *, code: str, detail: str) -> None:
    """Fail a run. Call holding the run's lock (select_for_update), inside the transaction."""
    plan = RunPlan(run)
    plan.fail(code, detail)
    run_finish_locked(run, plan)


# --- claiming and leases --------------------------------------------------------------------


@dataclass
class Lease:
    """What a worker holds while it executes a run. `run` is the worker's copy of the row:
    while the lease is valid nobody else changes it, and every commit checks that."""

    run_id: Any
    token: int
    control_version: int
    attempt_id: int | None = None
    attempt_no: int = 0
    run: AgentRun | None = field(default=None, repr=False)
    # time.monotonic() at which the worker's slice ends: the step committed after it hands
    # the run back to the queue.
    slice_ends: float = math.inf
    # The step whose tool calls this lease's holder got from the model itself: none of them
    # can have a result yet, so nothing needs looking up.
    fresh_turn: int | None = None

    def slice_spent(self) -> bool:
        return time.monotonic() >= self.slice_ends


class LostRun(Exception):
    """The worker no longer holds the run (cancelled, expired lease, taken over, finished)."""


class AccessRevoked(Exception):
    """The run's merchant was deactivated or its account lost its membership."""


# What is claimable, and the same running count as _running_count() below, for raw queries.
CLAIMABLE_SQL = "(r.status = 'QUEUED' OR (r.status = 'RUNNING' AND r.lease_expires_at < %(now)s))"
RUNNING_SQL = (
    "(SELECT COUNT(*) FROM runs_agentrun r WHERE r.merchant_id = m.id"
    " AND r.status = 'RUNNING' AND r.lease_expires_at >= %(now)s)"
)
# Raw SQL because it runs before every claim and the ORM spends more time building it than the
# database spends answering it. Shops under their reserved slots first, then the one scheduled
# longest ago.
CANDIDATES_SQL = f"""
SELECT m.id FROM agentportal_merchant m
WHERE m.active
  AND EXISTS (SELECT 1 FROM runs_agentrun r WHERE r.merchant_id = m.id AND {CLAIMABLE_SQL})
  AND {RUNNING_SQL} < m.max_running_runs
ORDER BY CASE WHEN {RUNNING_SQL} < m.reserved_slots THEN 0 ELSE 1 END,
         m.last_scheduled_at IS NOT NULL, m.last_scheduled_at, m.id
LIMIT 8
"""


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


def _columns(model, alias: str = "") -> str:
    """A model's columns by name rather than `*`: the result of a statement PostgreSQL has
    prepared must keep its shape when a migration adds a column."""
    prefix = f"{alias}." if alias else ""
    return ", ".join(f'{prefix}"{field.column}"' for field in model._meta.concrete_fields)


# The claim's statements, by hand like CANDIDATES_SQL (see _assignments).
MERCHANT_LOCK_SQL = f"SELECT {_columns(Merchant)} FROM agentportal_merchant WHERE id = %s {{lock}}"
RUNNING_COUNT_SQL = (
    "SELECT COUNT(*) FROM runs_agentrun WHERE merchant_id = %(merchant)s"
    " AND status = 'RUNNING' AND lease_expires_at >= %(now)s"
)
NEXT_RUNS_SQL = (
    f"SELECT {_columns(AgentRun, 'r')} FROM runs_agentrun r"
    f" WHERE r.merchant_id = %(merchant)s AND {CLAIMABLE_SQL}"
    " ORDER BY r.created_at LIMIT %(limit)s {lock}"
)
CLAIM_UPDATE_SQL = (
    "UPDATE runs_agentrun SET {assignments} WHERE id = %s AND status = %s AND lease_token = %s"
)
SCHEDULED_SQL = "UPDATE agentportal_merchant SET last_scheduled_at = %s WHERE id = %s"


def _lock_clause(*, no_key: bool = False, skip_locked: bool = False) -> str:
    """FOR [NO KEY] UPDATE [SKIP LOCKED] where the database has row locks (not SQLite, where
    the IMMEDIATE transaction already holds the write lock)."""
    if not connection.features.has_select_for_update:
        return ""
    return connection.ops.for_update_sql(skip_locked=skip_locked, no_key=no_key)


def run_claim() -> Lease | None:
    """Claim the next run fairly and take its lease; None when nothing is claimable."""
    leases = runs_claim(limit=1)
    return leases[0] if leases else None


def runs_claim(*, limit: int) -> list[Lease]:
    """Claim up to `limit` runs fairly and take their leases; [] when nothing is claimable.

    Shops under their reserved slots first (up to those slots), then the shop scheduled
    longest ago, then its oldest runs, as if the runs were claimed one at a time: the room is
    shared among the shops in that order, each within its free capacity, and what a shop
    cannot use goes round again. Each shop's runs are claimed in one transaction, and its
    Merchant row's lock makes the capacity check exact across workers.
    """
    leases: list[Lease] = []
    for _ in range(100):
        with connection.cursor() as cursor:
            cursor.execute(CANDIDATES_SQL, {"now": timezone.now()})
            candidates = [row[0] for row in cursor.fetchall()]
        if not candidates:
            return leases
        share = -(-(limit - len(leases)) // len(candidates))
        progress = False
        for merchant_id in candidates:
            claimed, failed = _claim_from(merchant_id, min(share, limit - len(leases)))
            leases += claimed
            progress = progress or bool(claimed or failed)
            if len(leases) >= limit:
                return leases
        if not progress:
            return leases
    return leases


def _claim_from(merchant_id: int, limit: int) -> tuple[list[Lease], int]:
    """Claim up to `limit` runs of a merchant; the leases, and how many of the runs found had
    to be failed instead (past their deadline or out of budget)."""
    with transaction.atomic():
        now = timezone.now()
        # Lock first and count after: a count taken in the locking statement would be read
        # from before the wait on PostgreSQL and miss the claim that held the lock.
        merchant = Merchant.objects.raw(
            MERCHANT_LOCK_SQL.format(lock=_lock_clause(no_key=True)), [merchant_id]
        )[0]
        moment = {"merchant": merchant_id, "now": _prepared(AgentRun, "lease_expires_at", now)}
        with connection.cursor() as cursor:
            cursor.execute(RUNNING_COUNT_SQL, moment)
            [running] = cursor.fetchone()
        free = merchant.max_running_runs - running
        if running < merchant.reserved_slots:
            # Its turn before the others' is only for its reserved slots.
            free = min(free, merchant.reserved_slots - running)
        if not merchant.active or free <= 0:
            return [], 0
        found = list(
            AgentRun.objects.raw(
                NEXT_RUNS_SQL.format(lock=_lock_clause(skip_locked=True)),
                {**moment, "limit": min(limit, free)},
            )
        )
        claims = [claim for run in found if (claim := _claim_plan(run, now)) is not None]
        if not claims:
            return [], 0
        with connection.cursor() as cursor:
            for plan, _lease, _attempt in claims:
                assignments, params = _assignments(AgentRun, plan.row_fields(now))
                cursor.execute(
                    CLAIM_UPDATE_SQL.format(assignments=assignments),
                    [*params, _run_pk(plan.run.pk), plan.run.status, plan.run.lease_token],
                )
                if cursor.rowcount != 1:
                    raise transaction.TransactionManagementError(
                        f"run {plan.run.pk} changed under its lock"
                    )
            cursor.execute(
                SCHEDULED_SQL, [_prepared(Merchant, "last_scheduled_at", now), merchant_id]
            )
        for plan, _lease, _attempt in claims:
            plan.run.merchant = merchant
        plans_write([plan for plan, _lease, _attempt in claims], now)
        attempts = []
        for plan, lease, attempt in claims:
            if attempt is None:
                continue
            run = plan.run
            if run.model_calls > 1:
                # A STARTED attempt left by a lost worker may or may not have reached the model:
                # it counts against the budget, and the model is asked again.
                ModelAttempt.objects.filter(
                    run=run, step=run.step, status=AttemptStatus.STARTED
                ).update(status=AttemptStatus.UNKNOWN, finished_at=now)
                attempt.attempt = ModelAttempt.objects.filter(run=run, step=run.step).count() + 1
            attempts.append((attempt, lease))
        attempts_insert(attempts)
        leases = [lease for plan, lease, _attempt in claims if not plan.finished]
        return leases, len(claims) - len(leases)


def _claim_plan(run: AgentRun, now) -> tuple[RunPlan, Lease, ModelAttempt | None] | None:
    """What claiming a run writes: RUNNING under a new lease token and, when it is at the
    model, its STARTED attempt; or its failure when its deadline passed. None: leave it (an
    overdue run whose conversation someone else holds; maintain fails it in the lock order)."""
    token = run.lease_token + 1
    plan = RunPlan(run)
    lease = Lease(run_id=run.pk, token=token, control_version=run.control_version, run=run)
    plan.fields.update(
        status=RunStatus.RUNNING,
        lease_token=token,
        lease_expires_at=now + timedelta(seconds=_config("LEASE_SECONDS")),
    )
    plan.events.append(("run.started", {"lease": token}))
    attempt = None
    if run.deadline_at is not None and run.deadline_at <= now:
        if run.conversation_id is not None and not locks.conversation_lock_nowait(
            run.conversation_id
        ):
            return None
        plan.fail(ErrorCode.DEADLINE_EXCEEDED, "The run's deadline passed.")
    elif run.next_node == Node.LOAD or _calls_model(run.next_node):
        plan.fields["next_node"] = Node.MODEL if run.next_node == Node.LOAD else run.next_node
        attempt = _plan_attempt(plan, step=run.step)
    return plan, lease, attempt


def _calls_model(node_name: str) -> bool:
    node = extensions.node(node_name)
    return node is not None and node.calls_model


def _budget_exhausted(*, model_calls: int, step: int, limits: dict) -> str:
    """Why the run may not call the model again, or "" when it may."""
    if model_calls >= limits["max_model_calls"]:
        return f"The run used all {model_calls} model calls it is allowed."
    if step >= limits["max_steps"]:
        return f"The run used all {step} steps it is allowed."
    return ""


def _plan_attempt(plan: RunPlan, *, step: int, attempt_no: int = 1) -> ModelAttempt | None:
    """Plan a STARTED model attempt, recorded before the call and counted against the budget;
    or, when the budget is spent, plan the run's failure (and return None)."""
    model_calls = plan.run.model_calls
    exhausted = _budget_exhausted(
        model_calls=model_calls, step=step, limits=plan.run.release_snapshot["manifest"]["limits"]
    )
    if exhausted:
        plan.fail(ErrorCode.BUDGET_EXHAUSTED, exhausted)
        return None
    plan.fields["model_calls"] = model_calls + 1
    plan.events.append(("model.requested", {"step": step}))
    return ModelAttempt(
        run_id=plan.run.pk, step=step, attempt=attempt_no, status=AttemptStatus.STARTED
    )


def attempts_insert(attempts: list[tuple[ModelAttempt, Lease]]) -> None:
    """Insert STARTED model attempts in one statement; each lease learns its attempt."""
    if not attempts:
        return
    created = timezone.now()
    inserted = _insert(
        ModelAttempt,
        [
            {
                "run": attempt.run_id,
                "step": attempt.step,
                "attempt": attempt.attempt,
                "status": attempt.status,
                "usage": {},
                "error": "",
                "created_at": created,
            }
            for attempt, _lease in attempts
        ],
        returning=("id", "run"),
    )
    run_id = AgentRun._meta.pk.to_python
    attempt_ids = {run_id(run): pk for pk, run in inserted}
    for attempt, lease in attempts:
        attempt.pk = attempt_ids[run_id(attempt.run_id)]
        lease.attempt_id, lease.attempt_no = attempt.pk, attempt.attempt


# The guard of every step commit, in raw SQL: it runs at every step, and the ORM spent more
# time building it (two EXISTS subqueries) than the database spent running it.
GUARDED_UPDATE_SQL = """
UPDATE runs_agentrun SET {assignments}
WHERE id = %s AND status = 'RUNNING' AND lease_token = %s AND control_version = %s
  AND version = %s AND lease_expires_at >= %s
  AND EXISTS (SELECT 1 FROM agentportal_membership ms WHERE ms.user_id = runs_agentrun.account_id
              AND ms.merchant_id = runs_agentrun.merchant_id AND ms.active = %s)
  AND EXISTS (SELECT 1 FROM agentportal_merchant mc WHERE mc.id = runs_agentrun.merchant_id
              AND mc.active = %s)
"""


def locked_run(lease: Lease, fields: dict[str, Any]) -> bool:
    """Lock a run for a step commit with one conditional UPDATE that applies `fields`; the one
    guard against stale writers. True when the worker still holds the run.

    The UPDATE matches only while the run is RUNNING under this lease token, unexpired, and
    control version, unchanged since the worker last wrote it, its merchant active and its
    account still a member; it takes the row's lock on PostgreSQL (SQLite holds its write lock from
    BEGIN). Call inside the transaction that writes the step: when it matches nothing, the
    step must write nothing.
    """
    assignments, params = _assignments(AgentRun, fields)
    params += [_run_pk(lease.run_id), lease.token, lease.control_version, lease.run.version]
    params += [_prepared(AgentRun, "lease_expires_at", timezone.now()), True, True]
    with connection.cursor() as cursor:
        cursor.execute(GUARDED_UPDATE_SQL.format(assignments=assignments), params)
        return cursor.rowcount == 1


# The hot path's statements are written in SQL by hand: the ORM spent longer building them
# than the database spent running them. These helpers keep the values' conversions the ORM's.


def _prepared(model, name: str, value: Any) -> Any:
    """A value as the field `name` of `model` stores it in this database."""
    return model._meta.get_field(name).get_db_prep_save(value, connection)


def _assignments(model, fields: dict[str, Any]) -> tuple[str, list[Any]]:
    """The SET clause of an UPDATE of `model`, with each value prepared by its field."""
    columns = [
        f"{connection.ops.quote_name(model._meta.get_field(name).column)} = %s" for name in fields
    ]
    return ", ".join(columns), [_prepared(model, name, value) for name, value in fields.items()]


def _run_pk(run_id) -> Any:
    return AgentRun._meta.pk.get_db_prep_value(run_id, connection)


def _insert(model, rows: list[dict[str, Any]], *, returning: tuple[str, ...] = ()) -> list[tuple]:
    """One INSERT of `rows` (field name -> value) into `model`'s table; the inserted rows'
    `returning` fields, when asked for (both databases answer RETURNING)."""
    names = list(rows[0])
    model_fields = [model._meta.get_field(name) for name in names]
    quote = connection.ops.quote_name
    columns = ", ".join(quote(f.column) for f in model_fields)
    placeholders = "(" + ", ".join(["%s"] * len(names)) + ")"
    params = [
        f.get_db_prep_save(row[name], connection)
        for row in rows
        for name, f in zip(names, model_fields, strict=True)
    ]
    sql = (
        f"INSERT INTO {quote(model._meta.db_table)} ({columns}) "
        f"VALUES {', '.join([placeholders] * len(rows))}"
    )
    if returning:
        sql += " RETURNING " + ", ".join(quote(model._meta.get_field(n).column) for n in returning)
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return [tuple(row) for row in cursor.fetchall()] if returning else []


def _why_lost(lease: Lease) -> LostRun | AccessRevoked:
    """Why a worker's guarded UPDATE matched nothing: it lost the run, or the run's shop or
    account lost access."""
    current = AgentRun.objects.filter(pk=lease.run_id).first()
    if (
        current is None
        or current.status != RunStatus.RUNNING
        or current.lease_token != lease.token
        or current.control_version != lease.control_version
        or current.version != lease.run.version
        or current.lease_expires_at is None
        or current.lease_expires_at < timezone.now()
    ):
        return LostRun(f"run {lease.run_id} is no longer held by this lease")
    return AccessRevoked(f"run {lease.run_id}: merchant inactive or membership revoked")


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
    # Extra fields of the run's row (a pause: status, snapshot, wait deadline).
    run_fields: dict[str, Any] = field(default_factory=dict)
    # Called with the run inside the transaction, after its row was locked (domain records).
    on_locked: Callable[[AgentRun], None] | None = None


def run_step_commit(*, lease: Lease, commit: StepCommit) -> AgentRun:
    """Commit a step's effects and the next node in one transaction; return the run.

    Raises LostRun or AccessRevoked, with nothing committed, when the worker lost the run.
    """
    [outcome] = runs_step_commit([(lease, commit)])
    if isinstance(outcome, Exception):
        raise outcome
    return outcome


@dataclass
class _PlannedStep:
    lease: Lease
    commit: StepCommit
    plan: RunPlan
    attempt: ModelAttempt | None
    held: bool = False


def runs_step_commit(steps: list[tuple[Lease, StepCommit]]) -> list[AgentRun | Exception]:
    """Commit several runs' steps in one transaction: for each, its run or what stopped it.

    Each run's writes are guarded by its own conditional UPDATE (locked_run's): a run its
    worker lost, or whose access was revoked, commits nothing while the others commit. When
    the next node is the model, its STARTED attempt is recorded in the same commit, so the
    following model call costs no commit of its own. If writing one run's step fails, the
    transaction is rolled back and every step is committed again on its own, so that the
    failure stays that run's; a passing database error is every step's outcome instead.
    """
    now = timezone.now()
    outcomes: list[AgentRun | Exception | None] = [None] * len(steps)
    planned: list[tuple[int, _PlannedStep, dict[str, Any]]] = []
    for index, (lease, commit) in enumerate(steps):
        try:
            planned.append((index, _step_plan(lease, commit, now), _memory_copy(lease)))
        except Exception as error:
            outcomes[index] = error
    try:
        _steps_write([step for _index, step, _copy in planned], now)
    except Exception as error:
        for _index, step, copy in planned:
            _memory_restore(step.lease, step.commit, copy)
        # A passing error (a lock, a deadlock, a lost connection) would only be met again
        # one step at a time: every run goes on from its last commit instead.
        alone = len(planned) > 1 and not database_error_passing(error)
        for index, step, _copy in planned:
            outcomes[index] = runs_step_commit([(step.lease, step.commit)])[0] if alone else error
        return outcomes
    for index, step, _copy in planned:
        outcomes[index] = step.lease.run if step.held else _why_lost(step.lease)
    return outcomes


# What a database error that comes and goes looks like: PostgreSQL's SQLSTATE classes for a
# lost connection, and its codes for serialization failures, deadlocks, lock and statement
# timeouts and a server shutting down; SQLite's busy database.
PASSING_SQLSTATE_PREFIXES = ("08", "40001", "40P01", "55P03", "57014", "57P01")


def database_error_passing(error: BaseException) -> bool:
    """Whether a database error is worth trying again later rather than a bug."""
    if isinstance(error, InterfaceError):
        return True
    if not isinstance(error, OperationalError):
        return False
    sqlstate = getattr(error.__cause__, "sqlstate", None)
    if sqlstate:
        return sqlstate.startswith(PASSING_SQLSTATE_PREFIXES)
    return "database is locked" in str(error) or "database table is locked" in str(error)


ATTEMPT_FINISH_SQL = "UPDATE runs_modelattempt SET {assignments} WHERE id = %s"


def _attempt_finish(attempt_id: int, commit: StepCommit, now) -> None:
    """Record how a model call went, on its STARTED attempt (by hand, like locked_run)."""
    assignments, params = _assignments(
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
        cursor.execute(ATTEMPT_FINISH_SQL.format(assignments=assignments), [*params, attempt_id])


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


def _step_plan(lease: Lease, commit: StepCommit, now) -> _PlannedStep:
    """What a step writes, decided before the transaction."""
    run = lease.run
    plan = RunPlan(run)
    step = run.step + 1 if commit.advance_step else run.step
    plan.fields.update(
        {
            "step": step,
            "next_node": commit.next_node,
            "lease_expires_at": now + timedelta(seconds=_config("LEASE_SECONDS")),
            **commit.run_fields,
        }
    )
    plan.events.extend(commit.events)
    if commit.messages:
        plan.fields["messages"] = [*run.messages, *commit.messages]
    attempt = None
    if commit.fail_with is not None:
        plan.fail(*commit.fail_with)
    elif commit.complete_with is not None:
        plan.events.append(("message.assistant", {"text": commit.complete_with}))
        plan.finish(
            RunStatus.COMPLETED,
            ("run.completed", {"result": commit.complete_with}),
            result=commit.complete_with,
        )
    elif commit.run_fields.get("status", RunStatus.RUNNING) != RunStatus.RUNNING:
        # A pause: the run waits for a person. Waiting does not count against the deadline,
        # which restarts on the resume, so a pause wins over a deadline that just passed.
        pass
    elif run.deadline_at is not None and run.deadline_at <= now:
        plan.fail(ErrorCode.DEADLINE_EXCEEDED, "The run's deadline passed.")
    elif lease.slice_spent():
        # Back to the queue in this same commit; the next claim records the model attempt.
        plan.fields.update(status=RunStatus.QUEUED, lease_expires_at=None)
    elif commit.next_node == Node.MODEL:
        attempt_no = 1 if commit.advance_step else lease.attempt_no + 1
        attempt = _plan_attempt(plan, step=step, attempt_no=attempt_no)
    return _PlannedStep(lease=lease, commit=commit, plan=plan, attempt=attempt)


def _steps_write(planned: list[_PlannedStep], now) -> None:
    """Write the planned steps of runs their workers still hold; mark which ones were.

    Locks in the one order: the conversations of the runs that end (ending a run frees its
    conversation), then the runs, by id.
    """
    with transaction.atomic():
        ending = sorted(
            {step.plan.run.conversation_id for step in planned if step.plan.finished} - {None}
        )
        if ending:
            locks.conversations_lock(ending)
        for step in sorted(planned, key=lambda step: str(step.lease.run_id)):
            step.held = locked_run(step.lease, step.plan.row_fields(now))
        held = [step for step in planned if step.held]
        for step in held:
            commit, lease = step.commit, step.lease
            if commit.attempt_status is not None and lease.attempt_id is not None:
                _attempt_finish(lease.attempt_id, commit, now)
        executions = [execution for step in held for execution in step.commit.tool_executions]
        if executions:
            ToolExecution.objects.bulk_create(executions)
        attempts_insert([(step.attempt, step.lease) for step in held if step.attempt])
        plans_write([step.plan for step in held], now)
        for step in held:
            if step.commit.on_locked is not None:
                step.commit.on_locked(step.lease.run)
        if any(step.plan.fields.get("status") == RunStatus.QUEUED for step in held):
            tick_enqueue()


def _run_update_locked(run: AgentRun, plan: RunPlan, now) -> None:
    """Write a plan, decided by a conditional UPDATE on the status and version read under the
    lock. Call holding the run's lock, inside the transaction."""
    updated = AgentRun.objects.filter(pk=run.pk, status=run.status, version=run.version).update(
        **plan.row_fields(now)
    )
    if updated != 1:
        raise transaction.TransactionManagementError(f"run {run.pk} changed under its lock")
    plans_write([plan], now)


def run_resume_locked(run: AgentRun, *, events: list[tuple[str, dict]], **fields: Any) -> None:
    """Put a waiting run back in the queue after a person answered; its deadline restarts and
    its wait is over. `fields`: what else changes with it (the state snapshot).

    Call holding the run's lock (select_for_update), inside the transaction.
    """
    now = timezone.now()
    limits = run.release_snapshot["manifest"]["limits"]
    plan = RunPlan(run)
    plan.fields.update(
        status=RunStatus.QUEUED,
        deadline_at=now + timedelta(seconds=limits["run_deadline_seconds"]),
        wait_deadline_at=None,
        wait_state=None,
        **fields,
    )
    plan.events.extend(events)
    _run_update_locked(run, plan, now)
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
    """A waiting run now waits for something else (a confirmed plan for its review, a revised
    plan for a new confirmation). Call holding the run's lock, inside the transaction."""
    now = timezone.now()
    plan = RunPlan(run)
    plan.fields.update(wait_fields(run, status=status, wait=wait))
    plan.events.extend(events)
    _run_update_locked(run, plan, now)


def run_snapshot_save_locked(run: AgentRun, *, state_snapshot: dict) -> None:
    """Record a new state of the pending call without touching the run's progress.

    Call holding the run's lock, inside the transaction. The version is left alone on
    purpose: the worker that holds the run will commit its step on top of it.
    """
    AgentRun.objects.filter(pk=run.pk).update(state_snapshot=state_snapshot)
    run.state_snapshot = state_snapshot


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
    them unexpired; the leases it no longer holds."""
    now = timezone.now()
    expires = now + timedelta(seconds=_config("LEASE_SECONDS"))
    lost = []
    with transaction.atomic():
        for lease in leases:
            renewed = AgentRun.objects.filter(
                pk=lease.run_id,
                status=RunStatus.RUNNING,
                lease_token=lease.token,
                control_version=lease.control_version,
                lease_expires_at__gte=now,
            ).update(lease_expires_at=expires)
            if renewed:
                lease.run.lease_expires_at = expires
            else:
                lost.append(lease)
    return lost


def run_unpark(*, run_id) -> bool:
    """Hand a run parked for an operator back to the queue, once its cause was repaired; its
    active time starts again. False when it is not (or no longer) parked."""
    with transaction.atomic():
        run = run_lock(run_id)
        if run.status != RunStatus.RUNNING or run.lease_expires_at != PARKED_UNTIL:
            return False
        now = timezone.now()
        limits = run.release_snapshot["manifest"]["limits"]
        plan = RunPlan(run)
        plan.fields.update(
            status=RunStatus.QUEUED,
            lease_expires_at=None,
            deadline_at=now + timedelta(seconds=limits["run_deadline_seconds"]),
        )
        plan.events.append(("run.unparked", {}))
        _run_update_locked(run, plan, now)
        tick_enqueue()
    return True


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


# --- maintenance ----------------------------------------------------------------------------


def heartbeat_beat(*, name: str = "worker") -> None:
    WorkerHeartbeat.objects.update_or_create(name=name, defaults={"seen_at": timezone.now()})


def leases_expired_requeue() -> int:
    """Runs whose worker vanished go back to the queue (one conditional UPDATE)."""
    with transaction.atomic():
        return AgentRun.objects.filter(
            status=RunStatus.RUNNING, lease_expires_at__lt=timezone.now()
        ).update(
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


WAITING_STATUSES = (RunStatus.WAITING_USER, RunStatus.WAITING_APPROVAL)


def waits_expire() -> int:
    """Fail runs whose clarification or plan nobody answered in time (WAIT_EXPIRED)."""
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
        logger.error("run %s waits with an unusable wait state; left to an operator", run.pk)
        return False
    return True


def run_wait_expire_locked(run: AgentRun) -> bool:
    """Fail a run whose wait is past its deadline; False if it is not (or no longer) due.

    The domain's hooks first settle what was decided in time but not applied yet (a plan
    approved before the deadline whose reconcile task is late): a late task only delays.
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
    """The once-a-minute backstop: sweep what no event announced.

    Each sweep is on its own: one that fails is logged and the others still run. The
    heartbeat comes last, so /healthz reports a worker whose sweeps complete.
    """
    sweeps: list[tuple[str, Callable[[], int]]] = [
        ("requeued", leases_expired_requeue),
        ("deadlines", deadlines_enforce),
        ("waits_expired", waits_expire),
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
        heartbeat_beat()
    return report
