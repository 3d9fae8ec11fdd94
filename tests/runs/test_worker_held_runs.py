"""What becomes of a run a worker holds, with real threads on real connections (DESIGN 2, 5,
9): a stale lease holder writes nothing, a cancel or a lost membership is the run's last word,
a deadline or a release's budget fails it at the worker's next step, and a spent slice gives
it back to the queue.

Every thread works on its own database connection and closes it at its end; the same tests
run on SQLite (IMMEDIATE transactions, no row locks) and on PostgreSQL (row locks).
The runs ask the test extension's parcel agent (tests/extension_app/parcels.py).
"""

from datetime import timedelta
from typing import Any

import pytest
import time_machine
from django.contrib.auth.models import User

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
)
from runs.releases import Limits, ReleaseManifest, ToolDeclaration, graph_release_default
from runs.services import LostRun, StepCommit
from tests import factories
from tests.conftest import wait_for
from tests.extension_app import parcels
from tests.runs import helpers
from tests.runs.helpers import (
    LOCKER_QUESTION,
    assert_completed_once,
    assert_timeline_contiguous,
    attempts,
    customer_with_parcel,
    events,
    expire_lease,
    queue,
    shop_create,
    tool_started,
    types,
)
from tests.threads import Background

pytestmark = pytest.mark.django_db(transaction=True)

# --- helpers -------------------------------------------------------------------------------


def shop_with_limits(**limits: int) -> Merchant:
    """A new shop whose one published release plays the parcels script within `limits`."""
    shop = factories.merchant_create()
    AgentRelease.objects.create(
        merchant=shop,
        version=1,
        graph_version=graph_release_default().version,
        manifest=ReleaseManifest(
            model=f"scripted:{parcels.SCRIPT}",
            tools=[ToolDeclaration(name=name) for name in parcels.TOOLS],
            limits=Limits(**limits),
        ).model_dump(),
        published=True,
    )
    return shop


def started_events(run_id) -> list[dict]:
    return list(
        RunEvent.objects.filter(run_id=run_id, type="run.started")
        .order_by("seq")
        .values_list("data", flat=True)
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


# --- stale writers ---------------------------------------------------------------------------


def test_stale_lease_holder_cannot_commit_after_takeover():
    # given: worker A claimed the run, its lease expired, and worker B took the run over
    shop = shop_create()
    customer = customer_with_parcel(shop, "PCL-3")
    run = queue(customer, shop, "PCL-3")
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


def test_cancel_while_worker_holds_run_lets_it_commit_nothing():
    # given: a worker holds the run
    shop = shop_create()
    customer = customer_with_parcel(shop, "PCL-4")
    run = queue(customer, shop, "PCL-4")
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


def test_cancel_while_worker_waits_on_slow_tool_abandons_it_at_once(locker_latency):
    # given: a worker inside a locker search that would take an hour
    locker_latency(3600)
    shop = shop_create()
    customer = customer_with_parcel(shop, "PCL-5")
    run = queue(customer, shop, "PCL-5", LOCKER_QUESTION)
    busy = Background(worker.tick)
    wait_for(tool_started(run.pk, "find_locker"), timeout=10, interval=0.02)

    # when
    services.run_cancel(run=AgentRun.objects.get(pk=run.pk))

    # then: the worker lets go of the search (join fails on a worker still in it)
    busy.join(timeout=30)
    run.refresh_from_db()
    assert run.status == RunStatus.CANCELLED
    timeline = types(run.pk)
    assert timeline.count("run.cancelled") == 1
    assert timeline[-1] == "run.cancelled"
    assert "run.completed" not in timeline
    assert list(ToolExecution.objects.filter(run=run).values_list("tool", flat=True)) == [
        "track_parcel"
    ]
    assert_timeline_contiguous(run.pk)


# --- deadlines ------------------------------------------------------------------------------


def test_run_held_past_its_deadline_fails_at_its_workers_next_step(settings):
    # given: a worker holds a run with a lease that outlives the run's deadline
    settings.AGENTPORTAL = {**settings.AGENTPORTAL, "LEASE_SECONDS": 3600.0}
    shop = shop_create()
    run = queue(customer_with_parcel(shop, "PCL-61"), shop, "PCL-61")
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


# --- slices ----------------------------------------------------------------------------------


def test_run_released_at_end_of_slice_resumes_without_losing_a_model_call(settings):
    # given: a worker whose slice is spent before it executes anything
    settings.AGENTPORTAL = {**settings.AGENTPORTAL, "SLICE_SECONDS": 0.0}
    shop = shop_create()
    run = queue(customer_with_parcel(shop, "PCL-63"), shop, "PCL-63")
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
    # given: a release allowing less than the two model calls a parcel question needs
    shop = shop_with_limits(**limits)
    run = queue(customer_with_parcel(shop, "PCL-70"), shop, "PCL-70")
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


def test_membership_revoked_after_claim_fails_run_with_permission_revoked(parcel_shop):
    # given: a worker holds pat's run
    pat = User.objects.get(username="pat")
    run = queue(pat, parcel_shop, "PCL-1")
    lease = helpers.run_claim()
    assert lease is not None and lease.run_id == run.pk

    # when: pat's membership is revoked, then the worker executes its slice
    assert membership_revoke(membership=Membership.objects.get(user=pat, merchant=parcel_shop))
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


def test_membership_revoked_during_slow_tool_fails_run_and_drops_tool_result(
    parcel_shop, locker_latency
):
    # given: a worker inside a slow locker search for pat
    locker_latency(0.6)
    pat = User.objects.get(username="pat")
    run = queue(pat, parcel_shop, "PCL-1", LOCKER_QUESTION)
    busy = Background(worker.tick)
    wait_for(tool_started(run.pk, "find_locker"), timeout=10, interval=0.02)

    # when
    membership_revoke(membership=Membership.objects.get(user=pat, merchant=parcel_shop))
    busy.join()

    # then: the locker result was not committed for a customer who lost access
    run.refresh_from_db()
    assert run.status == RunStatus.FAILED
    assert run.error_code == ErrorCode.PERMISSION_REVOKED
    assert list(ToolExecution.objects.filter(run=run).values_list("tool", flat=True)) == [
        "track_parcel"
    ]
    assert types(run.pk)[-1] == "run.failed"
    assert_timeline_contiguous(run.pk)
