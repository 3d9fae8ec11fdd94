"""Which database errors a worker waits out (the run goes back to the queue) rather than takes
for a bug (the run is parked for an operator)."""

import psycopg
import pytest
from django.db import DatabaseError, IntegrityError, OperationalError

from runs.services import database_error_transient


def _wrapped(django_error: type[DatabaseError], cause: BaseException) -> DatabaseError:
    """A Django error as the database wrapper raises it: with the driver's error as cause."""
    error = django_error(str(cause))
    error.__cause__ = cause
    return error


def _refused() -> psycopg.OperationalError:
    try:
        psycopg.connect("postgresql://postgres@127.0.0.1:1/none", connect_timeout=2)
    except psycopg.OperationalError as error:
        return error
    raise AssertionError("something listens on port 1")


def test_a_postgresql_server_that_cannot_be_reached_is_waited_out():
    assert database_error_transient(_wrapped(OperationalError, _refused()))


@pytest.mark.parametrize(
    "sqlstate", ["57P01", "57P02", "57P03", "40001", "40P01", "55P03", "08006"]
)
def test_shutdowns_startups_conflicts_and_lost_connections_are_waited_out(sqlstate):
    cause = psycopg.errors.lookup(sqlstate)("server says no")
    assert database_error_transient(_wrapped(OperationalError, cause))


def test_a_sqlite_database_that_is_locked_is_waited_out():
    assert database_error_transient(OperationalError("database is locked"))


@pytest.mark.parametrize(
    "error",
    [
        _wrapped(OperationalError, psycopg.errors.lookup("42P01")("no such table")),
        OperationalError("no such column: runs_agentrun.nothing"),
        IntegrityError("UNIQUE constraint failed"),
    ],
    ids=["undefined-table", "sqlite-no-such-column", "integrity"],
)
def test_errors_of_the_code_or_the_schema_are_not_waited_out(error):
    assert not database_error_transient(error)
