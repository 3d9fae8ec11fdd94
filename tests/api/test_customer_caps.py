"""Caps on what one customer or key can hold open: conversations, messages waiting behind busy
runs, event streams. Each refusal is a 429 problem that says what to do; nothing is written."""

import json

import pytest
from django.contrib.auth.models import User

from runs import conversations, worker
from runs.models import Conversation, ConversationMessage, ConversationStatus, MessageStatus
from tests import factories, http
from tests.conftest import wait_for
from tests.problems import assert_problem
from tests.threads import in_threads

STATUS = "What is the status of order ORD-1001?"


@pytest.fixture
def caps(settings):
    def set_caps(**limits: int) -> None:
        settings.AGENTPORTAL = {**settings.AGENTPORTAL, **limits}

    return set_caps


def _open_conversations(username: str) -> int:
    return (
        Conversation.objects.filter(customer__username=username)
        .exclude(status=ConversationStatus.CLOSED)
        .count()
    )


@pytest.mark.django_db
def test_a_customer_past_the_open_conversations_cap_gets_429_and_new_still_works(demo, api, caps):
    # given a cap of 3 open conversations, all of alice's used
    caps(MAX_OPEN_CONVERSATIONS_PER_CUSTOMER=3)
    alice = api("alice")
    made = [alice.post("/api/v1/conversations", {}, format="json") for _ in range(3)]

    # when she opens a fourth, bob opens his first, and alice says /new in one of hers
    refused = alice.post("/api/v1/conversations", {}, format="json")
    bobs = api("bob").post("/api/v1/conversations", {}, format="json")
    renewed = alice.post(
        f"/api/v1/conversations/{made[0].json()['id']}/messages", {"text": "/new"}, format="json"
    )

    # then only the fourth was refused, saying how to go on; /new replaced one in its place
    assert [answer.status_code for answer in made] == [201] * 3
    body = assert_problem(refused, 429, "too_many_open_conversations")
    assert "/new" in body["detail"]
    assert bobs.status_code == 201
    assert renewed.status_code == 200
    assert _open_conversations("alice") == 3


@pytest.mark.django_db
def test_messages_waiting_behind_a_busy_run_are_capped_per_customer_and_stop_still_works(
    demo, api, caps
):
    # given a cap of 2 waiting messages, and a conversation whose run is busy (no worker)
    caps(MAX_QUEUED_MESSAGES_PER_CUSTOMER=2)
    alice = api("alice")
    conversation = alice.post("/api/v1/conversations", {}, format="json").json()["id"]
    messages = f"/api/v1/conversations/{conversation}/messages"
    first = alice.post(messages, {"text": STATUS}, format="json")

    # when she sends three more while it works, then /stop
    waiting = [alice.post(messages, {"text": f"and {n}?"}, format="json") for n in range(3)]
    stop = alice.post(messages, {"text": "/stop"}, format="json")

    # then the third waiting one was refused and not stored; /stop was not counted
    assert first.json()["run_id"] is not None
    assert [answer.status_code for answer in waiting[:2]] == [202, 202]
    body = assert_problem(waiting[2], 429, "too_many_queued_messages")
    assert "/stop" in body["detail"]
    assert not ConversationMessage.objects.filter(text="and 2?").exists()
    assert stop.status_code == 200


@pytest.mark.django_db(transaction=True)
def test_racing_conversation_creates_never_pass_the_cap(demo, caps):
    # given a cap of 3 and ten concurrent creates for alice, on real connections
    caps(MAX_OPEN_CONVERSATIONS_PER_CUSTOMER=3)
    alice = User.objects.get(username="alice")

    def create():
        try:
            return conversations.conversation_create(merchant=demo, customer=alice)
        except Exception as refusal:
            return refusal

    # when they race
    outcomes = in_threads([create] * 10)

    # then exactly three were made; the others were refused with the cap
    made = [o for o in outcomes if isinstance(o, Conversation)]
    refused = [o for o in outcomes if not isinstance(o, Conversation)]
    assert len(made) == 3
    assert {type(o).__name__ for o in refused} == {"TooManyOpenConversations"}
    assert _open_conversations("alice") == 3


@pytest.mark.usefixtures("fresh_cache")
def test_event_streams_are_capped_per_key_and_a_closed_one_frees_its_slot(demo, web_server):
    # given a cap of 2 streams per key, and a queued run alice can watch (it stays queued)
    base = web_server(AGENTPORTAL_MAX_EVENT_STREAMS_PER_KEY="2")
    alice = User.objects.get(username="alice")
    run = factories.run_queue(customer=alice, merchant=demo, message=STATUS)
    path = f"/api/v1/runs/{run.pk}/events/stream"
    key, other_key = (factories.api_key_for(alice, demo) for _ in range(2))

    # when one key holds two streams open and asks for a third, another key for one
    held = [http.open_stream(base, path, key=key) for _ in range(2)]
    refused = http.get(base, path, key=key)
    other = http.open_stream(base, path, key=other_key)

    # then the third is refused, with when to try again; another key is not affected
    assert [stream.status for stream in held] == [200, 200]
    assert refused.status == 429
    assert json.loads(refused.body)["code"] == "too_many_streams"
    assert refused.headers["retry-after"] == "15"
    assert other.status == 200

    # and once a client goes away, the server gives its slot back and a new stream opens
    held[0].close()
    wait_for(lambda: http.open_stream(base, path, key=key).status == 200, timeout=20)
    for stream in (held[1], other):
        stream.close()


@pytest.mark.usefixtures("fresh_cache")
def test_a_stream_read_to_its_end_frees_its_slot(demo, web_server):
    # given a cap of one stream per key, and a finished run
    base = web_server(AGENTPORTAL_MAX_EVENT_STREAMS_PER_KEY="1")
    alice = User.objects.get(username="alice")
    run = factories.run_queue(customer=alice, merchant=demo, message=STATUS)
    worker.tick()
    key = factories.api_key_for(alice, demo)
    path = f"/api/v1/runs/{run.pk}/events/stream"

    # when its stream is read to its end
    first = http.get(base, path, key=key)

    # then another opens (once the server closed the first, a moment after its last byte)
    assert "event: run.completed" in first.body
    wait_for(lambda: http.get(base, path, key=key).status == 200, timeout=10)


@pytest.mark.django_db
def test_a_customer_key_waiting_messages_count_only_their_own(demo, api, caps):
    caps(MAX_QUEUED_MESSAGES_PER_CUSTOMER=1)
    for username in ("alice", "bob"):
        client = api(username)
        conversation = client.post("/api/v1/conversations", {}, format="json").json()["id"]
        messages = f"/api/v1/conversations/{conversation}/messages"
        client.post(messages, {"text": STATUS}, format="json")
        assert client.post(messages, {"text": "one more"}, format="json").status_code == 202

    assert ConversationMessage.objects.filter(status=MessageStatus.QUEUED).count() == 2
