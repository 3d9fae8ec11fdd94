"""A worker executes a batch of runs together: one commit per round, each run guarded by its
own lease, one run's trouble its own (real connections, on SQLite and PostgreSQL)."""

from datetime import timedelta

import pytest
from django.db import OperationalError
from django.utils import timezone

from runs import extensions, services, worker
from runs.metrics import Counter
from runs.models import AgentRun, AttemptStatus, ModelAttempt, RunEvent, RunStatus, ToolExecution
from runs.services import LostRun
from tests.conftest import wait_for
from tests.runs import helpers
from tests.runs.helpers import (
    LOCKER_QUESTION,
    assert_completed_once,
    assert_timeline_contiguous,
    customer_with_parcel,
    queue,
    shop_create,
    tool_started,
    types,
)
from tests.threads import Background, in_threads_numbered

pytestmark = pytest.mark.django_db(transaction=True)


def _queued(shop, count: int, question: str | None = None) -> list[AgentRun]:
    runs = []
    for index in range(count):
        number = f"PCL-8{index:02d}"
        customer = customer_with_parcel(shop, number)
        if question is None:
            runs.append(queue(customer, shop, number))
        else:
            runs.append(queue(customer, shop, number, question))
    return runs


def test_a_batch_completes_every_run_with_one_commit_per_round():
    # given: six plain runs claimed together
    shop = shop_create(max_running_runs=8)
    runs = _queued(shop, 6)
    leases = services.runs_claim(limit=8)
    assert sorted(str(lease.run_id) for lease in leases) == sorted(str(run.pk) for run in runs)

    # when
    with Counter().counting() as counter:
        worker.run_slices(leases)

    # then: three rounds (model, track_parcel, model), one commit each, for all six runs
    assert counter.commits == 3
    for run in runs:
        assert_completed_once(run.pk)
        assert list(
            ModelAttempt.objects.filter(run=run).order_by("step").values_list("step", "status")
        ) == [(0, AttemptStatus.RESPONDED), (2, AttemptStatus.RESPONDED)]
        assert list(ToolExecution.objects.filter(run=run).values_list("tool", flat=True)) == [
            "track_parcel"
        ]


@pytest.mark.parametrize("capacity", [3, 5])
def test_racing_batch_claims_never_exceed_the_shops_capacity(capacity):
    # given
    shop = shop_create(max_running_runs=capacity)
    _queued(shop, 9)

    # when: four workers each claim a batch at once
    batches = in_threads_numbered(lambda _: services.runs_claim(limit=4), 4)

    # then
    claimed = [lease.run_id for batch in batches for lease in batch]
    assert len(claimed) == len(set(claimed)) == capacity
    assert AgentRun.objects.filter(merchant=shop, status=RunStatus.RUNNING).count() == capacity


def test_a_run_cancelled_in_a_batch_commits_nothing_while_the_others_complete():
    # given: a batch of three, one of which a customer stops before its first commit
    shop = shop_create()
    first, stopped, last = _queued(shop, 3)
    leases = services.runs_claim(limit=3)
    services.run_cancel(run=AgentRun.objects.get(pk=stopped.pk))

    # when
    worker.run_slices(leases)

    # then
    assert_completed_once(first.pk)
    assert_completed_once(last.pk)
    stopped.refresh_from_db()
    assert stopped.status == RunStatus.CANCELLED
    assert types(stopped.pk)[-1] == "run.cancelled"
    assert "model.responded" not in types(stopped.pk)
    assert not ToolExecution.objects.filter(run=stopped).exists()
    assert_timeline_contiguous(stopped.pk)


def test_a_commit_that_fails_is_its_own_runs_and_the_batch_goes_on(monkeypatch):
    # given: a finish hook that breaks on one run of the batch
    shop = shop_create()
    first, broken, last = _queued(shop, 3)

    def hook(run, previous):
        if run.pk == broken.pk:
            raise RuntimeError("a bug in a domain hook")

    _run_end_hook_add(monkeypatch, hook)
    leases = services.runs_claim(limit=3)

    # when: the last round rolls back, and each of its steps is committed on its own
    worker.run_slices(leases)

    # then: the others completed once each; the broken one is parked for an operator, as it
    # was before its last step, with nothing of that step written
    assert_completed_once(first.pk)
    assert_completed_once(last.pk)
    broken.refresh_from_db()
    assert broken.status == RunStatus.PARKED
    assert "run.completed" not in types(broken.pk)
    assert "message.assistant" not in types(broken.pk)
    assert list(ModelAttempt.objects.filter(run=broken).values_list("status", flat=True)) == [
        AttemptStatus.RESPONDED,
        AttemptStatus.STARTED,
    ]
    assert_timeline_contiguous(broken.pk)


