"""Conversations and control commands over the API, driven in-process by the worker."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from runs import worker
from runs.models import AgentRun, Conversation, ConversationMessage, RunEvent, RunStatus
from runs.services import LostRun, StepCommit
from tests import factories
from tests.extension_app import parcels, signoff
from tests.runs import helpers
from tests.runs.conversation_helpers import (
    FOLLOW_UP,
    STATUS,
    asking_agent,
    conversation_open,
    message_statuses,
    say,
)

pytestmark = pytest.mark.django_db


def test_messages_run_one_at_a_time_and_the_next_starts_when_a_run_ends(pat):
    conversation_id = conversation_open(pat)

    first = say(pat, conversation_id, STATUS)
    second = say(pat, conversation_id, FOLLOW_UP)

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
    assert contents[:3] == [STATUS, runs[0].result, FOLLOW_UP]
    body = pat.get(f"/api/v1/conversations/{conversation_id}").json()
    assert body["active_run_id"] is None
    assert body["pending_messages"] == 0


def test_stop_cancels_the_active_run_and_keeps_the_queue(pat):
    conversation_id = conversation_open(pat)
    run_id = say(pat, conversation_id, STATUS).json()["run_id"]
    say(pat, conversation_id, FOLLOW_UP)

    response = say(pat, conversation_id, "/stop")

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


def test_a_cancelled_run_commits_nothing_more(pat):
    conversation_id = conversation_open(pat)
    run_id = say(pat, conversation_id, STATUS).json()["run_id"]
    lease = helpers.run_claim()

    say(pat, conversation_id, "/stop")

    with pytest.raises(LostRun):
        helpers.run_step_commit(lease=lease, commit=StepCommit(next_node="tools"))
    worker.run_slices([lease])
    types = list(RunEvent.objects.filter(run_id=run_id).values_list("type", flat=True))
    assert types.count("run.cancelled") == 1
    assert types[-1] == "run.cancelled"
    assert "run.completed" not in types


def test_new_drops_the_queue_and_closes_the_conversation(pat):
    conversation_id = conversation_open(pat)
    run_id = say(pat, conversation_id, STATUS).json()["run_id"]
    say(pat, conversation_id, FOLLOW_UP)
    say(pat, conversation_id, "And parcel PCL-3?")

    response = say(pat, conversation_id, "/new-session")

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
    closed = say(pat, conversation_id, "hello?")
    assert (closed.status_code, closed.json()["code"]) == (409, "conversation_closed")
    fresh = say(pat, result["conversation_id"], STATUS)
    assert fresh.json()["message"]["status"] == "STARTED"


def test_status_changes_nothing(pat):
    conversation_id = conversation_open(pat)
    say(pat, conversation_id, STATUS)
    say(pat, conversation_id, FOLLOW_UP)
    before = (
        list(AgentRun.objects.values()),
        list(ConversationMessage.objects.values()),
        list(Conversation.objects.values()),
        RunEvent.objects.count(),
    )

    with CaptureQueriesContext(connection) as queries:
        response = say(pat, conversation_id, "/status")

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


def test_takeover_holds_messages_blocks_the_worker_and_release_resumes(pat, sue):
    conversation_id = conversation_open(pat)
    run_id = say(pat, conversation_id, STATUS).json()["run_id"]
    lease = helpers.run_claim()

    # a customer may not take over
    refused = say(pat, conversation_id, "/takeover")
    assert (refused.status_code, refused.json()["code"]) == (403, "permission_denied")

    taken = say(sue, conversation_id, "/takeover")

    assert taken.json()["result"] == {"cancelled_run_id": run_id, "control_version": 2}
    with pytest.raises(LostRun):
        helpers.run_step_commit(lease=lease, commit=StepCommit(next_node="tools"))
    held = say(pat, conversation_id, "Is anyone there? PCL-2")
    assert held.json()["message"]["status"] == "HELD"
    worker.tick()
    assert AgentRun.objects.filter(conversation_id=conversation_id).count() == 1

    released = say(sue, conversation_id, "/release")

    assert released.json()["result"] == {"requeued_messages": 1}
    assert message_statuses(conversation_id) == ["STARTED", "STARTED"]
    new_run = AgentRun.objects.filter(conversation_id=conversation_id).exclude(pk=run_id).get()
    assert new_run.control_version == 2
    worker.tick()
    new_run.refresh_from_db()
    assert new_run.status == RunStatus.COMPLETED


def test_unknown_command_is_400_and_never_reaches_the_model(pat):
    conversation_id = conversation_open(pat)
    response = say(pat, conversation_id, "/reboot now")
    assert (response.status_code, response.json()["code"]) == (400, "unknown_command")
    assert not AgentRun.objects.exists()
    assert not ConversationMessage.objects.exists()


def test_an_unknown_command_lists_only_the_commands_of_the_callers_role(pat, sue):
    # given pat's conversation, which sue (a supervisor of the shop) may command too
    conversation_id = conversation_open(pat)

    # when each of them sends a command that does not exist
    told_pat = say(pat, conversation_id, "/reboot").json()["detail"]
    told_sue = say(sue, conversation_id, "/reboot").json()["detail"]

    # then each is offered only what they may use
    assert told_pat == (
        "/reboot is not a command. Try one of /stop, /new, /reset, /switch, /status."
    )
    assert told_sue == (
        "/reboot is not a command. Try one of /stop, /new, /reset, /switch, /status, /takeover, "
        "/release."
    )


def test_another_customers_conversation_is_404(parcel_shop, api, pat):
    conversation_id = conversation_open(pat)
    factories.user_create("kit", merchant=parcel_shop)
    kit = api("kit", merchant="parcel-shop")
    assert kit.get(f"/api/v1/conversations/{conversation_id}").status_code == 404
    response = say(kit, conversation_id, "/stop")
    assert (response.status_code, response.json()["code"]) == (404, "not_found")
    factories.user_create("nina", merchant=helpers.shop_create(slug="other-shop"))
    assert (
        api("nina", merchant="other-shop")
        .get(f"/api/v1/conversations/{conversation_id}/messages")
        .status_code
        == 404
    )


def test_a_message_answers_the_agents_question_and_resumes_the_same_run(parcel_shop, pat):
    # given: the agent asked which parcel pat means
    asking_agent(parcel_shop)
    conversation_id = conversation_open(pat)
    asked = say(pat, conversation_id, "My parcel has not arrived yet").json()
    worker.tick()
    run = AgentRun.objects.get(pk=asked["run_id"])
    assert run.status == RunStatus.WAITING_USER
    assert run.wait_state["kind"] == "clarification"
    assert run.wait_state["payload"] == {"question": parcels.QUESTION}

    # when: the customer writes the answer into the conversation
    answer = say(pat, conversation_id, "It is PCL-1")

    # then: it resumed the same run instead of queueing behind it
    assert answer.status_code == 202
    assert answer.json()["message"]["status"] == "STARTED"
    assert answer.json()["run_id"] == str(run.pk)
    assert RunEvent.objects.filter(run=run, type="input.received").count() == 1
    assert message_statuses(conversation_id) == ["STARTED", "STARTED"]
    # and the agent went on with the answer
    worker.tick()
    run.refresh_from_db()
    assert (run.status, run.result) == (RunStatus.COMPLETED, "Parcel PCL-1 is in transit.")


def test_a_message_while_the_agent_waits_for_no_answer_of_the_chat_queues(parcel_shop, pat):
    # given: the agent waits for pat's sign-off (tests/extension_app/signoff.py), which a
    # message of the conversation does not give
    factories.release_publish(
        merchant=parcel_shop, model=f"scripted:{signoff.SCRIPT}", tools=[signoff.TOOL]
    )
    conversation_id = conversation_open(pat)
    run_id = say(pat, conversation_id, "Leave it with the neighbour").json()["run_id"]
    worker.tick()
    run = AgentRun.objects.get(pk=run_id)
    assert run.status == RunStatus.WAITING_USER
    assert run.wait_state["kind"] == "signoff"

    # when: pat writes in the conversation meanwhile
    queued = say(pat, conversation_id, "thanks")

    # then: the message queues behind the run, which still waits
    assert queued.json()["message"]["status"] == "QUEUED"
    assert queued.json()["run_id"] is None
    run.refresh_from_db()
    assert run.status == RunStatus.WAITING_USER
    assert not RunEvent.objects.filter(run=run, type="input.received").exists()
