"""Claiming runs with real threads on real connections (DESIGN 2, 5, 9): one lease per run
however many workers race for it, the shops' fair turns, overdue runs failed at claim, and
maintain putting the runs of vanished workers back in the queue.

Every thread works on its own database connection and closes it at its end; the same tests
run on SQLite (IMMEDIATE transactions, no row locks) and on PostgreSQL (row locks).
The runs ask the test extension's parcel agent (tests/extension_app/parcels.py).
"""

import time
from datetime import timedelta

import pytest
from django.utils import timezone

from agentportal.errors import RunFinished
from agentportal.models import Merchant
from runs import services, worker
from runs.models import (
    AgentRun,
    AttemptStatus,
    ErrorCode,
    ModelAttempt,
    RunEvent,
    RunStatus,
    ToolExecution,
    WorkerHeartbeat,
)
from tests.conftest import wait_for
from tests.runs import helpers
from tests.runs.helpers import (
    LOCKER_QUESTION,
    STATUS_QUESTION,
    assert_completed_once,
    assert_timeline_contiguous,
    attempts,
    customer_with_parcel,
    expire_lease,
    queue,
    shop_create,
    tool_started,
    types,
)
from tests.threads import Background, in_threads_numbered

pytestmark = pytest.mark.django_db(transaction=True)


# --- claiming races ------------------------------------------------------------------------


@pytest.mark.parametrize("workers", [2, 8])
def test_concurrent_claims_of_one_run_give_exactly_one_lease(workers):
    # given: one queued run
    shop = shop_create()
    customer = customer_with_parcel(shop, "PCL-1")
    run = queue(customer, shop, "PCL-1")

    # when: several workers claim at the same moment
    leases = in_threads_numbered(lambda _: helpers.run_claim(), workers)

    # then: one lease, token 1, one run.started
    won = [lease for lease in leases if lease is not None]
    assert len(won) == 1
    assert won[0].run_id == run.pk
    assert won[0].token == 1
    run.refresh_from_db()
    assert run.status == RunStatus.RUNNING
    assert run.lease_token == 1
    assert types(run.pk).count("run.started") == 1
    assert attempts(run.pk) == [(0, 1, AttemptStatus.STARTED)]
    assert_timeline_contiguous(run.pk)


def test_tick_delivered_twice_at_once_executes_the_run_once():
    # given: one queued run, and its tick delivered to two workers
    shop = shop_create()
    customer = customer_with_parcel(shop, "PCL-7")
    run = queue(customer, shop, "PCL-7")

    # when: both ticks start at the same moment
    executed = in_threads_numbered(lambda _: worker.tick(), 2)

    # then: one of them executed it, once
    assert sorted(executed) == [0, 1]
    assert_completed_once(run.pk)
    assert types(run.pk).count("run.started") == 1
    assert attempts(run.pk) == [(0, 1, AttemptStatus.RESPONDED), (2, 1, AttemptStatus.RESPONDED)]
    execution = ToolExecution.objects.get(run=run)
    assert execution.idempotency_key == f"agent:{run.pk}:1:0"
    assert execution.tool == "track_parcel"


def test_tick_delivered_again_while_run_is_inside_slow_tool_does_nothing(locker_latency):
    # given: a locker question (a slow carrier call) being executed by a first worker
    locker_latency(0.8)
    shop = shop_create()
    customer = customer_with_parcel(shop, "PCL-8")
    run = queue(customer, shop, "PCL-8", LOCKER_QUESTION)
    first = Background(worker.tick)
    wait_for(tool_started(run.pk, "find_locker"), timeout=10, interval=0.02)

    # when: the same tick is delivered to a second worker meanwhile
    second = Background(worker.tick)

    # then: the second finds nothing to claim; the first finishes the run once
    assert second.join() == 0
    assert first.join() == 1
    assert_completed_once(run.pk)
    assert sorted(ToolExecution.objects.filter(run=run).values_list("tool", flat=True)) == [
        "find_locker",
        "track_parcel",
    ]
    assert types(run.pk).count("run.started") == 1
    assert [status for _, _, status in attempts(run.pk)] == [AttemptStatus.RESPONDED] * 3


def test_four_workers_complete_twenty_runs_of_several_customers_exactly_once():
    # given: 20 queued runs, 2 each for 10 customers of two shops
    shops = [shop_create(), shop_create()]
    answers = {}
    for index in range(10):
        shop = shops[index % 2]
        number = f"PCL-{5000 + index}"
        customer = customer_with_parcel(shop, number)
        for question in (STATUS_QUESTION, "Where is {parcel}, please?"):
            answers[queue(customer, shop, number, question).pk] = f"Parcel {number} is in transit."
    run_ids = list(answers)

    # when: four workers tick at once
    executed = in_threads_numbered(lambda _: worker.tick(), 4)

    # then: every run completed exactly once; nothing duplicated, nothing lost
    assert sum(executed) == 20
    assert AgentRun.objects.filter(pk__in=run_ids, status=RunStatus.COMPLETED).count() == 20
    assert RunEvent.objects.filter(run_id__in=run_ids, type="run.completed").count() == 20
    assert RunEvent.objects.filter(run_id__in=run_ids, type="run.started").count() == 20
    for run_id in run_ids:
        assert_completed_once(run_id)
        assert attempts(run_id) == [
            (0, 1, AttemptStatus.RESPONDED),
            (2, 1, AttemptStatus.RESPONDED),
        ]
        assert ToolExecution.objects.filter(run_id=run_id).count() == 1
        assert AgentRun.objects.get(pk=run_id).result == answers[run_id]
    assert ModelAttempt.objects.filter(run_id__in=run_ids).count() == 40
    assert ToolExecution.objects.filter(run_id__in=run_ids).count() == 20