def test_a_slow_call_does_not_hold_up_the_other_runs_of_its_batch(locker_latency):
    # given: a batch with a run inside a slow locker search and two plain runs
    locker_latency(10)
    shop = shop_create()
    [slow] = _queued(shop, 1, LOCKER_QUESTION)
    plain = [queue(customer_with_parcel(shop, f"PCL-9{i}"), shop, f"PCL-9{i}") for i in range(2)]
    busy = Background(worker.tick)

    # when: the plain runs finish while the locker search is still running
    wait_for(tool_started(slow.pk, "find_locker"), timeout=10, interval=0.02)
    wait_for(
        lambda: all(AgentRun.objects.get(pk=run.pk).is_finished for run in plain),
        timeout=8,
        interval=0.02,
    )
    assert AgentRun.objects.get(pk=slow.pk).status == RunStatus.RUNNING
    assert not RunEvent.objects.filter(run=slow, type="tool.result", data__tool="find_locker")

    # then: stopping the slow run lets the worker go; the plain runs were done long before
    services.run_cancel(run=AgentRun.objects.get(pk=slow.pk))
    assert busy.join(timeout=5) == 3
    for run in plain:
        assert_completed_once(run.pk)
    assert types(slow.pk)[-1] == "run.cancelled"
    assert not ToolExecution.objects.filter(run=slow, tool="find_locker").exists()


def test_runs_queued_later_join_a_batch_while_a_slow_call_holds_one_of_it(locker_latency):
    # given: a worker whose only run is inside a slow locker search
    locker_latency(10)
    shop = shop_create()
    [slow] = _queued(shop, 1, LOCKER_QUESTION)
    busy = Background(worker.tick)
    wait_for(tool_started(slow.pk, "find_locker"), timeout=10, interval=0.02)

    # when: more runs are queued
    later = [queue(customer_with_parcel(shop, f"PCL-7{i}"), shop, f"PCL-7{i}") for i in range(3)]

    # then: the same worker completes them while the call still runs
    wait_for(
        lambda: all(AgentRun.objects.get(pk=run.pk).is_finished for run in later),
        timeout=8,
        interval=0.02,
    )
    assert AgentRun.objects.get(pk=slow.pk).status == RunStatus.RUNNING
    services.run_cancel(run=AgentRun.objects.get(pk=slow.pk))
    assert busy.join(timeout=5) == 4
    for run in later:
        assert_completed_once(run.pk)


def test_a_tick_whose_claim_budget_is_spent_claims_no_more_and_hands_over(settings, monkeypatch):
    # given: queued runs and a tick whose claim budget is spent
    settings.AGENTPORTAL = {**settings.AGENTPORTAL, "TICK_CLAIM_SECONDS": 0}
    shop = shop_create()
    runs = _queued(shop, 3)
    handed_over = []
    monkeypatch.setattr(services, "tick_enqueue", lambda count=1: handed_over.append(count))

    # when
    executed = worker.tick()

    # then: nothing was claimed past the budget, and a fresh tick was asked for
    assert executed == 0
    assert handed_over == [1]
    assert all(AgentRun.objects.get(pk=run.pk).status == RunStatus.QUEUED for run in runs)


def test_a_batch_claim_gives_a_shop_its_reserved_slots_then_the_fair_order():
    # given: a shop with two reserved slots, scheduled just now, and a never-scheduled shop
    plain = shop_create()
    reserved = shop_create(reserved_slots=2, last_scheduled_at=timezone.now())
    plain_runs = _queued(plain, 4)
    reserved_runs = _queued(reserved, 4)

    # when
    leases = services.runs_claim(limit=4)

    # then: the reserved shop's two oldest runs, then the other shop's two oldest
    assert [lease.run_id for lease in leases] == [
        reserved_runs[0].pk,
        reserved_runs[1].pk,
        plain_runs[0].pk,
        plain_runs[1].pk,
    ]


def test_a_worker_whose_lease_expired_commits_nothing_even_unchallenged():
    # given: a claimed run whose lease expired while nobody else claimed it
    shop = shop_create()
    [run] = _queued(shop, 1)
    lease = helpers.run_claim()
    AgentRun.objects.filter(pk=run.pk).update(
        lease_expires_at=timezone.now() - timedelta(seconds=1)
    )
    before = list(RunEvent.objects.filter(run=run).values_list("seq", "type"))

    # when / then
    with pytest.raises(LostRun):
        helpers.run_step(lease)
    assert list(RunEvent.objects.filter(run=run).values_list("seq", "type")) == before
    assert AgentRun.objects.get(pk=run.pk).step == 0


