"""The commands DESIGN 7 adds to the first ones (/reset, /switch), and the rules every
command keeps: CLOSED is final, and starting a queued message respects the open-run limit."""

import uuid

import pytest

from runs import services, worker
from runs.models import AgentRun, Conversation, ConversationStatus, RunStatus
from tests import factories
from tests.pages import signed_in
from tests.problems import assert_problem
from tests.runs.conversation_helpers import (
    FOLLOW_UP,
    STATUS,
    conversation_open,
    message_statuses,
    say,
)
from tests.runs.helpers import shop_create

pytestmark = pytest.mark.django_db


def test_reset_cancels_drops_the_queue_and_starts_the_agents_context_afresh(pat):
    # given a conversation with an answered question, an active run and a queued message
    conversation = conversation_open(pat)
    say(pat, conversation, STATUS)
    worker.tick()
    active = say(pat, conversation, FOLLOW_UP).json()["run_id"]
    say(pat, conversation, "And parcel PCL-3?")

    # when pat resets it
    reset = say(pat, conversation, "/reset")

    # then the run is cancelled, the queue dropped, the conversation kept open
    assert reset.status_code == 200
    assert reset.json() == {
        "command": "/reset",
        "result": {"cancelled_run_id": active, "dropped_messages": 1},
    }
    assert AgentRun.objects.get(pk=active).status == RunStatus.CANCELLED
    assert Conversation.objects.get(pk=conversation).status == ConversationStatus.OPEN
    assert message_statuses(conversation)[-1] == "CANCELLED"

    # and the next message's run knows nothing of what came before
    fresh = say(pat, conversation, "hello").json()["run_id"]
    said = [m["content"] for m in AgentRun.objects.get(pk=fresh).messages if m["role"] == "user"]
    assert said == ["hello"]


def test_switch_makes_another_open_conversation_current_and_detaches_the_run(pat):
    # given two of pat's conversations, the first one busy
    first = conversation_open(pat)
    second = conversation_open(pat)
    busy = say(pat, first, STATUS).json()["run_id"]

    # when pat switches from the first to the second
    switched = say(pat, first, f"/switch {second}")

    # then the second is current, and the first one's run goes on
    assert switched.status_code == 200
    assert switched.json()["result"] == {"conversation_id": second, "detached_run_id": busy}
    assert Conversation.objects.order_by("-current_since").first().pk == uuid.UUID(second)
    worker.tick()
    assert AgentRun.objects.get(pk=busy).status == RunStatus.COMPLETED


def test_switch_refuses_what_it_cannot_switch_to(parcel_shop, api, pat):
    first = conversation_open(pat)
    factories.user_create("kit", merchant=parcel_shop)
    kits = conversation_open(api("kit", merchant="parcel-shop"))
    factories.user_create("nina", merchant=shop_create(slug="other-shop"))
    ninas = conversation_open(api("nina", merchant="other-shop"))
    closed = conversation_open(pat)
    say(pat, closed, "/new")

    assert_problem(say(pat, first, "/switch"), 400, "validation_error")
    assert_problem(say(pat, first, "/switch not-an-id"), 400, "validation_error")
    assert_problem(say(pat, first, f"/switch {kits}"), 404, "not_found")
    assert_problem(say(pat, first, f"/switch {ninas}"), 404, "not_found")
    assert_problem(say(pat, first, f"/switch {uuid.uuid4()}"), 404, "not_found")
    assert_problem(say(pat, first, f"/switch {closed}"), 409, "conversation_closed")


def test_closed_is_final_for_every_command(pat, sue):
    # given a conversation pat closed with /new
    old = conversation_open(pat)
    say(pat, old, "/new")

    # when anyone sends it a command that would change it
    for client, text in (
        (sue, "/release"),
        (sue, "/takeover"),
        (pat, "/stop"),
        (pat, "/reset"),
        (pat, "/switch not-an-id"),
    ):
        assert_problem(say(client, old, text), 409, "conversation_closed")

    # then it is still closed, and /status still answers
    assert Conversation.objects.get(pk=old).status == ConversationStatus.CLOSED
    assert say(pat, old, "/status").status_code == 200
    assert_problem(say(pat, old, "hello"), 409, "conversation_closed")


def test_release_waits_for_an_open_run_slot_before_starting_a_held_message(pat, sue):
    # given a taken-over conversation holding a message, and pat at the open-run limit
    conversation = conversation_open(pat)
    say(sue, conversation, "/takeover")
    say(pat, conversation, STATUS)
    others = [
        pat.post(
            "/api/v1/runs", {"message": STATUS}, format="json", HTTP_IDEMPOTENCY_KEY=f"k{index}"
        ).json()["id"]
        for index in range(3)
    ]

    # when sue releases it
    released = say(sue, conversation, "/release")

    # then the message is queued again but waits: no fourth open run
    assert released.json()["result"] == {"requeued_messages": 1}
    assert message_statuses(conversation) == ["QUEUED"]
    assert AgentRun.objects.filter(account__username="pat").count() == 3

    # when a slot frees, the backstop starts it
    services.run_cancel(run=AgentRun.objects.get(pk=others[0]))
    report = services.maintain()
    assert report["conversations_start_waiting"] == 1
    assert message_statuses(conversation) == ["STARTED"]


def test_reset_and_switch_work_from_the_chat_page(pat):
    # given pat signed in to the chat, with a second conversation of theirs
    client = signed_in("pat")
    client.post("/portal/chat/", {"text": STATUS})
    first = Conversation.objects.get(customer__username="pat")
    other = conversation_open(pat)

    # when pat resets the chat, then switches to the other conversation
    reset = client.post("/portal/chat/", {"text": "/reset"}, follow=True)
    switched = client.post("/portal/chat/", {"text": f"/switch {first.pk}"}, follow=True)
    back = client.post("/portal/chat/", {"text": f"/switch {other}"}, follow=True)
    bad = client.post("/portal/chat/", {"text": "/switch nowhere"})

    # then each is said on the page, and a bad id is a form error, not an error page
    assert "Started afresh" in reset.text
    assert "Switched to the other conversation." in switched.text
    assert STATUS in switched.text  # the first conversation is the one shown
    assert "No messages yet." in back.text  # and now the other, empty one
    assert bad.status_code == 200
    assert "Name the conversation to switch to: /switch &lt;conversation id&gt;." in bad.text