def test_cancels_racing_four_workers_leave_each_run_with_one_final_word(locker_latency):
    # given: 12 queued runs, some with a (short) slow tool
    locker_latency(0.15)
    shop = shop_create()
    run_ids = []
    for index in range(6):
        number = f"PCL-{6000 + index}"
        customer = customer_with_parcel(shop, number)
        run_ids.append(queue(customer, shop, number).pk)
        run_ids.append(queue(customer, shop, number, LOCKER_QUESTION).pk)
    doomed = run_ids[::3]

    # when: three workers tick while a fourth thread cancels every third run
    def act(index: int) -> int:
        if index < 3:
            return worker.tick()
        cancelled = 0
        for run_id in doomed:
            time.sleep(0.03)
            try:
                services.run_cancel(run=AgentRun.objects.get(pk=run_id), reason="race")
                cancelled += 1
            except RunFinished:
                pass
        return cancelled

    *_, cancelled = in_threads_numbered(act, 4)

    # then: every run ended, with exactly one final event, which is its last
    final = {"run.completed", "run.failed", "run.cancelled"}
    for run_id in run_ids:
        run = AgentRun.objects.get(pk=run_id)
        timeline = types(run_id)
        assert [t for t in timeline if t in final] == [timeline[-1]], (run.status, timeline)
        expected = {
            RunStatus.COMPLETED: "run.completed",
            RunStatus.CANCELLED: "run.cancelled",
        }[run.status]
        assert timeline[-1] == expected
        assert_timeline_contiguous(run_id)
        if run.status == RunStatus.CANCELLED:
            assert run.result is None
        keys = ToolExecution.objects.filter(run_id=run_id).values_list("idempotency_key")
        assert len(keys) == len(set(keys)) == timeline.count("tool.result")
    statuses = list(AgentRun.objects.filter(pk__in=run_ids).values_list("status", flat=True))
    assert set(statuses) <= {RunStatus.COMPLETED, RunStatus.CANCELLED}
    # the last doomed run is a slow one, queued late: it cannot have finished before its cancel
    assert statuses.count(RunStatus.CANCELLED) == cancelled >= 1


# --- fairness and capacity -------------------------------------------------------------------


def test_claim_passes_over_shop_at_capacity_and_claims_another_shops_run():
    # given: a shop allowed one running run, which holds a live lease, and has another queued
    full = shop_create(max_running_runs=1)
    other = shop_create()
    full_customer = customer_with_parcel(full, "PCL-10")
    other_customer = customer_with_parcel(other, "PCL-20")
    held = queue(full_customer, full, "PCL-10")
    held_lease = helpers.run_claim()
    assert held_lease is not None and held_lease.run_id == held.pk
    waiting = queue(full_customer, full, "PCL-10", "Where is {parcel}?")
    elsewhere = queue(other_customer, other, "PCL-20")
    # without the capacity rule the full shop would be next: it was scheduled longer ago
    Merchant.objects.filter(pk=other.pk).update(last_scheduled_at=timezone.now())

    # when / then: the other shop's run is claimed, the full shop's is not
    lease = helpers.run_claim()
    assert lease is not None and lease.run_id == elsewhere.pk
    assert helpers.run_claim() is None
    waiting.refresh_from_db()
    assert waiting.status == RunStatus.QUEUED
    assert waiting.lease_token == 0

    # and once the held run finishes, its shop's capacity is free again
    worker.run_slices([held_lease])
    assert AgentRun.objects.get(pk=held.pk).status == RunStatus.COMPLETED
    lease = helpers.run_claim()
    assert lease is not None and lease.run_id == waiting.pk


def test_claim_serves_shop_under_its_reserved_slots_first():
    # given: a never-scheduled shop with an older run, and a shop with a reserved slot
    plain = shop_create()
    reserved = shop_create(reserved_slots=1, last_scheduled_at=timezone.now())
    plain_run = queue(customer_with_parcel(plain, "PCL-30"), plain, "PCL-30")
    reserved_customer = customer_with_parcel(reserved, "PCL-40")
    reserved_runs = [
        queue(reserved_customer, reserved, "PCL-40"),
        queue(reserved_customer, reserved, "PCL-40", "Where is {parcel}?"),
    ]

    # when
    claimed = [helpers.run_claim().run_id for _ in range(3)]

    # then: the reserved shop first; once its slot is used, the fair turns again
    assert claimed == [reserved_runs[0].pk, plain_run.pk, reserved_runs[1].pk]


