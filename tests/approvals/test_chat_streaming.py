"""The customer's chat shows the answer as it is written: its live stream follows the run that
may be writing and sends the text as the delta hub hears it (escaped, into the slot of the
message it answers), starts over for another run or another model call, marks the text
stopped when the run ends before its answer, and reads nothing per piece of text."""

import asyncio
import html
import re
import threading
import time

import pytest
from django.contrib.auth.models import User
from django.db import connection

from approvals import selectors
from approvals.portal import live, live_answers
from runs import conversations, worker
from runs.deltas import delta_hub
from runs.models import AgentRun, ConversationMessage, RunStatus
from tests.conftest import wait_for_async
from tests.http import next_event
from tests.pages import page_stream, signed_in
from tests.threads import run_coroutine

STATUS = "What is the status of order ORD-1001?"


def _alice() -> User:
    return User.objects.get(username="alice")


def _asked(demo, text: str = STATUS, *, username: str = "alice") -> ConversationMessage:
    """The customer asked in their chat; no worker has taken the question yet."""
    customer = User.objects.get(username=username)
    conversation = conversations.conversation_create(merchant=demo, customer=customer)
    return conversations.message_send(conversation=conversation, text=text)


def _text(message: ConversationMessage, gen: str, seq: int, text: str) -> dict:
    return {"run": str(message.run_id), "gen": gen, "seq": seq, "text": text, "at": time.time()}


class ChatStream:
    """alice's chat stream (approvals.portal.live.page_stream), read in a task of the loop."""

    def __init__(self, alice: int, seen: str) -> None:
        self.chunks: list[str] = []
        self.topic = live.Topic("chat", str(alice))
        self.stream = live.page_stream(self.topic, user_id=alice, username="alice", seen=seen)
        self.task = asyncio.get_running_loop().create_task(self._read())

    async def _read(self) -> None:
        async for chunk in self.stream:
            self.chunks.append(chunk)

    def deltas(self) -> list[str]:
        return [chunk for chunk in self.chunks if chunk.startswith("event: delta\n")]

    async def following(self, run_id) -> None:
        """Until the stream follows the run at the hub (its first read is done)."""
        await wait_for_async(
            lambda: str(run_id) in delta_hub().subscribers,
            message="the stream never followed the run",
        )

    async def took_all(self) -> None:
        """Until the stream has taken all it was woken for (the text heard) and waits again."""
        (watcher,) = live.page_hub().subscribers[self.topic]
        await wait_for_async(
            lambda: not watcher.ready.is_set(), message="the stream never took what it heard"
        )

    async def hears(self, *messages: dict) -> None:
        """The hub hears the messages, and the stream takes them."""
        for message in messages:
            delta_hub().hear(message)
        await self.took_all()

    async def close(self) -> None:
        self.task.cancel()
        await asyncio.gather(self.task, return_exceptions=True)


# --- what the rows and the stream say --------------------------------------------------------


def test_the_text_is_escaped_and_a_line_break_is_a_data_line_of_its_own():
    whole = live_answers.whole_html(7, 'Your <b>order</b> & "more"', state="writing")
    assert whole == (
        '<span id="answer-7" class="draft writing" aria-busy="true" hx-swap-oob="true">'
        '<span id="answer-7-text" class="draft-text">'
        "Your &lt;b&gt;order&lt;/b&gt; &amp; &quot;more&quot;</span></span>"
    )
    assert live_answers.more_html(7, " <script>x</script>") == (
        '<span hx-swap-oob="beforeend:#answer-7-text"> &lt;script&gt;x&lt;/script&gt;</span>'
    )
    assert live_answers.event("<span>one\r\ntwo\rthree</span>") == (
        "event: delta\ndata: <span>one\ndata: two\ndata: three</span>\n\n"
    )


def test_the_chat_follows_the_run_that_may_write_and_the_message_that_shows_its_answer(demo):
    # given alice asked; the run waits for a worker
    message = _asked(demo)

    # then her chat's state names the run and her message's row
    state = selectors.chat_states(user_ids=[_alice().pk])[_alice().pk]
    assert state.writing == (str(message.run_id), message.pk)
    assert state.digest == selectors.chat_digest(conversation=message.conversation)

    # when the answer is committed, then nothing is being written
    worker.tick()
    assert selectors.chat_states(user_ids=[_alice().pk])[_alice().pk].writing is None


