import os

import pytest
from django.db import connection


@pytest.mark.django_db
def test_runs_on_the_database_ci_asked_for():
    # CI sets AGENTPORTAL_EXPECT_DATABASE for its PostgreSQL pass: this fails if that pass
    # quietly ran on SQLite.
    expected = os.environ.get("AGENTPORTAL_EXPECT_DATABASE", "sqlite")
    assert connection.vendor == expected


@pytest.mark.cluster
@pytest.mark.django_db
def test_wakes_workers_through_the_broker_ci_asked_for():
    # CI's pass with AGENTPORTAL_BROKER_URL sets AGENTPORTAL_EXPECT_BROKER=redis: this fails if
    # the cluster tests quietly went through the database's queue.
    from django_q.brokers import get_broker

    expected = os.environ.get("AGENTPORTAL_EXPECT_BROKER", "orm")
    assert type(get_broker()).__name__.lower() == expected


@pytest.mark.cluster
@pytest.mark.django_db
def test_goes_through_the_pooler_ci_asked_for():
    # CI's PgBouncer pass sets AGENTPORTAL_EXPECT_POOLER to the pooler's port: this fails if
    # that pass quietly went straight to the database or kept prepared statements on.
    expected = os.environ.get("AGENTPORTAL_EXPECT_POOLER")
    if expected is None:
        pytest.skip("not the pooler's pass")
    assert str(connection.settings_dict["PORT"]) == expected
    assert "prepare_threshold" not in connection.settings_dict["OPTIONS"]


@pytest.mark.counters
def test_counts_in_the_cache_ci_asked_for():
    # CI's Redis pass sets AGENTPORTAL_CACHE_URL and AGENTPORTAL_EXPECT_CACHE=redis: this fails if
    # the counts quietly went to the database's table.
    from django.core.cache import caches

    expected = os.environ.get("AGENTPORTAL_EXPECT_CACHE", "db")
    assert type(caches["default"]).__module__.rsplit(".", 1)[-1] == expected


@pytest.mark.django_db
def test_postgresql_compiles_no_statement_just_in_time():
    # JIT compilation made the claim 4.3x slower at a million runs than at 100k; the
    # connections turn it off (agentportal/settings.py).
    if connection.vendor != "postgresql":
        pytest.skip("PostgreSQL's setting")
    with connection.cursor() as cursor:
        cursor.execute("SHOW jit")
        assert cursor.fetchone()[0] == "off"
