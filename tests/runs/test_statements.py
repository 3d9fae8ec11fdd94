"""The hand-written SQL of the hot path and its ORM twins select the same rows (on SQLite and,
with DATABASE_URL, on PostgreSQL), on a mix of runs of several shops: queued, running under a
live or an expired lease, waiting, finished; a shop deactivated; a customer revoked."""

import itertools
from datetime import timedelta
from types import SimpleNamespace

import pytest
from django.db import connection
from django.db.models import Case, Exists, F, OuterRef, Q, Value, When
from django.db.models.functions import Coalesce
from django.utils import timezone

from agentportal.models import Membership, Merchant
from runs.models import AgentRun, RunEvent, RunStatus
from runs.services import statements
from runs.services.statements import prepared
from tests import factories

pytestmark = pytest.mark.django_db

_customers = itertools.count(1)


def _run(merchant: Merchant, status: str, *, lease: timedelta | None = None, **fields):
    """A run of its own customer in `status`, its lease expiring `lease` from now."""
    customer = factories.user_create(f"statements-{next(_customers)}", merchant=merchant)
    run = factories.run_queue(customer=customer, merchant=merchant, message="Where is my order?")
    expires = timezone.now() + lease if lease is not None else None
    AgentRun.objects.filter(pk=run.pk).update(status=status, lease_expires_at=expires, **fields)
    run.refresh_from_db()
    return run


@pytest.fixture
def mix():
    live, expired = timedelta(minutes=5), -timedelta(minutes=5)
    shops = {
        "busy": factories.merchant_create(max_running_runs=2),
        "reserved": factories.merchant_create(reserved_slots=2, max_running_runs=3),
        "full": factories.merchant_create(max_running_runs=1),
        "idle": factories.merchant_create(),
        "closed": factories.merchant_create(),
    }
    runs = [
        _run(shops["busy"], RunStatus.QUEUED),
        _run(shops["busy"], RunStatus.QUEUED),
        _run(shops["busy"], RunStatus.RUNNING, lease=live, lease_token=1),
        _run(shops["busy"], RunStatus.RUNNING, lease=expired, lease_token=2),
        _run(shops["busy"], RunStatus.WAITING_USER),
        _run(shops["busy"], RunStatus.COMPLETED),
        _run(shops["reserved"], RunStatus.QUEUED),
        _run(shops["reserved"], RunStatus.RUNNING, lease=live, lease_token=1),
        _run(shops["reserved"], RunStatus.WAITING_APPROVAL),
        _run(shops["full"], RunStatus.QUEUED),
        _run(shops["full"], RunStatus.RUNNING, lease=live, lease_token=3, control_version=2),
        _run(shops["idle"], RunStatus.FAILED),
        _run(shops["idle"], RunStatus.RUNNING, lease=expired, lease_token=1),
        _run(shops["closed"], RunStatus.QUEUED),
        _run(shops["closed"], RunStatus.RUNNING, lease=live, lease_token=1),
    ]
    revoked = _run(shops["busy"], RunStatus.RUNNING, lease=live, lease_token=4)
    Membership.objects.filter(user_id=revoked.account_id).update(active=False)
    Merchant.objects.filter(pk=shops["closed"].pk).update(active=False)
    return SimpleNamespace(shops=shops, runs=[*runs, revoked], now=timezone.now())


def _ids(sql: str, params) -> set:
    to_python = AgentRun._meta.pk.to_python
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return {to_python(row[0]) for row in cursor.fetchall()}


def _orm(q) -> set:
    return set(AgentRun.objects.filter(q).values_list("pk", flat=True))


def _moment(now) -> dict:
    return {"now": prepared(AgentRun, "lease_expires_at", now)}


RUN_IDS = f'SELECT r."id" FROM {statements.RUNS} r WHERE '


