"""A round's step commit sends its statements together (pipelined on PostgreSQL, answered at
the end): a statement the database refuses is still its own run's trouble, and the others of
the round commit. The refusals come from real triggers, on SQLite and PostgreSQL."""

import pytest
from django.db import connection

from runs import services, worker
from runs.models import AgentRun, AttemptStatus, ModelAttempt, RunStatus, ToolExecution
from tests.runs.helpers import (
    assert_completed_once,
    assert_timeline_contiguous,
    customer_with_parcel,
    queue,
    shop_create,
    types,
)

pytestmark = pytest.mark.django_db(transaction=True)

TRIGGER = "test_refuse_update"


@pytest.fixture
def refuse_update():
    """Install a trigger by which the database refuses an UPDATE of `table` whose new row
    matches `condition` (SQL over NEW); dropped after the test."""
    tables = []

    def install(table: str, condition: str) -> None:
        tables.append(table)
        with connection.cursor() as cursor:
            if connection.vendor == "postgresql":
                cursor.execute(
                    f"CREATE FUNCTION {TRIGGER}() RETURNS trigger AS $$"
                    " BEGIN RAISE EXCEPTION 'refused by the test'; END $$ LANGUAGE plpgsql"
                )
                cursor.execute(
                    f"CREATE TRIGGER {TRIGGER} BEFORE UPDATE ON {table} FOR EACH ROW"
                    f" WHEN ({condition}) EXECUTE FUNCTION {TRIGGER}()"
                )
            else:
                cursor.execute(
                    f"CREATE TRIGGER {TRIGGER} BEFORE UPDATE ON {table} FOR EACH ROW"
                    f" WHEN {condition} BEGIN SELECT RAISE(ABORT, 'refused by the test'); END"
                )

    yield install
    with connection.cursor() as cursor:
        for table in tables:
            if connection.vendor == "postgresql":
                cursor.execute(f"DROP TRIGGER IF EXISTS {TRIGGER} ON {table}")
                cursor.execute(f"DROP FUNCTION IF EXISTS {TRIGGER}()")
            else:
                cursor.execute(f"DROP TRIGGER IF EXISTS {TRIGGER}")


def _run_id_literal(run: AgentRun) -> str:
    """The run's id as an SQL literal of this database's column."""
    return f"'{AgentRun._meta.pk.get_db_prep_value(run.pk, connection)}'"


def _batch_of_three():
    shop = shop_create()
    runs = []
    for index in range(3):
        number = f"PCL-9{index:02d}"
        runs.append(queue(customer_with_parcel(shop, number), shop, number))
    return runs


def _assert_the_others_completed_and_this_one_parked(runs, broken) -> None:
    for run in runs:
        if run.pk != broken.pk:
            assert_completed_once(run.pk)
            assert ToolExecution.objects.filter(run=run).count() == 1
    broken.refresh_from_db()
    assert broken.status == RunStatus.PARKED
    assert "run.completed" not in types(broken.pk)
    assert "message.assistant" not in types(broken.pk)
    assert_timeline_contiguous(broken.pk)


def test_a_guarded_update_the_database_refuses_is_its_own_runs_trouble(refuse_update):
    # given: a batch of three; the database refuses to complete the middle one
    runs = _batch_of_three()
    broken = runs[1]
    refuse_update(
        AgentRun._meta.db_table,
        f"NEW.id = {_run_id_literal(broken)} AND NEW.status = '{RunStatus.COMPLETED}'",
    )

    # when: the last round's statements go together and one of them fails
    worker.run_slices(services.runs_claim(limit=3))

    # then: the round was rolled back and each step committed again on its own
    _assert_the_others_completed_and_this_one_parked(runs, broken)
    assert list(ModelAttempt.objects.filter(run=broken).values_list("status", flat=True)) == [
        AttemptStatus.RESPONDED,
        AttemptStatus.STARTED,
    ]


def test_an_attempt_finish_the_database_refuses_is_its_own_runs_trouble(refuse_update):
    # given: a batch of three; the database refuses to record the middle one's second answer
    runs = _batch_of_three()
    broken = runs[1]
    refuse_update(
        ModelAttempt._meta.db_table,
        f"NEW.run_id = {_run_id_literal(broken)} AND NEW.step = 2"
        f" AND NEW.status = '{AttemptStatus.RESPONDED}'",
    )

    # when
    worker.run_slices(services.runs_claim(limit=3))

    # then: nothing of its last step was written, not even the run's row
    _assert_the_others_completed_and_this_one_parked(runs, broken)
    assert broken.step == 2
    assert ModelAttempt.objects.get(run=broken, step=2).status != AttemptStatus.RESPONDED
