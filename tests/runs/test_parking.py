"""A run a worker cannot make sense of is PARKED for an operator: it frees its shop's capacity
and its customer's open-run slot, and fails with INTERNAL_ERROR if nobody repairs it."""

from datetime import timedelta

import pytest
import time_machine
from django.contrib.auth.models import User
from django.utils import timezone

from runs import services, worker
from runs.models import ACTIVE_STATUSES, AgentRun, ErrorCode, RunStatus
from tests.pages import signed_in
from tests.runs.helpers import STATUS_QUESTION, queue, types

pytestmark = pytest.mark.django_db

STATUS = STATUS_QUESTION.format(parcel="PCL-1")


def _script_retired(run_id) -> None:
    """Break the run's release snapshot: it names a script the code no longer has."""
    snapshot = AgentRun.objects.get(pk=run_id).release_snapshot
    manifest = {**snapshot["manifest"], "model": "scripted:retired"}
    AgentRun.objects.filter(pk=run_id).update(release_snapshot={**snapshot, "manifest": manifest})


@pytest.fixture
def parked(parcel_shop) -> AgentRun:
    """A run of pat's parked in a shop of capacity 1."""
    parcel_shop.max_running_runs = 1
    parcel_shop.save(update_fields=["max_running_runs"])
    run = queue(User.objects.get(username="pat"), parcel_shop, "PCL-1")
    _script_retired(run.pk)
    worker.tick()
    run.refresh_from_db()
    assert run.status == RunStatus.PARKED
    return run


def test_a_parked_run_frees_its_shops_capacity_and_its_customers_slot(parcel_shop, api, parked):
    # given the parked run, and pat at two more unfinished runs
    pat = User.objects.get(username="pat")
    others = [queue(pat, parcel_shop, "PCL-1") for _ in range(2)]

    # when pat starts a third, and the workers run (the shop takes one run at a time)
    third = api("pat", merchant="parcel-shop").post(
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
    assert "retired" in parked.error_detail
    status = api("pat", merchant="parcel-shop").get(f"/api/v1/runs/{parked.pk}").json()["status"]
    assert status == "PARKED"


def test_a_parked_run_nobody_repairs_fails_with_internal_error(parked):
    with time_machine.travel(timezone.now() + timedelta(hours=23)):
        services.maintain()
        parked.refresh_from_db()
        assert parked.status == RunStatus.PARKED

    with time_machine.travel(timezone.now() + timedelta(hours=24, seconds=1)):
        report = services.maintain()

    parked.refresh_from_db()
    assert report["parked_expired"] == 1
    assert (parked.status, parked.error_code) == (RunStatus.FAILED, ErrorCode.INTERNAL_ERROR)


def test_an_operator_fails_a_parked_run_from_the_admin(parked):
    # given the operator (a superuser) in the admin
    client = signed_in(User.objects.create_superuser("root", password="pw"))

    # when they fail it
    client.post(
        "/admin/runs/agentrun/",
        {"action": "fail_parked_selected", "_selected_action": [parked.pk]},
        follow=True,
    )

    # then it failed with INTERNAL_ERROR, saying who failed it
    parked.refresh_from_db()
    assert (parked.status, parked.error_code) == (RunStatus.FAILED, ErrorCode.INTERNAL_ERROR)
    assert parked.error_detail == "An operator (root) failed it."
    assert types(parked.pk)[-1] == "run.failed"


def test_stopping_a_parked_run_starts_the_next_message_only_within_the_limit(parcel_shop, api):
    # given pat's conversation whose run was parked, a message queued behind it, and
    # three other runs of pat's (the parked one did not count)
    pat = api("pat", merchant="parcel-shop")
    conversation = pat.post("/api/v1/conversations", {}, format="json").json()["id"]

    def say(text):
        return pat.post(
            f"/api/v1/conversations/{conversation}/messages", {"text": text}, format="json"
        )

    run_id = say(STATUS).json()["run_id"]
    _script_retired(run_id)
    worker.tick()
    assert AgentRun.objects.get(pk=run_id).status == RunStatus.PARKED
    assert say(STATUS).json()["message"]["status"] == "QUEUED"
    customer = User.objects.get(username="pat")
    others = [queue(customer, parcel_shop, "PCL-1") for _ in range(3)]

    # when pat stops the parked run
    stopped = say("/stop")

    # then the queued message waits: a fourth open run would pass pat's limit
    assert stopped.json()["result"]["cancelled_run_id"] == run_id
    open_runs = AgentRun.objects.filter(account=customer, status__in=ACTIVE_STATUSES)
    assert open_runs.count() == 3
    # and once one of the others ends, the backstop starts it
    services.run_cancel(run=others[0])
    assert services.maintain()["conversations_start_waiting"] == 1
