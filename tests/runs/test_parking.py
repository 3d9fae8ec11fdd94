"""A run a worker cannot make sense of is PARKED for an operator: it frees its shop's capacity
and its customer's open-run slot, and fails with INTERNAL_ERROR if nobody repairs it."""

from datetime import timedelta

import pytest
import time_machine
from django.contrib.auth.models import User
from django.utils import timezone

from runs import services, worker
from runs.models import ACTIVE_STATUSES, AgentRun, ErrorCode, RunStatus
from tests import factories
from tests.approvals.refund_helpers import approved_refund_with_a_broken_snapshot
from tests.pages import signed_in

pytestmark = pytest.mark.django_db

STATUS = "What is the status of order ORD-1001?"


@pytest.fixture
def parked(demo, api) -> AgentRun:
    """A run parked in a shop of capacity 1."""
    demo.max_running_runs = 1
    demo.save(update_fields=["max_running_runs"])
    run, _ = approved_refund_with_a_broken_snapshot(api)
    worker.tick()
    run.refresh_from_db()
    assert run.status == RunStatus.PARKED
    return run


def test_a_parked_run_frees_its_shops_capacity_and_its_customers_slot(demo, api, parked):
    # given the parked run, and alice at two more unfinished runs
    alice = User.objects.get(username="alice")
    others = [factories.run_queue(customer=alice, merchant=demo, message=STATUS) for _ in range(2)]

    # when she starts a third, and the workers run (the shop takes one run at a time)
    third = api("alice").post(
        "/api/v1/runs", {"message": STATUS}, format="json", HTTP_IDEMPOTENCY_KEY="third"
    )
    worker.tick()

    # then the parked run counted against neither limit: every new run completed
    assert third.status_code == 201
    for run in [*others, AgentRun.objects.get(pk=third.json()["id"])]:
        run.refresh_from_db()
        assert run.status == RunStatus.COMPLETED
    parked.refresh_from_db()
    assert parked.status == RunStatus.PARKED
    assert "version" in parked.error_detail
    assert api("alice").get(f"/api/v1/runs/{parked.pk}").json()["status"] == "PARKED"


def test_a_parked_run_nobody_repairs_fails_with_internal_error(demo, parked):
    with time_machine.travel(timezone.now() + timedelta(hours=23)):
        services.maintain()
        parked.refresh_from_db()
        assert parked.status == RunStatus.PARKED

    with time_machine.travel(timezone.now() + timedelta(hours=24, seconds=1)):
        report = services.maintain()

    parked.refresh_from_db()
    assert report["parked_expired"] == 1
    assert (parked.status, parked.error_code) == (RunStatus.FAILED, ErrorCode.INTERNAL_ERROR)


def test_an_operator_fails_a_parked_run_from_the_admin(demo, parked):
    # given the operator (a superuser) in the admin
    client = signed_in("admin")

    # when they fail it
    client.post(
        "/admin/runs/agentrun/",
        {"action": "fail_parked_selected", "_selected_action": [parked.pk]},
        follow=True,
    )

    # then it failed with INTERNAL_ERROR, and its approved call was closed with it
    parked.refresh_from_db()
    assert (parked.status, parked.error_code) == (RunStatus.FAILED, ErrorCode.INTERNAL_ERROR)
    assert parked.approvals.get().status == "CANCELLED"


def test_stopping_a_parked_run_starts_the_next_message_only_within_the_limit(demo, api):
    # given alice's conversation whose run was parked, a message queued behind it, and
    # three other runs of hers (the parked one did not count)
    alice = api("alice")
    conversation = alice.post("/api/v1/conversations", {}, format="json").json()["id"]

    def say(text):
        return alice.post(
            f"/api/v1/conversations/{conversation}/messages", {"text": text}, format="json"
        )

    run_id = say("I want a refund for ORD-1003 amount 20").json()["run_id"]
    worker.tick()
    approval = AgentRun.objects.get(pk=run_id).approvals.get()
    api("sam").post(
        f"/api/v1/approvals/{approval.interrupt_id}/decision",
        {"decision": "approve"},
        format="json",
    )
    AgentRun.objects.filter(pk=run_id).update(state_snapshot={"version": 1})
    worker.tick()
    assert AgentRun.objects.get(pk=run_id).status == RunStatus.PARKED
    assert say(STATUS).json()["message"]["status"] == "QUEUED"
    customer = User.objects.get(username="alice")
    others = [
        factories.run_queue(customer=customer, merchant=demo, message=STATUS) for _ in range(3)
    ]

    # when she stops the parked run
    stopped = say("/stop")

    # then her queued message waits: a fourth open run would pass her limit
    assert stopped.json()["result"]["cancelled_run_id"] == run_id
    open_runs = AgentRun.objects.filter(account=customer, status__in=ACTIVE_STATUSES)
    assert open_runs.count() == 3
    # and once one of the others ends, the backstop starts it
    services.run_cancel(run=others[0])
    assert services.maintain()["conversations_start_waiting"] == 1
