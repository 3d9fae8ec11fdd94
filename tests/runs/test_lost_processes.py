"""Runs of a worker process that stopped reporting go back to the queue before their leases
expire; runs of a process that reports, or claimed a moment ago, stay where they are."""

from datetime import timedelta

import pytest
from django.utils import timezone

from runs import services
from runs.models import AgentRun, RunStatus, WorkerHeartbeat
from tests.runs import helpers
from tests.runs.helpers import customer_with_parcel, queue, shop_create

pytestmark = pytest.mark.django_db(transaction=True)


def _held(shop, number: str, *, holder: str, quiet_for: float):
    """A run claimed by `holder`, unchanged for `quiet_for` seconds."""
    queue(customer_with_parcel(shop, number), shop, number)
    lease = helpers.run_claim()
    AgentRun.objects.filter(pk=lease.run_id).update(
        lease_holder=holder, updated_at=timezone.now() - timedelta(seconds=quiet_for)
    )
    return lease


def _reported(holder: str, seconds_ago: float) -> None:
    WorkerHeartbeat.objects.create(
        name=holder, seen_at=timezone.now() - timedelta(seconds=seconds_ago), report={}
    )


def test_a_claim_names_the_process_that_holds_the_lease():
    shop = shop_create()
    queue(customer_with_parcel(shop, "PCL-1"), shop, "PCL-1")

    lease = helpers.run_claim()

    assert AgentRun.objects.get(pk=lease.run_id).lease_holder == services.process_name()


def test_the_runs_of_a_process_that_stopped_reporting_go_back_to_the_queue():
    # given runs held by a process silent for 20 s, by one that never reported, by one that
    # reported 2 s ago, and one claimed a moment ago by a process that has not reported yet
    shop = shop_create()
    silent = _held(shop, "PCL-1", holder="process:a:1", quiet_for=20)
    _reported("process:a:1", seconds_ago=20)
    never = _held(shop, "PCL-2", holder="process:b:2", quiet_for=20)
    alive = _held(shop, "PCL-3", holder="process:c:3", quiet_for=20)
    _reported("process:c:3", seconds_ago=2)
    fresh = _held(shop, "PCL-4", holder="process:d:4", quiet_for=1)

    # when
    released = services.leases_of_lost_processes_release()

    # then the first two are queued again, to be taken over by the next claim
    assert released == 2
    status = dict(AgentRun.objects.values_list("pk", "status"))
    assert status[silent.run_id] == status[never.run_id] == RunStatus.QUEUED
    assert status[alive.run_id] == status[fresh.run_id] == RunStatus.RUNNING
    taken = {helpers.run_claim().run_id for _ in range(2)}
    assert taken == {silent.run_id, never.run_id}

    # and the process that was only slow commits nothing more of them
    with pytest.raises(services.LostRun):
        helpers.run_step(silent)
    assert services.leases_of_lost_processes_release() == 0