@pytest.mark.parametrize(
    ("sql", "orm"),
    [
        (lambda alias: statements.occupying_sql(alias), lambda now: statements.occupying()),
        (statements.lease_expired_sql, statements.lease_expired),
        (statements.claimable_sql, statements.claimable),
    ],
    ids=["occupying", "lease_expired", "claimable"],
)
def test_a_run_condition_and_its_orm_twin_select_the_same_runs(mix, sql, orm):
    # when
    by_sql = _ids(RUN_IDS + sql("r"), _moment(mix.now))
    by_orm = _orm(orm(mix.now))

    # then: the same runs, and neither none nor all of them
    assert by_sql == by_orm
    assert 0 < len(by_sql) < len(mix.runs)


def test_access_and_its_orm_twin_select_the_same_runs(mix):
    by_sql = _ids(RUN_IDS + statements.access_sql("r"), [True, True])
    assert by_sql == _orm(statements.access())
    assert 0 < len(by_sql) < len(mix.runs)


def _leases(runs):
    """For each run, the lease its worker would hold, and leases it no longer holds."""
    for run in runs:
        held = SimpleNamespace(
            run_id=run.pk, token=run.lease_token, control_version=run.control_version, run=run
        )
        yield held
        yield SimpleNamespace(**{**vars(held), "token": run.lease_token + 1})
        yield SimpleNamespace(**{**vars(held), "control_version": run.control_version + 1})


def test_held_by_and_its_orm_twin_agree_on_every_lease(mix):
    held = 0
    for lease in _leases(mix.runs):
        # when
        by_sql = _ids(
            f'SELECT "id" FROM {statements.RUNS} WHERE {statements.held_by_sql()}',
            statements.held_by_params(lease, mix.now),
        )
        by_orm = _orm(statements.held_by(lease, mix.now))
        by_row = {
            run.pk
            for run in AgentRun.objects.filter(pk=lease.run_id)
            if statements.held_by_row(run, lease, mix.now)
        }

        # then
        assert by_sql == by_orm == by_row, lease
        held += len(by_sql)
    live = statements.occupying() & ~statements.lease_expired(mix.now)
    assert held == len(_orm(live))


def test_the_guarded_update_matches_exactly_the_runs_held_unchanged_with_access(mix):
    outcomes = set()
    for lease in _leases(mix.runs):
        # given what the ORM says the guard should let through
        expected = AgentRun.objects.filter(
            statements.held_by(lease, mix.now),
            statements.access(),
            version=lease.run.version,
        ).exists()
        clause, params = statements.assignments(AgentRun, {"updated_at": mix.now})

        # when
        with connection.cursor() as cursor:
            cursor.execute(
                statements.GUARDED_UPDATE_SQL.format(assignments=clause),
                [
                    *params,
                    *statements.held_by_params(lease, mix.now),
                    lease.run.version,
                    True,
                    True,
                ],
            )
            matched = cursor.rowcount == 1

        # then
        assert matched == expected, lease
        outcomes.add(matched)
    assert outcomes == {True, False}


def test_the_occupied_slots_count_and_its_orm_twin_count_the_same(mix):
    counted = dict(
        Merchant.objects.annotate(
            running=Coalesce(statements.occupying_count(), Value(0))
        ).values_list("pk", "running")
    )
    shops = sorted(counted)
    for start in range(0, len(shops), statements.CLAIM_SHOPS):
        ids = shops[start : start + statements.CLAIM_SHOPS]
        with connection.cursor() as cursor:
            cursor.execute(statements.OCCUPYING_COUNTS_SQL, statements.shop_ids(ids))
            found = dict(cursor.fetchall())
        assert {pk: found.get(pk, 0) for pk in ids} == {pk: counted[pk] for pk in ids}
    # the revoked customer's run still counts, and so does the one whose lease expired: its
    # worker may still be in a step, and a claim that takes it over replaces it
    assert counted[mix.shops["busy"].pk] == 3