def test_claim_serves_shop_scheduled_longest_ago_first_then_oldest_run():
    # given: three shops scheduled at different times; runs queued newest shop first
    now = timezone.now()
    recent = shop_create(last_scheduled_at=now - timedelta(minutes=1))
    stale = shop_create(last_scheduled_at=now - timedelta(hours=1))
    never = shop_create()
    runs = {}
    for name, shop in (("recent", recent), ("stale", stale), ("never", never)):
        customer = customer_with_parcel(shop, f"PCL-{shop.pk}")
        runs[name] = [
            queue(customer, shop, f"PCL-{shop.pk}").pk,
            queue(customer, shop, f"PCL-{shop.pk}", "Where is {parcel}?").pk,
        ]

    # when
    claimed = [helpers.run_claim().run_id for _ in range(6)]

    # then: never scheduled, then the longest ago, taking turns; each shop's oldest run first
    assert claimed == [
        runs["never"][0],
        runs["stale"][0],
        runs["recent"][0],
        runs["never"][1],
        runs["stale"][1],
        runs["recent"][1],
    ]
    assert helpers.run_claim() is None


def test_claim_fails_overdue_run_and_claims_the_next_one():
    # given: two queued runs of a shop; the older one is past its deadline
    shop = shop_create()
    customer = customer_with_parcel(shop, "PCL-62")
    overdue = queue(customer, shop, "PCL-62")
    fresh = queue(customer, shop, "PCL-62", "Where is {parcel}?")
    AgentRun.objects.filter(pk=overdue.pk).update(deadline_at=timezone.now() - timedelta(seconds=1))

    # when
    lease = helpers.run_claim()

    # then: the overdue run failed instead of starting; the fresh one was claimed
    assert lease is not None and lease.run_id == fresh.pk
    overdue.refresh_from_db()
    assert overdue.status == RunStatus.FAILED
    assert overdue.error_code == ErrorCode.DEADLINE_EXCEEDED
    timeline = types(overdue.pk)
    assert timeline.count("run.failed") == 1
    assert timeline[-1] == "run.failed"
    assert not ModelAttempt.objects.filter(run=overdue).exists()
    assert_timeline_contiguous(overdue.pk)


# --- maintain --------------------------------------------------------------------------------


def test_maintain_requeues_run_with_expired_lease_and_it_resumes():
    # given: a run whose worker vanished (lease expired)
    shop = shop_create()
    customer = customer_with_parcel(shop, "PCL-50")
    run = queue(customer, shop, "PCL-50")
    assert helpers.run_claim() is not None
    expire_lease(run.pk)

    # when
    report = services.maintain()

    # then: back in the queue, a heartbeat written
    assert report["requeued"] == 1
    run.refresh_from_db()
    assert run.status == RunStatus.QUEUED
    assert run.lease_expires_at is None
    assert WorkerHeartbeat.objects.filter(
        seen_at__gte=timezone.now() - timedelta(seconds=30)
    ).exists()

    # and the next worker resumes it; the lost attempt is UNKNOWN
    assert worker.tick() == 1
    assert_completed_once(run.pk)
    assert attempts(run.pk) == [
        (0, 1, AttemptStatus.UNKNOWN),
        (0, 2, AttemptStatus.RESPONDED),
        (2, 1, AttemptStatus.RESPONDED),
    ]


def test_maintain_leaves_live_lease_alone():
    shop = shop_create()
    run = queue(customer_with_parcel(shop, "PCL-51"), shop, "PCL-51")
    lease = helpers.run_claim()

    report = services.maintain()

    assert report["requeued"] == 0
    run.refresh_from_db()
    assert run.status == RunStatus.RUNNING
    assert run.lease_token == lease.token


def test_maintain_fails_queued_run_past_its_deadline_once():
    # given: a queued run whose deadline passed
    shop = shop_create()
    run = queue(customer_with_parcel(shop, "PCL-60"), shop, "PCL-60")
    AgentRun.objects.filter(pk=run.pk).update(deadline_at=timezone.now() - timedelta(seconds=1))

    # when: maintain runs, twice
    first = services.maintain()
    second = services.maintain()

    # then
    assert (first["deadlines"], second["deadlines"]) == (1, 0)
    run.refresh_from_db()
    assert run.status == RunStatus.FAILED
    assert run.error_code == ErrorCode.DEADLINE_EXCEEDED
    failed = RunEvent.objects.filter(run=run, type="run.failed")
    assert failed.count() == 1
    assert failed.get().data["error_code"] == ErrorCode.DEADLINE_EXCEEDED
    assert types(run.pk)[-1] == "run.failed"
    assert_timeline_contiguous(run.pk)
    assert WorkerHeartbeat.objects.exists()
    assert worker.tick() == 0
