"""The hand-written SQL of the hot path (claim, step commit), each rule stated once.

The claim and the step commit run at every step, and the ORM spent longer building their
statements than the database spent running them, so they are written here by hand, built from
the models' tables and columns and the RunStatus values. Where a rule is also needed as an ORM
query, its Q-object twin sits next to its SQL form (tests/runs/test_statements.py holds them to
the same rows on both databases).

Every statement's text is the same at every call (PostgreSQL prepares them, see
AGENTPORTAL_PG_PREPARED_STATEMENTS): what varies goes in the parameters, and the only parts
filled in per call are the SET clause (the same for the same fields) and the lock clause (the
same for the same database).
"""

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from django.db import connection
from django.db.models import Count, Exists, IntegerField, OuterRef, Q, Subquery

from agentportal.models import Membership, Merchant
from runs.models import AgentRun, AttemptStatus, ModelAttempt, RunStatus


def _quoted(name: str) -> str:
    return f'"{name}"'


def _table(model) -> str:
    return _quoted(model._meta.db_table)


def _column(model, name: str, alias: str = "") -> str:
    """A field's column, qualified by `alias` (a table alias or a table name) when given."""
    column = _quoted(model._meta.get_field(name).column)
    return f"{alias}.{column}" if alias else column


def _value(status: str) -> str:
    return f"'{status}'"


RUNS = _table(AgentRun)
MERCHANTS = _table(Merchant)
MEMBERSHIPS = _table(Membership)
ATTEMPTS = _table(ModelAttempt)


def _run(name: str, alias: str = "") -> str:
    return _column(AgentRun, name, alias)


# --- the rules, each in its SQL form and its ORM form ------------------------------------------


def occupying_sql(alias: str = "") -> str:
    """A run holding one of its shop's capacity slots: RUNNING, its lease expired or not. It
    holds the slot until it is handed back or finishes; a claim that takes over an expired
    lease replaces it, never adds one (its worker may still be in a step)."""
    return f"{_run('status', alias)} = {_value(RunStatus.RUNNING)}"


def occupying() -> Q:
    """The ORM twin of occupying_sql()."""
    return Q(status=RunStatus.RUNNING)


def lease_expired_sql(alias: str = "", now: str = "%(now)s") -> str:
    """A run whose worker vanished: RUNNING under a lease that expired before `now`."""
    return (
        f"{_run('status', alias)} = {_value(RunStatus.RUNNING)}"
        f" AND {_run('lease_expires_at', alias)} < {now}"
    )


def lease_expired(now) -> Q:
    """The ORM twin of lease_expired_sql()."""
    return Q(status=RunStatus.RUNNING, lease_expires_at__lt=now)


def claimable_sql(alias: str = "", now: str = "%(now)s") -> str:
    """A run a worker may claim: QUEUED, or RUNNING under an expired lease."""
    return (
        f"({_run('status', alias)} = {_value(RunStatus.QUEUED)}"
        f" OR ({lease_expired_sql(alias, now)}))"
    )


def claimable(now) -> Q:
    """The ORM twin of claimable_sql()."""
    return Q(status=RunStatus.QUEUED) | lease_expired(now)


def held_by_sql(alias: str = "") -> str:
    """The worker still holds the run: it is RUNNING under the worker's lease token and
    control version, and the lease has not expired. Parameters: held_by_params()."""
    return (
        f"{_run('id', alias)} = %s AND {_run('status', alias)} = {_value(RunStatus.RUNNING)}"
        f" AND {_run('lease_token', alias)} = %s AND {_run('control_version', alias)} = %s"
        f" AND {_run('lease_expires_at', alias)} >= %s"
    )


def held_by_params(lease, now) -> list[Any]:
    return [
        run_pk(lease.run_id),
        lease.token,
        lease.control_version,
        prepared(AgentRun, "lease_expires_at", now),
    ]


def held_by(lease, now) -> Q:
    """The ORM twin of held_by_sql()."""
    return Q(
        pk=lease.run_id,
        status=RunStatus.RUNNING,
        lease_token=lease.token,
        control_version=lease.control_version,
        lease_expires_at__gte=now,
    )


def held_by_row(run, lease, now) -> bool:
    """held_by() read off a run row the caller loaded (a model or a named row with pk,
    status, lease_token, control_version and lease_expires_at)."""
    return (
        run.pk == lease.run_id
        and run.status == RunStatus.RUNNING
        and run.lease_token == lease.token
        and run.control_version == lease.control_version
        and run.lease_expires_at is not None
        and run.lease_expires_at >= now
    )


