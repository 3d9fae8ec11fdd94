"""Conversations and control commands over the API, driven in-process by the worker."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from runs import worker
from runs.models import AgentRun, Conversation, ConversationMessage, RunEvent, RunStatus
from runs.services import LostRun, StepCommit
from tests.runs import helpers
from tests.runs.conversation_helpers import STATUS, conversation_open, message_statuses, say


@pytest.fixture
def alice(api):
    return api("alice")


def test_messages_run_one_at_a_time_and_the_next_starts_when_a_run_ends(demo, alice):
    conversation_id = conversation_open(alice)

    first = say(alice, conversation_id, STATUS)
    second = say(alice, conversation_id, "And ORD-1002?")

    assert first.status_code == second.status_code == 202
    assert first.json()["message"]["status"] == "STARTED"
    assert second.json()["message"]["status"] == "QUEUED"
    assert second.json()["run_id"] is None

    # when: the worker finishes the first run
    worker.tick()

    # then: the queued message started in the same transaction and ran too
    runs = list(AgentRun.objects.filter(conversation_id=conversation_id).order_by("created_at"))
    assert [run.status for run in runs] == [RunStatus.COMPLETED, RunStatus.COMPLETED]
    assert message_statuses(conversation_id) == ["STARTED", "STARTED"]
    # the second run saw the conversation so far
    contents = [m["content"] for m in runs[1].messages if m["role"] != "system"]
    assert contents[:3] == [STATUS, runs[0].result, "And ORD-1002?"]
    body = alice.get(f"/api/v1/conversations/{conversation_id}").json()
    assert body["active_run_id"] is None
    assert body["pending_messages"] == 0


def test_stop_cancels_the_active_run_and_keeps_the_queue(demo, alice):
    conversation_id = conversation_open(alice)
    run_id = say(alice, conversation_id, STATUS).json()["run_id"]
    say(alice, conversation_id, "And ORD-1002?")

    response = say(alice, conversation_id, "/stop")

    assert response.status_code == 200
    assert response.json() == {
        "command": "/stop",
        "result": {"cancelled_run_id": run_id, "pending_messages": 0},
    }
    assert AgentRun.objects.get(pk=run_id).status == RunStatus.CANCELLED
    # the queued message started when the run ended
    assert message_statuses(conversation_id) == ["STARTED", "STARTED"]
    types = list(RunEvent.objects.filter(run_id=run_id).values_list("type", flat=True))
    assert types[-1] == "run.cancelled"


def test_a_cancelled_run_commits_nothing_more(demo, alice):
    conversation_id = conversation_open(alice)
    run_id = say(alice, conversation_id, STATUS).json()["run_id"]
    lease = helpers.run_claim()

    say(alice, conversation_id, "/stop")

    with pytest.raises(LostRun):
        helpers.run_step_commit(lease=lease, commit=StepCommit(next_node="tools"))
    worker.run_slices([lease])
    types = list(RunEvent.objects.filter(run_id=run_id).values_list("type", flat=True))
    assert types.count("run.cancelled") == 1
    assert types[-1] == "run.cancelled"
    assert "run.completed" not in types


def test_new_drops_the_queue_and_closes_the_conversation(demo, alice):
    conversation_id = conversation_open(alice)
    run_id = say(alice, conversation_id, STATUS).json()["run_id"]
    say(alice, conversation_id, "And ORD-1002?")
    say(alice, conversation_id, "And ORD-1003?")

    response = say(alice, conversation_id, "/new-session")

    result = response.json()["result"]
    assert response.json()["command"] == "/new"
    assert result["cancelled_run_id"] == run_id
    assert result["dropped_messages"] == 2
    assert message_statuses(conversation_id) == ["STARTED", "CANCELLED", "CANCELLED"]
    assert Conversation.objects.get(pk=conversation_id).status == "CLOSED"
    # the dropped messages never run
    worker.tick()
    assert AgentRun.objects.filter(conversation_id=conversation_id).count() == 1
    # the old conversation refuses plain text; the new one accepts it at once
    closed = say(alice, conversation_id, "hello?")
    assert (closed.status_code, closed.json()["code"]) == (409, "conversation_closed")
    fresh = say(alice, result["conversation_id"], STATUS)
    assert fresh.json()["message"]["status"] == "STARTED"


def test_status_changes_nothing(demo, alice):
    conversation_id = conversation_open(alice)
    say(alice, conversation_id, STATUS)
    say(alice, conversation_id, "And ORD-1002?")
    before = (
        list(AgentRun.objects.values()),
        list(ConversationMessage.objects.values()),
        list(Conversation.objects.values()),
        RunEvent.objects.count(),
    )

    with CaptureQueriesContext(connection) as queries:
        response = say(alice, conversation_id, "/status")

    assert response.status_code == 200
    assert response.json()["result"]["active_run"]["status"] == "QUEUED"
    assert response.json()["result"]["pending_messages"] == 1
    # (the key's request counter for its rate limit aside: that is the cache's, not a change)
    writes = [
        q
        for q in queries
        if q["sql"].lstrip().upper().startswith(("INSERT", "UPDATE"))
        and "agentportal_cache" not in q["sql"]
    ]
    assert writes == []
    after = (
        list(AgentRun.objects.values()),
        list(ConversationMessage.objects.values()),
        list(Conversation.objects.values()),
        RunEvent.objects.count(),
    )
    assert before == after


def test_takeover_holds_messages_blocks_the_worker_and_release_resumes(demo, api, alice):
    conversation_id = conversation_open(alice)
    run_id = say(alice, conversation_id, STATUS).json()["run_id"]
    lease = helpers.run_claim()

    # a customer may not take over
    refused = say(alice, conversation_id, "/takeover")
    assert (refused.status_code, refused.json()["code"]) == (403, "permission_denied")

    taken = say(api("sam"), conversation_id, "/takeover")

    assert taken.json()["result"] == {"cancelled_run_id": run_id, "control_version": 2}
    with pytest.raises(LostRun):
        helpers.run_step_commit(lease=lease, commit=StepCommit(next_node="tools"))
    held = say(alice, conversation_id, "Is anyone there? ORD-1002")
    assert held.json()["message"]["status"] == "HELD"
    worker.tick()
    assert AgentRun.objects.filter(conversation_id=conversation_id).count() == 1

    released = say(api("sam"), conversation_id, "/release")

    assert released.json()["result"] == {"requeued_messages": 1}
    assert message_statuses(conversation_id) == ["STARTED", "STARTED"]
    new_run = AgentRun.objects.filter(conversation_id=conversation_id).exclude(pk=run_id).get()
    assert new_run.control_version == 2
    worker.tick()
    new_run.refresh_from_db()
    assert new_run.status == RunStatus.COMPLETED


def test_unknown_command_is_400_and_never_reaches_the_model(demo, alice):
    conversation_id = conversation_open(alice)
    response = say(alice, conversation_id, "/reboot now")
    assert (response.status_code, response.json()["code"]) == (400, "unknown_command")
    assert not AgentRun.objects.exists()
    assert not ConversationMessage.objects.exists()


def test_an_unknown_command_lists_only_the_commands_of_the_callers_role(demo, api, alice):
    # given alice's conversation, which sam (a supervisor of her shop) may command too
    conversation_id = conversation_open(alice)

    # when each of them sends a command that does not exist
    told_alice = say(alice, conversation_id, "/reboot").json()["detail"]
    told_sam = say(api("sam"), conversation_id, "/reboot").json()["detail"]

    # then each is offered only what they may use
    assert told_alice == (
        "/reboot is not a command. Try one of /stop, /new, /reset, /switch, /status."
    )
    assert told_sam == (
        "/reboot is not a command. Try one of /stop, /new, /reset, /switch, /status, /takeover, "
        "/release."
    )


def test_another_customers_conversation_is_404(demo, api, alice):
    conversation_id = conversation_open(alice)
    bob = api("bob")
    assert bob.get(f"/api/v1/conversations/{conversation_id}").status_code == 404
    response = say(bob, conversation_id, "/stop")
    assert (response.status_code, response.json()["code"]) == (404, "not_found")
    assert (
        api("oscar", merchant="other-shop")
        .get(f"/api/v1/conversations/{conversation_id}/messages")
        .status_code
        == 404
    )


def test_a_message_answers_the_agents_question_and_resumes_the_same_run(demo, alice):
    # given: the agent asked which order the exchange is about
    conversation_id = conversation_open(alice)
    asked = say(alice, conversation_id, "I want to exchange my shoes for size 43").json()
    worker.tick()
    run = AgentRun.objects.get(pk=asked["run_id"])
    assert run.status == RunStatus.WAITING_USER
    assert run.wait_state["kind"] == "clarification"

    # when: the customer writes the answer into the conversation
    answer = say(alice, conversation_id, "It is ORD-1002")

    # then: it resumed the same run instead of queueing behind it
    assert answer.status_code == 202
    assert answer.json()["message"]["status"] == "STARTED"
    assert answer.json()["run_id"] == str(run.pk)
    worker.tick()
    run.refresh_from_db()
    assert run.status == RunStatus.WAITING_USER
    assert run.wait_state["kind"] == "confirmation"
    assert RunEvent.objects.filter(run=run, type="input.received").count() == 1
    assert message_statuses(conversation_id) == ["STARTED", "STARTED"]
    # and a message while it waits for the plan's confirmation queues as before
    queued = say(alice, conversation_id, "thanks")
    assert queued.json()["message"]["status"] == "QUEUED"