def test_the_row_of_a_message_being_answered_has_a_slot_kept_across_fetches(demo):
    # given alice asked, and a second question waits its turn
    client = signed_in("alice")
    client.post("/portal/chat/", {"text": STATUS})
    client.post("/portal/chat/", {"text": "And ORD-1002?"})
    first, second = ConversationMessage.objects.order_by("created_at", "pk")

    # when she looks at her chat, and after the first answer is committed
    page = client.get("/portal/chat/").text
    worker.tick()
    rows = client.get("/portal/chat/messages/").text

    # then each question had a slot that the fetched rows keep, and the stream's events go
    # to the rows out of band; the committed answer's row has none
    slot = '<span id="answer-{}" class="draft" hx-preserve="true"></span>'
    assert slot.format(first.pk) in page
    assert slot.format(second.pk) in page
    assert 'sse-swap="delta" hx-swap="none"' in page
    assert slot.format(first.pk) not in rows
    assert 'class="answer"' in rows


def test_the_stop_button_keeps_the_page_and_says_stopped(demo):
    # given alice's question, being answered
    client = signed_in("alice")
    client.post("/portal/chat/", {"text": STATUS})

    # when she presses Stop (htmx posts it)
    stopped = client.post("/portal/chat/", {"text": "/stop"}, headers={"HX-Request": "true"})

    # then the answer is a line for the page, not a redirect, and the run is stopped
    assert stopped.status_code == 200
    assert stopped.text.strip() == '<ul class="messages"><li class="info">Stopped.</li></ul>'
    assert AgentRun.objects.get().status == RunStatus.CANCELLED


# --- the stream --------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_the_stream_sends_the_text_of_the_run_being_answered_as_the_hub_hears_it(demo):
    # given alice's chat open on her question, which a run answers
    message = _asked(demo)
    other = _asked(demo, username="bob")
    seen = selectors.chat_digest(conversation=message.conversation)
    alice = _alice().pk

    async def scenario() -> list[str]:
        stream = ChatStream(alice, seen)
        await stream.following(message.run_id)
        # when the hub hears her run's text, and another run's
        await stream.hears(
            _text(message, "1.1", 1, "Order <ORD-1001>"),
            _text(other, "1.1", 1, "not hers"),
        )
        await stream.hears(_text(message, "1.1", 2, " is shipped"), _text(message, "1.1", 3, "."))
        await stream.hears({"run": str(message.run_id), "gen": "1.1", "done": True})
        await stream.close()
        return stream.deltas()

    deltas = run_coroutine(scenario())

    # then her slot gets the text, escaped: all of it first, then what came after, then the
    # text as written; nothing of the other run
    slot = message.pk
    assert deltas == [
        live_answers.event(live_answers.whole_html(slot, "Order <ORD-1001>", state="writing")),
        live_answers.event(live_answers.more_html(slot, " is shipped.")),
        live_answers.event(
            live_answers.whole_html(slot, "Order <ORD-1001> is shipped.", state="written")
        ),
    ]
    assert "&lt;ORD-1001&gt;" in deltas[0]
    assert not [delta for delta in deltas if "not hers" in delta]


@pytest.mark.django_db(transaction=True)
def test_the_stream_marks_the_text_stopped_when_the_run_ends_before_its_answer(demo):
    message = _asked(demo)
    seen = selectors.chat_digest(conversation=message.conversation)
    alice = _alice().pk

    async def scenario() -> list[str]:
        stream = ChatStream(alice, seen)
        await stream.following(message.run_id)
        # when the run writes, then ends (stopped), then writes on
        await stream.hears(_text(message, "1.1", 1, "Order ORD-1001"))
        await stream.hears({"run": str(message.run_id), "end": True})
        await stream.hears(_text(message, "1.1", 2, " is shipped."))
        await stream.close()
        return stream.deltas()

    # then the text it had written stays, marked stopped; nothing written after the end
    assert run_coroutine(scenario())[-1] == live_answers.event(
        live_answers.whole_html(message.pk, "Order ORD-1001", state="stopped")
    )


@pytest.mark.django_db(transaction=True)
def test_another_model_call_starts_the_text_over(demo):
    message = _asked(demo)
    seen = selectors.chat_digest(conversation=message.conversation)
    alice = _alice().pk

    async def scenario() -> list[str]:
        stream = ChatStream(alice, seen)
        await stream.following(message.run_id)
        # when a first call writes, fails, and the second writes its own answer
        await stream.hears(_text(message, "1.1", 1, "Order ORD-10"))
        await stream.hears(_text(message, "1.2", 1, "Your order"))
        await stream.close()
        return stream.deltas()

    # then the slot holds the second call's text alone
    assert run_coroutine(scenario())[-1] == live_answers.event(
        live_answers.whole_html(message.pk, "Your order", state="writing")
    )