def access_sql(table: str) -> str:
    """The run's merchant is active and its account still an active member of it. `table`
    names the run's row (an alias or the table). Parameters: [True, True]."""
    membership = (
        f"SELECT 1 FROM {MEMBERSHIPS} ms"
        f" WHERE {_column(Membership, 'user', 'ms')} = {_run('account', table)}"
        f" AND {_column(Membership, 'merchant', 'ms')} = {_run('merchant', table)}"
        f" AND {_column(Membership, 'active', 'ms')} = %s"
    )
    merchant = (
        f"SELECT 1 FROM {MERCHANTS} mc"
        f" WHERE {_column(Merchant, 'id', 'mc')} = {_run('merchant', table)}"
        f" AND {_column(Merchant, 'active', 'mc')} = %s"
    )
    return f"EXISTS ({membership}) AND EXISTS ({merchant})"


def access() -> Q:
    """The ORM twin of access_sql()."""
    member = Membership.objects.filter(
        user=OuterRef("account"), merchant=OuterRef("merchant"), active=True
    )
    return Q(Exists(member), merchant__active=True)


def occupying_count() -> Subquery:
    """A merchant's runs holding a capacity slot (occupying()), as a subquery on its row."""
    return Subquery(
        AgentRun.objects.filter(occupying(), merchant=OuterRef("pk"))
        .order_by()
        .values("merchant")
        .annotate(count=Count("pk"))
        .values("count"),
        output_field=IntegerField(),
    )


# --- the statements -----------------------------------------------------------------------------


def columns(model, alias: str = "") -> str:
    """A model's columns by name rather than `*`: the result of a statement PostgreSQL has
    prepared must keep its shape when a migration adds a column."""
    prefix = f"{alias}." if alias else ""
    return ", ".join(f"{prefix}{_quoted(field.column)}" for field in model._meta.concrete_fields)


_M_ID = _column(Merchant, "id", "m")
OCCUPYING_OF_MERCHANT_SQL = (
    f"(SELECT COUNT(*) FROM {RUNS} r WHERE {_run('merchant', 'r')} = {_M_ID}"
    f" AND {occupying_sql('r')})"
)
# How many shops one claim's transaction locks and claims from. The statements over those shops
# take exactly this many ids (repeated to fill), so that their text is the same at every call.
CLAIM_SHOPS = 8
_SHOP_IDS = ", ".join(["%s"] * CLAIM_SHOPS)

# Runs before every claim: shops with a queued run and a free slot, or with an expired lease
# to take over. Shops under their reserved slots first, then the one scheduled longest ago;
# as many as the claim has room for runs (each may get one).
CANDIDATES_SQL = f"""
SELECT {_M_ID} FROM {MERCHANTS} m
WHERE {_column(Merchant, "active", "m")}
  AND (EXISTS (SELECT 1 FROM {RUNS} r WHERE {_run("merchant", "r")} = {_M_ID}
               AND {lease_expired_sql("r")})
       OR (EXISTS (SELECT 1 FROM {RUNS} r WHERE {_run("merchant", "r")} = {_M_ID}
                   AND {_run("status", "r")} = {_value(RunStatus.QUEUED)})
           AND {OCCUPYING_OF_MERCHANT_SQL} < {_column(Merchant, "max_running_runs", "m")}))
ORDER BY CASE WHEN {OCCUPYING_OF_MERCHANT_SQL} < {_column(Merchant, "reserved_slots", "m")}
              THEN 0 ELSE 1 END,
         {_column(Merchant, "last_scheduled_at", "m")} IS NOT NULL,
         {_column(Merchant, "last_scheduled_at", "m")}, {_M_ID}
LIMIT %(limit)s
"""

