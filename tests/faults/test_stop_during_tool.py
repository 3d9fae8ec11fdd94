"""/stop acts at once through the real worker cluster, even in the middle of a slow tool."""

import pytest

from runs.models import AgentRun, RunEvent, RunStatus, ToolExecution
from tests.conftest import wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.django_db(transaction=True)]

STOCK = "Is the shoe of ORD-1002 in stock in size 43?"


def _in_check_stock(run_id) -> bool:
    return (
        RunEvent.objects.filter(
            run_id=run_id, type="tool.started", data__tool="check_stock"
        ).exists()
        and ToolExecution.objects.filter(run_id=run_id, tool="lookup_order").exists()
    )


def _open(client) -> str:
    return client.post("/api/v1/conversations", {}, format="json").json()["id"]


def _say(client, conversation_id, text):
    return client.post(
        f"/api/v1/conversations/{conversation_id}/messages", {"text": text}, format="json"
    )


def test_stop_during_a_slow_tool_cancels_at_once_and_nothing_lands_after(demo, api, cluster):
    # given: one worker, inside a 3-second warehouse call
    cluster(workers=1, env={"AGENTPORTAL_STOCK_LATENCY_SECONDS": "3"})
    alice = api("alice")
    conversation_id = _open(alice)
    run_id = _say(alice, conversation_id, STOCK).json()["run_id"]
    wait_for(lambda: _in_check_stock(run_id))

    # when
    response = _say(alice, conversation_id, "/stop")

    # then: answered while the tool was still running
    assert response.status_code == 200
    assert response.json()["result"]["cancelled_run_id"] == run_id
    assert not ToolExecution.objects.filter(run_id=run_id, tool="check_stock").exists()
    assert AgentRun.objects.get(pk=run_id).status == RunStatus.CANCELLED
    conversation = alice.get(f"/api/v1/conversations/{conversation_id}").json()
    assert conversation["active_run_id"] is None

    # and after the tool would have finished, nothing of the run landed
    follow_up = _say(alice, conversation_id, "What is the status of order ORD-1001?")
    wait_for(lambda: AgentRun.objects.get(pk=follow_up.json()["run_id"]).is_finished)
    types = list(RunEvent.objects.filter(run_id=run_id).values_list("type", flat=True))
    assert types[-1] == "run.cancelled"
    assert types.count("run.cancelled") == 1
    assert "run.completed" not in types and "message.assistant" not in types
    assert not ToolExecution.objects.filter(run_id=run_id, tool="check_stock").exists()


def test_stop_answers_while_the_only_worker_is_busy_elsewhere(demo, api, cluster):
    # given: the only worker is busy on bob's slow stock check
    cluster(workers=1, env={"AGENTPORTAL_STOCK_LATENCY_SECONDS": "4"})
    bob = api("bob")
    busy = bob.post(
        "/api/v1/runs",
        {"message": "Is ORD-2001 in stock in size 43?"},
        format="json",
        HTTP_IDEMPOTENCY_KEY="busy",
    ).json()["id"]
    wait_for(lambda: _in_check_stock(busy))
    alice = api("alice")
    conversation_id = _open(alice)
    waiting = _say(alice, conversation_id, "What is the status of order ORD-1001?")

    # when: alice stops her run, which no worker could take yet
    response = _say(alice, conversation_id, "/stop")

    # then: done in the request, while the worker is still busy
    assert response.status_code == 200
    assert AgentRun.objects.get(pk=waiting.json()["run_id"]).status == RunStatus.CANCELLED
    assert AgentRun.objects.get(pk=busy).status == RunStatus.RUNNING
    wait_for(lambda: AgentRun.objects.get(pk=busy).is_finished)
    assert AgentRun.objects.get(pk=busy).status == RunStatus.COMPLETED
