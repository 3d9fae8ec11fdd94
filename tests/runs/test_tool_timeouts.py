"""A blocking tool call has a time limit: past it the call is abandoned (its cancellation
token set, its thread no longer awaited), the model is told, and the run goes on."""

import dataclasses

import pytest
from django.contrib.auth.models import User

from runs import services, worker
from runs.models import AgentRun, RunEvent, RunStatus, ToolExecution
from runs.tools import TOOLS
from tests import factories

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def short_tool_timeout(settings):
    settings.AGENTPORTAL = {
        **settings.AGENTPORTAL,
        "TOOL_TIMEOUT_SECONDS": 0.3,
        "STOCK_LATENCY_SECONDS": 60,
    }


def test_a_tool_past_its_time_limit_is_abandoned_and_the_model_explains(demo, short_tool_timeout):
    # given a stock check that would take a minute, and a quick question beside it
    alice = User.objects.get(username="alice")
    slow = factories.run_queue(customer=alice, merchant=demo, message="Is ORD-1002 in stock?")
    quick = factories.run_queue(customer=alice, merchant=demo, message="Status of ORD-1001?")

    # when one worker executes both
    worker.run_slices(services.runs_claim(limit=2))

    # then the slow call was stopped at its limit and the model told the customer
    slow.refresh_from_db()
    quick.refresh_from_db()
    assert (slow.status, quick.status) == (RunStatus.COMPLETED, RunStatus.COMPLETED)
    [stock] = ToolExecution.objects.filter(run=slow, tool="check_stock")
    assert stock.result["timed_out"] is True
    assert "took longer than 0.3 seconds" in slow.result
    # and the quick run did not wait for it: it finished before the slow call's limit
    assert quick.finished_at < stock.created_at


def test_a_tool_may_declare_a_shorter_limit_than_the_setting(settings):
    settings.AGENTPORTAL = {**settings.AGENTPORTAL, "TOOL_TIMEOUT_SECONDS": 30}
    stock = TOOLS["check_stock"]

    assert stock.timeout() == 30
    assert dataclasses.replace(stock, timeout_seconds=5).timeout() == 5
    assert dataclasses.replace(stock, timeout_seconds=90).timeout() == 30


def test_the_timed_out_call_is_recorded_once_on_its_timeline(demo, short_tool_timeout):
    alice = User.objects.get(username="alice")
    slow = factories.run_queue(customer=alice, merchant=demo, message="Is ORD-1002 in stock?")

    worker.run_slices(services.runs_claim(limit=1))

    results = RunEvent.objects.filter(run=slow, type="tool.result", data__tool="check_stock")
    assert [event.data["status"] for event in results] == ["FAILED"]
    assert AgentRun.objects.get(pk=slow.pk).status == RunStatus.COMPLETED
