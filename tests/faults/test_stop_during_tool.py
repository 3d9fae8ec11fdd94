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


def test_new_during_a_slow_tool_drops_the_queue_and_the_new_conversation_works(demo, api, cluster):
    # given: a run inside the slow tool and two messages queued behind it
    cluster(workers=1, env={"AGENTPORTAL_STOCK_LATENCY_SECONDS": "3"})
    alice = api("alice")
    conversation_id = _open(alice)
    run_id = _say(alice, conversation_id, STOCK).json()["run_id"]
    queued = [_say(alice, conversation_id, f"And ORD-100{n}?").json() for n in (3, 4)]
    wait_for(lambda: _in_check_stock(run_id))

    # when
    result = _say(alice, conversation_id, "/new").json()["result"]

    # then: cancelled, dropped, and the new conversation runs at once
    assert result["cancelled_run_id"] == run_id
    assert result["dropped_messages"] == 2
    fresh = _say(alice, result["conversation_id"], "What is the status of order ORD-1001?")
    assert fresh.json()["message"]["status"] == "STARTED"
    wait_for(lambda: AgentRun.objects.get(pk=fresh.json()["run_id"]).is_finished)
    assert AgentRun.objects.get(pk=fresh.json()["run_id"]).status == RunStatus.COMPLETED
    messages = alice.get(f"/api/v1/conversations/{conversation_id}/messages").json()["results"]
    by_id = {m["id"]: m for m in messages}
    for message in queued:
        assert by_id[message["message"]["id"]]["status"] == "CANCELLED"
        assert by_id[message["message"]["id"]]["run_id"] is None
    assert AgentRun.objects.filter(conversation_id=conversation_id).count() == 1


def test_takeover_during_a_slow_tool_leaves_the_worker_nothing_to_commit(demo, api, cluster):
    cluster(workers=1, env={"AGENTPORTAL_STOCK_LATENCY_SECONDS": "3"})
    alice = api("alice")
    conversation_id = _open(alice)
    run_id = _say(alice, conversation_id, STOCK).json()["run_id"]
    wait_for(lambda: _in_check_stock(run_id))

    taken = _say(api("sam"), conversation_id, "/takeover").json()["result"]
    held = _say(alice, conversation_id, "hello? ORD-1001").json()

    assert taken == {"cancelled_run_id": run_id, "control_version": 2}
    assert held["message"]["status"] == "HELD"
    # a run of someone else finishing proves the worker moved on
    bob = api("bob")
    other = bob.post(
        "/api/v1/runs",
        {"message": "What is the status of order ORD-2001?"},
        format="json",
        HTTP_IDEMPOTENCY_KEY="after-takeover",
    ).json()["id"]
    wait_for(lambda: AgentRun.objects.get(pk=other).is_finished)
    types = list(RunEvent.objects.filter(run_id=run_id).values_list("type", flat=True))
    assert types[-1] == "run.cancelled"
    assert not ToolExecution.objects.filter(run_id=run_id, tool="check_stock").exists()
    assert AgentRun.objects.filter(conversation_id=conversation_id).count() == 1
