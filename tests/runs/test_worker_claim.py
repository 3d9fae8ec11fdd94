"""Claiming, leases and stale writers with real threads on real connections (DESIGN 2, 5, 9).

Every thread works on its own database connection and closes it at its end; the same tests
run on SQLite (IMMEDIATE transactions, no row locks) and on PostgreSQL (row locks).
"""

import time
from datetime import timedelta
from typing import Any

import pytest
import time_machine
from django.contrib.auth.models import User
from django.utils import timezone

from agentportal.errors import RunFinished
from agentportal.models import Membership, Merchant
from agentportal.services import membership_revoke
from runs import services, worker
from runs.models import (
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
from runs.releases import Limits, ReleaseManifest, ToolDeclaration, graph_release_default
from runs.services import LostRun, StepCommit
from runs.tools import TOOLS
from tests import factories
from tests.conftest import wait_for
from tests.runs import helpers
from tests.runs.helpers import (
    STOCK_QUESTION,
    assert_completed_once,
    assert_timeline_contiguous,
    customer_with_order,
    events,
    queue,
    tool_started,
    types,
)
from tests.threads import Background, in_threads_numbered

pytestmark = pytest.mark.django_db(transaction=True)

# --- helpers -------------------------------------------------------------------------------


def publish_limits(merchant: Merchant, **limits: int) -> None:
    AgentRelease.objects.create(
        merchant=merchant,
        version=1,
        graph_version=graph_release_default().version,
        manifest=ReleaseManifest(
            tools=[ToolDeclaration(name=name) for name in TOOLS], limits=Limits(**limits)
        ).model_dump(),
        published=True,
    )


def expire_lease(run_id) -> None:
    AgentRun.objects.filter(pk=run_id).update(
        lease_expires_at=timezone.now() - timedelta(seconds=1)
    )


def attempts(run_id) -> list[tuple[int, int, str]]:
    return list(
        ModelAttempt.objects.filter(run_id=run_id)
        .order_by("step", "attempt")
        .values_list("step", "attempt", "status")
    )


def snapshot(run_id) -> dict[str, Any]:
    """Everything a stale writer could touch."""
    run = AgentRun.objects.get(pk=run_id)
    return {
        "run": (
            run.status,
            run.step,
            run.next_node,
            run.messages,
            run.version,
            run.model_calls,
            run.lease_token,
            run.last_event_seq,
            run.result,
        ),
        "events": events(run_id),
        "attempts": list(
            ModelAttempt.objects.filter(run_id=run_id)
            .order_by("step", "attempt")
            .values_list("step", "attempt", "status", "usage", "finished_at")
        ),
        "tools": list(
            ToolExecution.objects.filter(run_id=run_id).values_list("idempotency_key", "result")
        ),
    }


# --- claiming races ------------------------------------------------------------------------


@pytest.mark.parametrize("workers", [2, 8])
def test_concurrent_claims_of_one_run_give_exactly_one_lease(workers):
    # given: one queued run
    shop = factories.merchant_create()
    customer = customer_with_order(shop, "ORD-1")
    run = queue(customer, shop, "ORD-1")

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
    shop = factories.merchant_create()
    customer = customer_with_order(shop, "ORD-7")
    run = queue(customer, shop, "ORD-7")

    # when: both ticks start at the same moment
    executed = in_threads_numbered(lambda _: worker.tick(), 2)

    # then: one of them executed it, once
    assert sorted(executed) == [0, 1]
    assert_completed_once(run.pk)
    assert types(run.pk).count("run.started") == 1
    assert attempts(run.pk) == [(0, 1, AttemptStatus.RESPONDED), (2, 1, AttemptStatus.RESPONDED)]
    execution = ToolExecution.objects.get(run=run)
    assert execution.idempotency_key == f"agent:{run.pk}:1:0"
    assert execution.tool == "lookup_order"


def test_tick_delivered_again_while_run_is_inside_slow_tool_does_nothing(stock_latency):
    # given: a stock question (a slow warehouse call) being executed by a first worker
    stock_latency(0.8)
    shop = factories.merchant_create()
    customer = customer_with_order(shop, "ORD-8")
    run = queue(customer, shop, "ORD-8", STOCK_QUESTION)
    first = Background(worker.tick)
    wait_for(tool_started(run.pk, "check_stock"), timeout=10, interval=0.02)

    # when: the same tick is delivered to a second worker meanwhile
    second = Background(worker.tick)

    # then: the second finds nothing to claim; the first finishes the run once
    assert second.join() == 0
    assert first.join() == 1
    assert_completed_once(run.pk)
    assert sorted(ToolExecution.objects.filter(run=run).values_list("tool", flat=True)) == [
        "check_stock",
        "lookup_order",
    ]
    assert types(run.pk).count("run.started") == 1
    assert [status for _, _, status in attempts(run.pk)] == [AttemptStatus.RESPONDED] * 3


def test_four_workers_complete_twenty_runs_of_several_customers_exactly_once(demo):
    # given: 20 queued runs, 2 each for 10 customers of two shops
    other = Merchant.objects.get(slug="other-shop")
    run_ids = []
    for index in range(10):
        shop = demo if index % 2 else other
        number = f"ORD-{5000 + index}"
        customer = customer_with_order(shop, number)
        run_ids.append(queue(customer, shop, number).pk)
        run_ids.append(queue(customer, shop, number, "Where is {order}, please?").pk)

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
        assert "ORD-" in AgentRun.objects.get(pk=run_id).result
    assert ModelAttempt.objects.filter(run_id__in=run_ids).count() == 40
    assert ToolExecution.objects.filter(run_id__in=run_ids).count() == 20


def test_cancels_racing_four_workers_leave_each_run_with_one_final_word(demo, stock_latency):
    # given: 12 queued runs, some with a (short) slow tool
    stock_latency(0.15)
    run_ids = []
    for index in range(6):
        number = f"ORD-{6000 + index}"
        customer = customer_with_order(demo, number)
        run_ids.append(queue(customer, demo, number).pk)
        run_ids.append(queue(customer, demo, number, "Is {order} in stock in size 43?").pk)
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


# --- stale writers ---------------------------------------------------------------------------


def test_stale_lease_holder_cannot_commit_after_takeover():
    # given: worker A claimed the run, its lease expired, and worker B took the run over
    shop = factories.merchant_create()
    customer = customer_with_order(shop, "ORD-3")
    run = queue(customer, shop, "ORD-3")
    lease_a = helpers.run_claim()
    assert lease_a is not None and lease_a.token == 1
    expire_lease(run.pk)
    lease_b = helpers.run_claim()
    assert lease_b is not None
    assert (lease_b.run_id, lease_b.token) == (run.pk, 2)
    # B found A's STARTED attempt: it may have reached the model, so it is UNKNOWN now
    assert attempts(run.pk) == [(0, 1, AttemptStatus.UNKNOWN), (0, 2, AttemptStatus.STARTED)]
    before = snapshot(run.pk)

    # when: A commits the model answer it got meanwhile
    stale = StepCommit(
        next_node=Node.DONE,
        messages=[{"role": "assistant", "content": "stale words"}],
        events=[("model.responded", {"usage": {"total_tokens": 1}})],
        attempt_status=AttemptStatus.RESPONDED,
        attempt_usage={"total_tokens": 1},
        complete_with="stale words",
    )
    with pytest.raises(LostRun):
        helpers.run_step_commit(lease=lease_a, commit=stale)

    # then: nothing of A's was written
    assert snapshot(run.pk) == before

    # and A's whole slice writes nothing either
    worker.run_slices([lease_a])
    assert snapshot(run.pk) == before

    # and B finishes the run
    worker.run_slices([lease_b])
    assert_completed_once(run.pk)
    assert "stale words" not in AgentRun.objects.get(pk=run.pk).result
    assert [data["lease"] for data in started_events(run.pk)] == [1, 2]
    assert attempts(run.pk) == [
        (0, 1, AttemptStatus.UNKNOWN),
        (0, 2, AttemptStatus.RESPONDED),
        (2, 1, AttemptStatus.RESPONDED),
    ]
    assert AgentRun.objects.get(pk=run.pk).model_calls == 3  # the UNKNOWN call counts
    assert ToolExecution.objects.filter(run=run).count() == 1


def started_events(run_id) -> list[dict]:
    return list(
        RunEvent.objects.filter(run_id=run_id, type="run.started")
        .order_by("seq")
        .values_list("data", flat=True)
    )


def test_cancel_while_worker_holds_run_lets_it_commit_nothing():
    # given: a worker holds the run
    shop = factories.merchant_create()
    customer = customer_with_order(shop, "ORD-4")
    run = queue(customer, shop, "ORD-4")
    lease = helpers.run_claim()
    assert lease is not None

    # when: the run is cancelled, then the worker executes its slice
    services.run_cancel(run=AgentRun.objects.get(pk=run.pk), reason="customer said stop")
    worker.run_slices([lease])

    # then: the cancellation is the run's last word
    run.refresh_from_db()
    assert run.status == RunStatus.CANCELLED
    timeline = types(run.pk)
    assert timeline.count("run.cancelled") == 1
    assert timeline[-1] == "run.cancelled"
    assert "run.completed" not in timeline
    assert "model.responded" not in timeline
    assert run.result is None
    assert not ToolExecution.objects.filter(run=run).exists()
    # the model answered after the cancel: its attempt alone records what the call cost
    [(status, usage)] = ModelAttempt.objects.filter(run=run).values_list("status", "usage")
    assert status == AttemptStatus.RESPONDED and usage["total_tokens"] > 0
    assert_timeline_contiguous(run.pk)


def test_cancel_while_worker_waits_on_slow_tool_abandons_it_at_once(stock_latency):
    # given: a worker inside a slow stock check
    stock_latency(10)
    shop = factories.merchant_create()
    customer = customer_with_order(shop, "ORD-5")
    run = queue(customer, shop, "ORD-5", STOCK_QUESTION)
    busy = Background(worker.tick)
    wait_for(tool_started(run.pk, "check_stock"), timeout=10, interval=0.02)

    # when
    cancelled_at = time.monotonic()
    services.run_cancel(run=AgentRun.objects.get(pk=run.pk))

    # then: the worker lets go within a poll or two, long before the tool would finish
    busy.join(timeout=5)
    assert time.monotonic() - cancelled_at < 2
    run.refresh_from_db()
    assert run.status == RunStatus.CANCELLED
    timeline = types(run.pk)
    assert timeline.count("run.cancelled") == 1
    assert timeline[-1] == "run.cancelled"
    assert "run.completed" not in timeline
    assert list(ToolExecution.objects.filter(run=run).values_list("tool", flat=True)) == [
        "lookup_order"
    ]
    assert_timeline_contiguous(run.pk)


# --- fairness and capacity -------------------------------------------------------------------


def test_claim_passes_over_shop_at_capacity_and_claims_another_shops_run():
    # given: a shop allowed one running run, which holds a live lease, and has another queued
    full = factories.merchant_create(max_running_runs=1)
    other = factories.merchant_create()
    full_customer = customer_with_order(full, "ORD-10")
    other_customer = customer_with_order(other, "ORD-20")
    held = queue(full_customer, full, "ORD-10")
    held_lease = helpers.run_claim()
    assert held_lease is not None and held_lease.run_id == held.pk
    waiting = queue(full_customer, full, "ORD-10", "Where is {order}?")
    elsewhere = queue(other_customer, other, "ORD-20")
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
    plain = factories.merchant_create()
    reserved = factories.merchant_create(reserved_slots=1, last_scheduled_at=timezone.now())
    plain_run = queue(customer_with_order(plain, "ORD-30"), plain, "ORD-30")
    reserved_customer = customer_with_order(reserved, "ORD-40")
    reserved_runs = [
        queue(reserved_customer, reserved, "ORD-40"),
        queue(reserved_customer, reserved, "ORD-40", "Where is {order}?"),
    ]

    # when
    claimed = [helpers.run_claim().run_id for _ in range(3)]

    # then: the reserved shop first; once its slot is used, the fair order again
    assert claimed == [reserved_runs[0].pk, plain_run.pk, reserved_runs[1].pk]


def test_claim_serves_shop_scheduled_longest_ago_first_then_oldest_run():
    # given: three shops scheduled at different times; runs queued newest shop first
    now = timezone.now()
    recent = factories.merchant_create(last_scheduled_at=now - timedelta(minutes=1))
    stale = factories.merchant_create(last_scheduled_at=now - timedelta(hours=1))
    never = factories.merchant_create()
    runs = {}
    for name, shop in (("recent", recent), ("stale", stale), ("never", never)):
        customer = customer_with_order(shop, f"ORD-{shop.pk}")
        runs[name] = [
            queue(customer, shop, f"ORD-{shop.pk}").pk,
            queue(customer, shop, f"ORD-{shop.pk}", "Where is {order}?").pk,
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


# --- maintain --------------------------------------------------------------------------------


def test_maintain_requeues_run_with_expired_lease_and_it_resumes():
    # given: a run whose worker vanished (lease expired)
    shop = factories.merchant_create()
    customer = customer_with_order(shop, "ORD-50")
    run = queue(customer, shop, "ORD-50")
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
    shop = factories.merchant_create()
    run = queue(customer_with_order(shop, "ORD-51"), shop, "ORD-51")
    lease = helpers.run_claim()

    report = services.maintain()

    assert report["requeued"] == 0
    run.refresh_from_db()
    assert run.status == RunStatus.RUNNING
    assert run.lease_token == lease.token


def test_maintain_fails_queued_run_past_its_deadline_once():
    # given: a queued run whose deadline passed
    shop = factories.merchant_create()
    run = queue(customer_with_order(shop, "ORD-60"), shop, "ORD-60")
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


def test_run_held_past_its_deadline_fails_at_its_workers_next_step(settings):
    # given: a worker holds a run with a lease that outlives the run's deadline
    settings.AGENTPORTAL = {**settings.AGENTPORTAL, "LEASE_SECONDS": 3600.0}
    shop = factories.merchant_create()
    run = queue(customer_with_order(shop, "ORD-61"), shop, "ORD-61")
    lease = helpers.run_claim()

    # when: the deadline passes; maintain leaves the run to its worker, which steps on
    with time_machine.travel(run.deadline_at + timedelta(seconds=1)):
        services.heartbeat_record(name=services.process_name())  # the worker is alive
        assert services.maintain()["deadlines"] == 0
        worker.run_slices([lease])

    # then: the worker noticed the deadline (services.deadlines_enforce relies on it)
    run.refresh_from_db()
    assert run.status == RunStatus.FAILED
    assert run.error_code == ErrorCode.DEADLINE_EXCEEDED
    assert types(run.pk).count("run.failed") == 1


def test_claim_fails_overdue_run_and_claims_the_next_one():
    # given: two queued runs of a shop; the older one is past its deadline
    shop = factories.merchant_create()
    customer = customer_with_order(shop, "ORD-62")
    overdue = queue(customer, shop, "ORD-62")
    fresh = queue(customer, shop, "ORD-62", "Where is {order}?")
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


# --- slices ----------------------------------------------------------------------------------


def test_run_released_at_end_of_slice_resumes_without_losing_a_model_call(settings):
    # given: a worker whose slice is spent before it executes anything
    settings.AGENTPORTAL = {**settings.AGENTPORTAL, "SLICE_SECONDS": 0.0}
    shop = factories.merchant_create()
    run = queue(customer_with_order(shop, "ORD-63"), shop, "ORD-63")
    lease = helpers.run_claim()

    # when: it executes its slice, it gives the run back to the queue
    worker.run_slices([lease])
    run.refresh_from_db()
    assert run.status == RunStatus.QUEUED
    assert run.lease_expires_at is None

    # and a worker with a normal slice continues it
    settings.AGENTPORTAL = {**settings.AGENTPORTAL, "SLICE_SECONDS": 120.0}
    assert worker.tick() == 1

    # then: the model was never called in the spent slice, so that costs no model call
    assert_completed_once(run.pk)
    assert AgentRun.objects.get(pk=run.pk).model_calls == 2
    assert [status for _, _, status in attempts(run.pk)] == [AttemptStatus.RESPONDED] * 2


# --- budget and access -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "limits",
    [
        pytest.param({"max_model_calls": 1}, id="model-calls"),
        pytest.param({"max_steps": 2}, id="steps"),
    ],
)
def test_run_over_its_release_budget_fails_with_budget_exhausted(limits):
    # given: a release allowing less than the two model calls an order question needs
    shop = factories.merchant_create()
    publish_limits(shop, **limits)
    run = queue(customer_with_order(shop, "ORD-70"), shop, "ORD-70")
    for name, value in limits.items():
        assert run.release_snapshot["manifest"]["limits"][name] == value

    # when: the worker runs it (no exception escapes)
    assert worker.tick() == 1

    # then
    run.refresh_from_db()
    assert run.status == RunStatus.FAILED
    assert run.error_code == ErrorCode.BUDGET_EXHAUSTED
    assert run.model_calls == 1
    assert attempts(run.pk) == [(0, 1, AttemptStatus.RESPONDED)]
    assert ToolExecution.objects.filter(run=run).count() == 1
    failed = RunEvent.objects.filter(run=run, type="run.failed")
    assert failed.count() == 1
    assert failed.get().data["error_code"] == ErrorCode.BUDGET_EXHAUSTED
    assert types(run.pk)[-1] == "run.failed"
    assert_timeline_contiguous(run.pk)


def test_membership_revoked_after_claim_fails_run_with_permission_revoked(demo):
    # given: a worker holds alice's run
    alice = User.objects.get(username="alice")
    run = factories.run_queue(
        customer=alice, merchant=demo, message="What is the status of order ORD-1001?"
    )
    lease = helpers.run_claim()
    assert lease is not None and lease.run_id == run.pk

    # when: alice's membership is revoked, then the worker executes its slice
    assert membership_revoke(membership=Membership.objects.get(user=alice, merchant=demo))
    worker.run_slices([lease])

    # then: the run failed, and nothing after the claim was committed
    run.refresh_from_db()
    assert run.status == RunStatus.FAILED
    assert run.error_code == ErrorCode.PERMISSION_REVOKED
    timeline = types(run.pk)
    assert timeline.count("run.failed") == 1
    assert timeline[-1] == "run.failed"
    assert "model.responded" not in timeline
    assert not ToolExecution.objects.filter(run=run).exists()
    assert_timeline_contiguous(run.pk)


def test_membership_revoked_during_slow_tool_fails_run_and_drops_tool_result(demo, stock_latency):
    # given: a worker inside a slow stock check for alice
    stock_latency(0.6)
    alice = User.objects.get(username="alice")
    run = factories.run_queue(
        customer=alice, merchant=demo, message=STOCK_QUESTION.format(order="ORD-1002")
    )
    busy = Background(worker.tick)
    wait_for(tool_started(run.pk, "check_stock"), timeout=10, interval=0.02)

    # when
    membership_revoke(membership=Membership.objects.get(user=alice, merchant=demo))
    busy.join()

    # then: the stock result was not committed for a customer who lost access
    run.refresh_from_db()
    assert run.status == RunStatus.FAILED
    assert run.error_code == ErrorCode.PERMISSION_REVOKED
    assert list(ToolExecution.objects.filter(run=run).values_list("tool", flat=True)) == [
        "lookup_order"
    ]
    assert types(run.pk)[-1] == "run.failed"
    assert_timeline_contiguous(run.pk)