# The claim's statements ({lock}: runs.locks.row_lock_clause()). The shops' rows are locked
# in the order of their ids, the one order every claim takes them in.
MERCHANTS_LOCK_SQL = (
    f"SELECT {columns(Merchant)} FROM {MERCHANTS}"
    f" WHERE {_column(Merchant, 'id')} IN ({_SHOP_IDS}) ORDER BY {_column(Merchant, 'id')} {{lock}}"
)
OCCUPYING_COUNTS_SQL = (
    f"SELECT {_run('merchant')}, COUNT(*) FROM {RUNS}"
    f" WHERE {_run('merchant')} IN ({_SHOP_IDS}) AND {occupying_sql()} GROUP BY {_run('merchant')}"
)
# The runs of each shop this process holds (parameters: the shop ids, then its lease holder).
HELD_COUNTS_SQL = (
    f"SELECT {_run('merchant')}, COUNT(*) FROM {RUNS}"
    f" WHERE {_run('merchant')} IN ({_SHOP_IDS}) AND {occupying_sql()}"
    f" AND {_run('lease_holder')} = %s GROUP BY {_run('merchant')}"
)
# Expired leases first: taking one over needs no free slot, and queued runs must not crowd
# it out of the claim's limit.
NEXT_RUNS_SQL = (
    f"SELECT {columns(AgentRun, 'r')} FROM {RUNS} r"
    f" WHERE {_run('merchant', 'r')} = %(merchant)s AND {claimable_sql('r')}"
    f" ORDER BY CASE WHEN {occupying_sql('r')} THEN 0 ELSE 1 END, {_run('created_at', 'r')}"
    f" LIMIT %(limit)s {{lock}}"
)
# PostgreSQL's form of NEXT_RUNS_SQL for all of a claim's shops at once: one round trip rather
# than one per shop (SQLite answers in-process, where a statement per shop costs nothing).
# Parameters: now, and shop_i, quota_i for i below CLAIM_SHOPS (a quota of 0 fills the list).
_SHOP_QUOTAS = ", ".join(
    f"({index}, CAST(%(shop_{index})s AS bigint), CAST(%(quota_{index})s AS bigint))"
    for index in range(CLAIM_SHOPS)
)
NEXT_RUNS_OF_SHOPS_SQL = (
    f"SELECT {columns(AgentRun, 'r')} FROM (VALUES {_SHOP_QUOTAS}) AS s(position, shop, quota)"
    f" CROSS JOIN LATERAL (SELECT {columns(AgentRun, 'q')} FROM {RUNS} q"
    f" WHERE {_run('merchant', 'q')} = s.shop AND {claimable_sql('q')}"
    f" ORDER BY CASE WHEN {occupying_sql('q')} THEN 0 ELSE 1 END, {_run('created_at', 'q')}"
    f" LIMIT s.quota {{lock}}) r"
    f" ORDER BY s.position, CASE WHEN {occupying_sql('r')} THEN 0 ELSE 1 END,"
    f" {_run('created_at', 'r')}"
)
CLAIM_UPDATE_SQL = (
    f"UPDATE {RUNS} SET {{assignments}}"
    f" WHERE {_run('id')} = %s AND {_run('status')} = %s AND {_run('lease_token')} = %s"
)
# Each claimed shop's turn: when its last run of the claim was dealt (parameters: shop_i,
# at_i for i below CLAIM_SHOPS, the list filled by repeating the last pair, then the ids).
_SCHEDULED_AT = " ".join(["WHEN %s THEN %s"] * CLAIM_SHOPS)
SCHEDULED_SQL = (
    f"UPDATE {MERCHANTS} SET {_column(Merchant, 'last_scheduled_at')} ="
    f" CASE {_column(Merchant, 'id')} {_SCHEDULED_AT} END"
    f" WHERE {_column(Merchant, 'id')} IN ({_SHOP_IDS})"
)


def shop_quotas(quotas: dict[int, int]) -> dict[str, int]:
    """NEXT_RUNS_OF_SHOPS_SQL's parameters for up to CLAIM_SHOPS shops (shop id -> quota)."""
    if len(quotas) > CLAIM_SHOPS:
        raise ValueError(f"a claim takes up to {CLAIM_SHOPS} shops, not {len(quotas)}")
    filled = list(quotas.items()) + [(0, 0)] * (CLAIM_SHOPS - len(quotas))
    params = {}
    for index, (shop, quota) in enumerate(filled):
        params[f"shop_{index}"], params[f"quota_{index}"] = shop, quota
    return params


def shops_scheduled(turns: dict[int, Any]) -> list[Any]:
    """SCHEDULED_SQL's parameters for up to CLAIM_SHOPS shops (shop id -> its turn)."""
    pairs = [[shop, prepared(Merchant, "last_scheduled_at", at)] for shop, at in turns.items()]
    pairs += [pairs[-1]] * (CLAIM_SHOPS - len(pairs))
    return [value for pair in pairs for value in pair] + shop_ids(list(turns))