def test_the_claim_candidates_are_the_shops_the_orm_finds_with_room_and_claimable_runs(mix):
    # given the candidates' rule in the ORM
    def runs(condition):
        return Exists(AgentRun.objects.filter(condition, merchant=OuterRef("pk")))

    expected = (
        Merchant.objects.filter(active=True)
        .annotate(occupied=Coalesce(statements.occupying_count(), Value(0)))
        .filter(
            Q(runs(statements.lease_expired(mix.now)))
            | Q(runs(Q(status=RunStatus.QUEUED)), occupied__lt=F("max_running_runs"))
        )
    )

    # when
    with connection.cursor() as cursor:
        cursor.execute(statements.CANDIDATES_SQL, {**_moment(mix.now), "limit": 100})
        candidates = [row[0] for row in cursor.fetchall()]

    # then: the same shops, the one under its reserved slots first
    assert set(candidates) == set(expected.values_list("pk", flat=True))
    assert candidates[0] == mix.shops["reserved"].pk
    assert mix.shops["full"].pk not in candidates
    assert mix.shops["closed"].pk not in candidates


def test_the_next_runs_of_a_shop_are_its_expired_leases_then_its_queued_runs_oldest_first(mix):
    for merchant in mix.shops.values():
        runs = AgentRun.objects.raw(
            statements.NEXT_RUNS_SQL.format(lock=""),
            {"merchant": merchant.pk, "limit": 10, **_moment(mix.now)},
        )
        expected = (
            AgentRun.objects.filter(statements.claimable(mix.now), merchant=merchant)
            .annotate(queued=Case(When(statements.occupying(), then=0), default=1))
            .order_by("queued", "created_at")
        )
        assert [run.pk for run in runs] == list(expected.values_list("pk", flat=True))


def test_the_next_runs_of_several_shops_in_one_statement_are_each_shops_next_runs(mix):
    if connection.vendor != "postgresql":
        pytest.skip("SQLite claims from each shop with a statement of its own")
    # given a quota for each shop, one of them none
    quotas = {mix.shops[name].pk: 1 for name in ("full", "idle", "closed")}
    quotas |= {mix.shops["busy"].pk: 3, mix.shops["reserved"].pk: 0}
    moment = _moment(mix.now)

    # when
    together = AgentRun.objects.raw(
        statements.NEXT_RUNS_OF_SHOPS_SQL.format(lock=""),
        {**moment, **statements.shop_quotas(quotas)},
    )

    # then: the same runs as each shop's own statement, in the shops' order
    expected = [
        run.pk
        for shop, quota in quotas.items()
        for run in AgentRun.objects.raw(
            statements.NEXT_RUNS_SQL.format(lock=""),
            {**moment, "merchant": shop, "limit": quota},
        )
    ]
    assert [run.pk for run in together] == expected
    assert len(expected) == 6


@pytest.mark.parametrize("count", [1, 3])
def test_rows_insert_writes_each_row_as_the_orm_reads_it_back(count):
    # given: a run, and events of every kind of value (text, JSON with nesting and null, time)
    merchant = factories.merchant_create()
    run = _run(merchant, RunStatus.QUEUED)
    now = timezone.now()
    rows = [
        {
            "run": run.pk,
            "seq": 100 + index,
            "type": f"test.{index}",
            "data": {"index": index, "nested": {"list": [1, None, "ü"]}, "none": None},
            "created_at": now + timedelta(seconds=index),
        }
        for index in range(count)
    ]

    # when
    returned = statements.rows_insert(RunEvent, rows, returning=("seq", "type"))

    # then
    assert sorted(returned) == [(100 + index, f"test.{index}") for index in range(count)]
    stored = RunEvent.objects.filter(run=run, seq__gte=100).order_by("seq")
    assert [(e.seq, e.type, e.data, e.created_at) for e in stored] == [
        (row["seq"], row["type"], row["data"], row["created_at"]) for row in rows
    ]
