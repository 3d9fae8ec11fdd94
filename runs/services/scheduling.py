"""Claiming runs fairly within each shop's capacity, and the model attempts a claim or a step
records before the model is called."""

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.db import connection, transaction
from django.utils import timezone

from agentportal.models import Merchant
from runs import extensions, locks
from runs.models import AgentRun, AttemptStatus, ErrorCode, ModelAttempt, Node, RunStatus
from runs.services.changes import RunChange, run_changes_write
from runs.services.leases import Lease, lease_expires_at, process_name
from runs.services.statements import (
    CANDIDATES_SQL,
    CLAIM_SHOPS,
    CLAIM_UPDATE_SQL,
    HELD_COUNTS_SQL,
    MERCHANTS_LOCK_SQL,
    NEXT_RUNS_OF_SHOPS_SQL,
    NEXT_RUNS_SQL,
    OCCUPYING_COUNTS_SQL,
    SCHEDULED_SQL,
    assignments,
    prepared,
    rows_insert,
    run_pk,
    shop_ids,
    shop_quotas,
    shops_scheduled,
)


def runs_claim(*, limit: int, processes: int = 1) -> list[Lease]:
    """Claim up to `limit` runs fairly and take their leases; [] when nothing is claimable.

    `processes`: the worker processes sharing the shops. This one then holds at most its
    share of each shop's slots (the capacity over `processes`, rounded up): a process
    executes on one core, and one that took a shop's whole capacity would leave the others
    idle while it ran the shop's backlog alone.

    Shops under their reserved slots first (up to those slots), then the shop scheduled
    longest ago, then its oldest runs, as if the runs were claimed one at a time: the room is
    dealt out among the shops in that order, each within its free capacity, and what a shop
    cannot use goes round again. Up to CLAIM_SHOPS shops are claimed from in one transaction,
    and their Merchant rows' locks make the capacity checks exact across workers.
    """
    leases: list[Lease] = []
    turns = _Turns(dealt_from=timezone.now())
    for _ in range(100):
        room = limit - len(leases)
        with connection.cursor() as cursor:
            cursor.execute(CANDIDATES_SQL, {"now": timezone.now(), "limit": room})
            candidates = [row[0] for row in cursor.fetchall()]
        if not candidates:
            return leases
        # One at a time round the shops: each gets the same, the first ones one more.
        each, more = divmod(room, len(candidates))
        shares = {shop: each + (index < more) for index, shop in enumerate(candidates)}
        turns.deal_round(candidates, rounds=each + (more > 0))
        progress = False
        for start in range(0, len(candidates), CLAIM_SHOPS):
            claimed, failed = _claim_from(
                candidates[start : start + CLAIM_SHOPS],
                turns=turns,
                shares=shares,
                limit=limit - len(leases),
                processes=processes,
            )
            leases += claimed
            progress = progress or bool(claimed or failed)
            if len(leases) >= limit:
                return leases
        if not progress:
            return leases
    return leases


@dataclass
class _Turns:
    """When each shop's last run of a claim was dealt, as if one at a time round all the
    claim's shops, a microsecond apart, on one clock for the whole claim: with the same time
    for all, the shops that got one more would be the first by id again at the next claim;
    with each transaction's own clock, the shops of its first CLAIM_SHOPS would be, and either
    way some shops would run faster than the others for good."""

    dealt_from: datetime
    places: dict[int, int] = field(default_factory=dict)
    # Microseconds dealt so far: a round of the claim is `rounds` times round its shops.
    passed: int = 0
    round_length: int = 0

    def deal_round(self, candidates: list[int], *, rounds: int) -> None:
        self.passed += self.round_length
        self.places = {shop: index for index, shop in enumerate(candidates)}
        self.round_length = rounds * len(candidates)

    def last_dealt(self, shop: int, *, runs: int) -> datetime:
        dealt = self.passed + (runs - 1) * len(self.places) + self.places[shop]
        return self.dealt_from + timedelta(microseconds=dealt)


