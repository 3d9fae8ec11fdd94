"""A blocking tool call has a time limit: past it the call is abandoned (its cancellation
token set, its thread no longer awaited), the model is told, and the run goes on."""

import dataclasses

import pytest
from django.contrib.auth.models import User

from runs import services, worker
from runs.models import AgentRun, RunEvent, RunStatus, ToolExecution
from runs.tools import TOOLS
from tests.runs.helpers import LOCKER_QUESTION, STATUS_QUESTION, queue

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def short_tool_timeout(settings, locker_latency):
    settings.AGENTPORTAL = {**settings.AGENTPORTAL, "TOOL_TIMEOUT_SECONDS": 0.3}
    locker_latency(60)


def test_a_tool_past_its_time_limit_is_abandoned_and_the_model_explains(
    parcel_shop, short_tool_timeout
):
    # given a locker search that would take a minute, and a quick question beside it
    pat = User.objects.get(username="pat")
    slow = queue(pat, parcel_shop, "PCL-1", LOCKER_QUESTION)
    quick = queue(pat, parcel_shop, "PCL-1", STATUS_QUESTION)

    # when one worker executes both
    worker.run_slices(services.runs_claim(limit=2))

    # then the slow call was stopped at its limit and the model told the customer
    slow.refresh_from_db()
    quick.refresh_from_db()
    assert (slow.status, quick.status) == (RunStatus.COMPLETED, RunStatus.COMPLETED)
    [locker] = ToolExecution.objects.filter(run=slow, tool="find_locker")
    assert locker.result["timed_out"] is True
    assert "took longer than 0.3 seconds" in slow.result
    # and the quick run did not wait for it: it finished before the slow call's limit
    assert quick.finished_at < locker.created_at


def test_a_tool_may_declare_a_shorter_limit_than_the_setting(settings):
    settings.AGENTPORTAL = {**settings.AGENTPORTAL, "TOOL_TIMEOUT_SECONDS": 30}
    locker = TOOLS["find_locker"]

    assert locker.timeout() == 30
    assert dataclasses.replace(locker, timeout_seconds=5).timeout() == 5
    assert dataclasses.replace(locker, timeout_seconds=90).timeout() == 30


def test_the_timed_out_call_is_recorded_once_on_its_timeline(parcel_shop, short_tool_timeout):
    pat = User.objects.get(username="pat")
    slow = queue(pat, parcel_shop, "PCL-1", LOCKER_QUESTION)

    worker.run_slices(services.runs_claim(limit=1))

    results = RunEvent.objects.filter(run=slow, type="tool.result", data__tool="find_locker")
    assert [event.data["status"] for event in results] == ["FAILED"]
    assert AgentRun.objects.get(pk=slow.pk).status == RunStatus.COMPLETED