@pytest.mark.django_db(transaction=True)
def test_a_chat_opened_mid_answer_gets_the_text_so_far_then_the_rest(demo):
    message = _asked(demo)
    seen = selectors.chat_digest(conversation=message.conversation)
    alice = _alice().pk

    async def scenario() -> list[str]:
        # given the hub heard the start of the answer before the page was opened
        delta_hub().hear(_text(message, "1.1", 1, "Order"))
        delta_hub().hear(_text(message, "1.1", 2, " ORD-1001"))
        stream = ChatStream(alice, seen)
        await stream.following(message.run_id)
        await stream.took_all()
        await stream.hears(_text(message, "1.1", 3, " is shipped."))
        await stream.close()
        return stream.deltas()

    assert run_coroutine(scenario()) == [
        live_answers.event(live_answers.whole_html(message.pk, "Order ORD-1001", state="writing")),
        live_answers.event(live_answers.more_html(message.pk, " is shipped.")),
    ]


@pytest.mark.django_db(transaction=True)
def test_the_stream_reads_nothing_and_starts_no_thread_per_piece_of_text(demo):
    message = _asked(demo)
    seen = selectors.chat_digest(conversation=message.conversation)
    alice = _alice().pk

    async def scenario() -> tuple[int, int, int]:
        stream = ChatStream(alice, seen)
        await stream.following(message.run_id)
        reads, threads = live.page_hub().reads, threading.active_count()
        # when two hundred pieces of text come, twenty at a time, each twenty taken by the
        # stream before the next come
        for first in range(1, 201, 20):
            await stream.hears(
                *(_text(message, "1.1", seq, f" word{seq}") for seq in range(first, first + 20))
            )
        await stream.close()
        pieces = sum(chunk.count("word") for chunk in stream.deltas())
        return pieces, live.page_hub().reads - reads, threading.active_count() - threads

    pieces, reads, threads = run_coroutine(scenario())

    # then every piece went out; the page hub read as it does anyway (once a second), and no
    # thread was started
    assert pieces == 200
    assert reads <= 1
    assert threads <= 0


def _answer_shown(deltas: list[str]) -> str:
    """The text the page's slot shows after these events: a whole text, then pieces after it."""
    shown = ""
    for delta in deltas:
        data = "\n".join(line[6:] for line in delta.splitlines() if line.startswith("data: "))
        if whole := re.search(r'class="draft-text">(.*?)</span>', data, re.S):
            shown = whole.group(1)
        elif more := re.search(r'-text">(.*)</span>$', data, re.S):
            shown += more.group(1)
    return html.unescape(shown)


@pytest.mark.django_db(transaction=True)
def test_the_open_chat_hears_the_answer_written_by_a_worker_before_it_is_committed(
    demo, live_server, settings
):
    # given the scripted model writes a word each 30 ms, and alice's chat is open on her
    # question
    settings.AGENTPORTAL = {**settings.AGENTPORTAL, "SCRIPTED_STREAM_MS": 30}
    message = _asked(demo)
    seen = selectors.chat_digest(conversation=message.conversation)
    stream = page_stream(live_server.url, "alice", f"/portal/chat/live/?seen={seen}")
    assert next_event(stream) == "retry: 2000\n"

    # when a worker answers it
    answering = threading.Thread(target=_tick)
    answering.start()
    events: list[tuple[float, str]] = []
    while not (events and events[-1][1].startswith("event: changed") and _deltas(events)):
        events.append((time.time(), next_event(stream)))
    stream.close()
    answering.join()

    # then the answer's text came in pieces before it was committed, and the chat showed it
    # as the run wrote it until the chat changed with the committed answer
    run = AgentRun.objects.get(pk=message.run_id)
    assert run.status == RunStatus.COMPLETED
    deltas = _deltas(events)
    assert len([at for at, _ in deltas if at < run.finished_at.timestamp()]) >= 5
    shown = _answer_shown([event for _, event in deltas])
    # (all of it, unless the chat heard of the commit before the last piece: then the
    # committed answer takes the place of what it showed all the same)
    assert len(shown.split()) >= 5
    assert run.result.startswith(shown)


def _tick() -> None:
    try:
        worker.tick()
    finally:
        connection.close()


def _deltas(events: list[tuple[float, str]]) -> list[tuple[float, str]]:
    return [(at, event) for at, event in events if event.startswith("event: delta\n")]
