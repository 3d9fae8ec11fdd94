"""`manage.py prune --older-than`: the records of runs finished long ago go, in short batches;
the runs and what points at them stay; running it again deletes nothing more."""

import io
from datetime import timedelta

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from runs import worker
from runs.metrics import Counter
from runs.models import AgentRun, ModelAttempt, RunEvent, RunInput, RunStatus
from tests.runs.helpers import queue

pytestmark = pytest.mark.django_db(transaction=True)


def _finished_run(shop, *, days_ago: float) -> AgentRun:
    pat = shop.memberships.get(user__username="pat").user
    run = queue(pat, shop, "PCL-1")
    worker.tick()
    RunInput.objects.create(run=run, interrupt_id=f"i-{run.pk}", idempotency_key="k", kind="x")
    moment = timezone.now() - timedelta(days=days_ago)
    AgentRun.objects.filter(pk=run.pk).update(created_at=moment, finished_at=moment)
    RunInput.objects.filter(run=run).update(created_at=moment)
    return AgentRun.objects.get(pk=run.pk)


def _records(run: AgentRun) -> tuple[int, int, int]:
    return (
        RunEvent.objects.filter(run=run).count(),
        ModelAttempt.objects.filter(run=run).count(),
        RunInput.objects.filter(run=run).count(),
    )


def _prune(*args: str) -> str:
    out = io.StringIO()
    call_command("prune", *args, stdout=out)
    return out.getvalue()


def test_prune_deletes_the_records_of_old_finished_runs_in_batches_and_keeps_the_rest(parcel_shop):
    # given five runs finished 100 days ago, one 10 days ago, and an old one still waiting
    old = [_finished_run(parcel_shop, days_ago=100) for _ in range(5)]
    recent = _finished_run(parcel_shop, days_ago=10)
    waiting = _finished_run(parcel_shop, days_ago=100)
    AgentRun.objects.filter(pk=waiting.pk).update(status=RunStatus.WAITING_USER, finished_at=None)
    kept = {run.pk: _records(run) for run in (recent, waiting)}
    events, attempts, _inputs = (sum(counts) for counts in zip(*map(_records, old), strict=True))
    assert events and attempts
    counter = Counter()

    # when pruned past 90 days, two runs a batch
    with counter.counting():
        output = _prune("--older-than", "90d", "--batch-size", "2")

    # then the old runs keep their rows but none of their records; the others keep all
    for run in old:
        assert _records(run) == (0, 0, 0)
        assert AgentRun.objects.get(pk=run.pk).status == RunStatus.COMPLETED
    assert {run.pk: _records(run) for run in (recent, waiting)} == kept
    assert (
        f"Deleted {events} events, {attempts} model attempts and 5 input receipts of the 5 runs"
        in output
    )
    # each batch was a transaction of its own
    assert counter.commits >= 3

    # and a second prune deletes nothing more
    again = _prune("--older-than", "90d")
    assert "Deleted 0 events, 0 model attempts and 0 input receipts" in again
    assert {run.pk: _records(run) for run in (recent, waiting)} == kept


@pytest.mark.parametrize("older_than", ["90", "d", "-5d", "0d", "90 days", "1.5d", "9999999d"])
def test_prune_refuses_an_age_it_cannot_read(older_than):
    with pytest.raises(CommandError, match="takes a number and a unit"):
        _prune(f"--older-than={older_than}")


def test_input_receipts_are_kept_a_day_whatever_the_age_given(parcel_shop):
    # given a run finished 13 hours ago and one finished 25 hours ago, each with the receipt of
    # an input (an idempotency key a client may still retry)
    recent = _finished_run(parcel_shop, days_ago=13 / 24)
    day_old = _finished_run(parcel_shop, days_ago=25 / 24)

    # when pruned past 12 hours
    output = _prune("--older-than", "12h")

    # then both runs lose their events and attempts, but only the day-old receipt goes
    assert _records(recent) == (0, 0, 1)
    assert _records(day_old) == (0, 0, 0)
    assert "1 input receipts" in output
    assert "receipts younger than 24 hours are kept" in output

    # and once the kept receipt is a day old, the next prune deletes it
    RunInput.objects.filter(run=recent).update(created_at=timezone.now() - timedelta(hours=25))
    assert "1 input receipts" in _prune("--older-than", "12h")
    assert _records(recent) == (0, 0, 0)