def _claim_from(
    candidates: list[int],
    *,
    turns: _Turns,
    shares: dict[int, int],
    limit: int,
    processes: int,
) -> tuple[list[Lease], int]:
    """Claim up to its share of runs from each shop in `candidates`, in their order, and
    `limit` in all; the leases, and how many of the runs found had to be failed instead (past
    their deadline or out of budget). Each shop claimed from is scheduled at its turn."""
    with transaction.atomic():
        now = timezone.now()
        ids = shop_ids(candidates)
        # Lock first and count after: a count taken in the locking statement would be read
        # from before the wait on PostgreSQL and miss the claim that held the lock.
        merchants = {
            merchant.pk: merchant
            for merchant in Merchant.objects.raw(
                MERCHANTS_LOCK_SQL.format(lock=locks.row_lock_clause(no_key=True)), ids
            )
        }
        with connection.cursor() as cursor:
            cursor.execute(OCCUPYING_COUNTS_SQL, ids)
            occupied = dict(cursor.fetchall())
            held_here = {}
            if processes > 1:
                cursor.execute(HELD_COUNTS_SQL, [*ids, process_name()])
                held_here = dict(cursor.fetchall())
        quotas = {}
        for merchant_id in candidates:
            merchant = merchants.get(merchant_id)
            if merchant is not None and merchant.active:
                quotas[merchant_id] = min(shares[merchant_id], limit - sum(quotas.values()))
        found = _next_runs(quotas, now)
        claims: list[tuple[RunChange, Lease, ModelAttempt | None]] = []
        scheduled = {}
        for merchant_id, runs in found.items():
            merchant = merchants[merchant_id]
            free = _free_slots(merchant, occupied.get(merchant_id, 0))
            if processes > 1:
                share = -(-merchant.max_running_runs // processes)
                free = min(free, share - held_here.get(merchant_id, 0))
            taken = [
                claim
                for run in _within_capacity(runs, free)
                if (claim := _claim_change(run, now)) is not None
            ]
            for change, _lease, _attempt in taken:
                change.run.merchant = merchant
            claims += taken
            if taken:
                scheduled[merchant_id] = turns.last_dealt(merchant_id, runs=len(taken))
        if not claims:
            return [], 0
        _claims_update([change for change, _lease, _attempt in claims], now)
        with connection.cursor() as cursor:
            cursor.execute(SCHEDULED_SQL, shops_scheduled(scheduled))
        run_changes_write([change for change, _lease, _attempt in claims], now)
        attempts = []
        for change, lease, attempt in claims:
            if attempt is None:
                continue
            run = change.run
            if run.model_calls > 1:
                # A STARTED attempt left by a lost worker may or may not have reached the model:
                # it counts against the budget, and the model is asked again.
                ModelAttempt.objects.filter(
                    run=run, step=run.step, status=AttemptStatus.STARTED
                ).update(status=AttemptStatus.UNKNOWN, finished_at=now)
                attempt.attempt = ModelAttempt.objects.filter(run=run, step=run.step).count() + 1
            attempts.append((attempt, lease))
        attempts_insert(attempts)
        leases = [lease for change, lease, _attempt in claims if not change.finished]
        return leases, len(claims) - len(leases)


def _next_runs(quotas: dict[int, int], now) -> dict[int, list[AgentRun]]:
    """Each shop's next claimable runs (NEXT_RUNS_SQL), up to its quota, in the order of
    `quotas`; locked, passing over those another transaction holds."""
    moment = {"now": prepared(AgentRun, "lease_expires_at", now)}
    lock = locks.row_lock_clause(skip_locked=True)
    found: dict[int, list[AgentRun]] = {shop: [] for shop, quota in quotas.items() if quota > 0}
    if connection.vendor == "postgresql":
        statement = NEXT_RUNS_OF_SHOPS_SQL.format(lock=lock)
        for run in AgentRun.objects.raw(statement, {**moment, **shop_quotas(quotas)}):
            found[run.merchant_id].append(run)
        return found
    for shop in found:
        params = {**moment, "merchant": shop, "limit": quotas[shop]}
        found[shop] = list(AgentRun.objects.raw(NEXT_RUNS_SQL.format(lock=lock), params))
    return found


def _free_slots(merchant: Merchant, occupied: int) -> int:
    free = merchant.max_running_runs - occupied
    if occupied < merchant.reserved_slots:
        # Its turn before the others' is only for its reserved slots.
        free = min(free, merchant.reserved_slots - occupied)
    return free


def _claims_update(changes: list[RunChange], now) -> None:
    """Write the claimed runs' rows: one statement for each set of fields written (sent
    together), each row guarded by the status and lease token it was read with."""
    by_clause: dict[str, list[list]] = {}
    for change in changes:
        clause, params = assignments(AgentRun, change.row_fields(now))
        by_clause.setdefault(clause, []).append(
            [*params, run_pk(change.run.pk), change.run.status, change.run.lease_token]
        )
    with connection.cursor() as cursor:
        for clause, rows in by_clause.items():
            cursor.executemany(CLAIM_UPDATE_SQL.format(assignments=clause), rows)
            if cursor.rowcount != len(rows):
                raise transaction.TransactionManagementError(
                    f"{len(rows) - cursor.rowcount} claimed runs changed under their locks"
                )


def _within_capacity(found: list[AgentRun], free: int) -> list[AgentRun]:
    """The claimable runs a claim may take: every one whose expired lease it takes over (it
    holds its slot already: taking it over replaces, never adds), and queued ones while a
    slot is free."""
    taken = []
    for run in found:
        if run.status == RunStatus.RUNNING:
            taken.append(run)
        elif free > 0:
            taken.append(run)
            free -= 1
    return taken


def _claim_change(run: AgentRun, now) -> tuple[RunChange, Lease, ModelAttempt | None] | None:
    """What claiming a run writes: RUNNING under a new lease token and, when it is at the
    model, its STARTED attempt; or its failure when its deadline passed. None: leave it (an
    overdue run whose conversation someone else holds; maintain fails it in the lock order)."""
    token = run.lease_token + 1
    change = RunChange(run)
    lease = Lease(run_id=run.pk, token=token, control_version=run.control_version, run=run)
    change.fields.update(
        status=RunStatus.RUNNING,
        lease_token=token,
        lease_expires_at=lease_expires_at(now),
        lease_holder=process_name(),
    )
    change.events.append(("run.started", {"lease": token}))
    attempt = None
    if run.deadline_at is not None and run.deadline_at <= now:
        if run.conversation_id is not None and not locks.conversation_lock_nowait(
            run.conversation_id
        ):
            return None
        change.fail(ErrorCode.DEADLINE_EXCEEDED, "The run's deadline passed.")
    elif run.next_node == Node.LOAD or _calls_model(run.next_node):
        change.fields["next_node"] = Node.MODEL if run.next_node == Node.LOAD else run.next_node
        attempt = attempt_add(change, step=run.step)
    return change, lease, attempt


def _calls_model(node_name: str) -> bool:
    node = extensions.node(node_name)
    return node is not None and node.calls_model


# --- model attempts ---------------------------------------------------------------------------


def _budget_exhausted(*, model_calls: int, step: int, limits: dict) -> str:
    """Why the run may not call the model again, or "" when it may."""
    if model_calls >= limits["max_model_calls"]:
        return f"The run used all {model_calls} model calls it is allowed."
    if step >= limits["max_steps"]:
        return f"The run used all {step} steps it is allowed."
    return ""


def attempt_add(change: RunChange, *, step: int, attempt_no: int = 1) -> ModelAttempt | None:
    """Add a STARTED model attempt to a change, recorded before the call and counted against
    the budget; or, when the budget is spent, make the change the run's failure (and return
    None)."""
    model_calls = change.run.model_calls
    exhausted = _budget_exhausted(
        model_calls=model_calls,
        step=step,
        limits=change.run.release_snapshot["manifest"]["limits"],
    )
    if exhausted:
        change.fail(ErrorCode.BUDGET_EXHAUSTED, exhausted)
        return None
    change.fields["model_calls"] = model_calls + 1
    change.events.append(("model.requested", {"step": step}))
    return ModelAttempt(
        run_id=change.run.pk, step=step, attempt=attempt_no, status=AttemptStatus.STARTED
    )


def attempts_insert(attempts: list[tuple[ModelAttempt, Lease]]) -> None:
    """Insert STARTED model attempts in one statement; each lease learns its attempt."""
    if not attempts:
        return
    created = timezone.now()
    inserted = rows_insert(
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