def shop_ids(ids: list[int]) -> list[int]:
    """Up to CLAIM_SHOPS shop ids as the claim's statements take them: sorted, and the last
    repeated to fill the list."""
    ordered = sorted(ids)
    if not 0 < len(ordered) <= CLAIM_SHOPS:
        raise ValueError(f"a claim takes 1 to {CLAIM_SHOPS} shops, not {len(ordered)}")
    return ordered + [ordered[-1]] * (CLAIM_SHOPS - len(ordered))


# The guard of every step commit: the worker still holds the run (held_by_sql), the run is
# unchanged since the worker last wrote it, and its shop and account still have access.
# Parameters: held_by_params(), the version, True, True.
GUARDED_UPDATE_SQL = (
    f"UPDATE {RUNS} SET {{assignments}}"
    f" WHERE {held_by_sql()} AND {_run('version')} = %s AND {access_sql(RUNS)}"
)

# An attempt's outcome is recorded once: only a STARTED attempt takes one.
ATTEMPT_FINISH_SQL = (
    f"UPDATE {ATTEMPTS} SET {{assignments}} WHERE {_column(ModelAttempt, 'id')} = %s"
    f" AND {_column(ModelAttempt, 'status')} = {_value(AttemptStatus.STARTED)}"
)


# --- helpers that keep the values' conversions the ORM's ------------------------------------


def prepared(model, name: str, value: Any) -> Any:
    """A value as the field `name` of `model` stores it in this database."""
    return model._meta.get_field(name).get_db_prep_save(value, connection)


def assignments(model, fields: dict[str, Any]) -> tuple[str, list[Any]]:
    """The SET clause of an UPDATE of `model`, with each value prepared by its field."""
    clause = [
        f"{connection.ops.quote_name(model._meta.get_field(name).column)} = %s" for name in fields
    ]
    return ", ".join(clause), [prepared(model, name, value) for name, value in fields.items()]


@contextmanager
def pipelined() -> Iterator[None]:
    """Send the block's statements without waiting for each answer, and take all the answers
    at its end: on PostgreSQL one round trip for all of them (psycopg's pipeline mode) rather
    than one each. A statement's rowcount is known only after the block, and its error is
    raised at the block's end. SQLite answers in-process: there, each runs as it comes."""
    if connection.vendor != "postgresql":
        yield
        return
    connection.ensure_connection()
    with connection.connection.pipeline():
        yield


def run_pk(run_id) -> Any:
    return AgentRun._meta.pk.get_db_prep_value(run_id, connection)


def rows_insert(
    model, rows: list[dict[str, Any]], *, returning: tuple[str, ...] = ()
) -> list[tuple]:
    """One INSERT of `rows` (field name -> value) into `model`'s table; the inserted rows'
    `returning` fields, when asked for (both databases answer RETURNING).

    On PostgreSQL the values go as one array a column (`unnest`), so that the statement's text
    is the same for any number of rows: parsed once and prepared, where a VALUES list of N rows
    is a new statement, parsed by the driver and planned by the server, for every N."""
    names = list(rows[0])
    model_fields = [model._meta.get_field(name) for name in names]
    quote = connection.ops.quote_name
    insert = (
        f"INSERT INTO {quote(model._meta.db_table)}"
        f" ({', '.join(quote(f.column) for f in model_fields)})"
    )
    if connection.vendor == "postgresql":
        arrays = ", ".join(f"%s::{f.db_type(connection)}[]" for f in model_fields)
        sql = f"{insert} SELECT * FROM unnest({arrays})"
        params = [
            [f.get_db_prep_save(row[name], connection) for row in rows]
            for name, f in zip(names, model_fields, strict=True)
        ]
    else:
        placeholders = "(" + ", ".join(["%s"] * len(names)) + ")"
        sql = f"{insert} VALUES {', '.join([placeholders] * len(rows))}"
        params = [
            f.get_db_prep_save(row[name], connection)
            for row in rows
            for name, f in zip(names, model_fields, strict=True)
        ]
    if returning:
        sql += " RETURNING " + ", ".join(quote(model._meta.get_field(n).column) for n in returning)
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return [tuple(row) for row in cursor.fetchall()] if returning else []