def test_a_database_error_in_a_commit_hands_the_run_back_to_the_queue(monkeypatch):
    # given: a run whose last commit meets a passing database error (a deadlock, a timeout)
    shop = shop_create()
    [run] = _queued(shop, 1)
    broken = [True]

    def hook(finished, previous):
        if broken:
            broken.clear()
            raise OperationalError("database is locked")

    _run_end_hook_add(monkeypatch, hook)

    # when
    worker.run_slices(services.runs_claim(limit=1))

    # then: back in the queue, not parked; the next worker completes it
    run.refresh_from_db()
    assert run.status == RunStatus.QUEUED
    assert run.lease_expires_at is None
    assert worker.tick() == 1
    assert_completed_once(run.pk)


def test_a_worker_that_fails_itself_hands_its_runs_back_at_once(monkeypatch):
    # given: a batch whose worker breaks between rounds (not in any run's step)
    shop = shop_create()
    runs = _queued(shop, 3)
    commit = services.runs_step_commit
    rounds = []

    def failing_after_one_round(steps):
        rounds.append(len(steps))
        if len(rounds) > 1:
            raise RuntimeError("the worker broke")
        return commit(steps)

    monkeypatch.setattr(services, "runs_step_commit", failing_after_one_round)

    # when
    with pytest.raises(RuntimeError):
        worker.run_slices(services.runs_claim(limit=3))

    # then: every run is queued again from its first commit, not left to its lease's expiry
    for run in runs:
        run.refresh_from_db()
        assert (run.status, run.lease_expires_at, run.step) == (RunStatus.QUEUED, None, 1)
        assert types(run.pk).count("model.responded") == 1


def test_a_database_error_that_is_a_bug_parks_the_run_for_an_operator(monkeypatch):
    # given: a commit that meets a database error no retry would cure
    shop = shop_create()
    [run] = _queued(shop, 1)

    def hook(finished, previous):
        raise OperationalError("no such column: runs_agentrun.renamed")

    _run_end_hook_add(monkeypatch, hook)

    # when
    worker.run_slices(services.runs_claim(limit=1))

    # then: parked, not handed back to be claimed and fail again
    run.refresh_from_db()
    assert run.status == RunStatus.PARKED


def test_a_batch_claim_shares_its_room_among_the_shops_in_the_fair_order():
    # given: two shops with more queued runs than the batch has room for
    first = shop_create(max_running_runs=20)
    second = shop_create(
        max_running_runs=20, last_scheduled_at=timezone.now() - timedelta(minutes=1)
    )
    first_runs = _queued(first, 10)
    second_runs = _queued(second, 10)

    # when
    leases = services.runs_claim(limit=16)

    # then: eight each, each shop's oldest first
    claimed = {lease.run_id for lease in leases}
    assert claimed == {run.pk for run in first_runs[:8]} | {run.pk for run in second_runs[:8]}


def test_batch_claims_take_turns_at_the_run_that_does_not_divide_evenly():
    # given: three shops with room for all their runs, each with more queued than a claim deals
    shops = [shop_create(max_running_runs=20) for _ in range(3)]
    for shop in shops:
        _queued(shop, 6)

    # when: three claims of four runs each (one shop gets a second run each time)
    dealt = [
        sorted(
            AgentRun.objects.filter(
                pk__in=[lease.run_id for lease in services.runs_claim(limit=4)]
            ).values_list("merchant_id", flat=True)
        )
        for _ in range(3)
    ]

    # then: as if the runs were claimed one at a time, the second run went to each shop in turn
    # (not always to the shop first in the order of ids, which then ran twice as fast)
    seconds = [next(shop for shop in claim if claim.count(shop) == 2) for claim in dealt]
    assert sorted(seconds) == sorted(shop.pk for shop in shops)


def test_a_slow_call_longer_than_the_lease_keeps_its_run(settings, locker_latency):
    # given: a lease shorter than the carrier's locker search
    settings.AGENTPORTAL = {**settings.AGENTPORTAL, "LEASE_SECONDS": 1.0}
    locker_latency(2)
    shop = shop_create()
    [run] = _queued(shop, 1, LOCKER_QUESTION)

    # when
    worker.tick()

    # then: the worker renewed the lease while it waited, and finished the run in one go
    assert_completed_once(run.pk)
    assert types(run.pk).count("run.started") == 1
    assert ToolExecution.objects.filter(run=run, tool="find_locker").count() == 1


def _run_end_hook_add(monkeypatch, hook) -> None:
    """Register a run-end hook for one test only."""
    registry = extensions._registry
    monkeypatch.setattr(registry, "run_end_hooks", [*registry.run_end_hooks, hook])
