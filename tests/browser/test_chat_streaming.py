"""The customer's chat in a real browser while the assistant writes: the answer grows in place,
then the committed answer takes its place, once; stopped with the page's Stop button, what
was written stays, greyed and marked stopped, and is not kept."""

import re
import threading

import pytest
from django.db import connection

from runs import conversations, live_hub, worker
from runs.models import AgentRun, Conversation, ConversationMessage, RunStatus
from tests.browser.accessibility import serious_violations
from tests.browser.conftest import screenshot
from tests.conftest import wait_for

pytestmark = pytest.mark.django_db(transaction=True)

STATUS = "What is the status of order ORD-1001?"
SECOND = "What is the status of order ORD-1002?"
PHONE = {"width": 390, "height": 844}
DESKTOP = {"width": 1280, "height": 900}
# The page's grey (.muted): what a stopped text is shown in.
GREY = "rgb(86, 97, 109)"


@pytest.fixture
def slow_words(settings):
    """The scripted model writes a word each 150 ms, on the worker's event loop."""
    settings.AGENTPORTAL = {**settings.AGENTPORTAL, "SCRIPTED_STREAM_MS": 150}


def _send(page, text: str) -> None:
    page.fill("#chat-text", text)
    page.click("#chat-form button[type=submit]")


def _tick() -> None:
    try:
        worker.tick()
    finally:
        connection.close()


def _answering() -> threading.Thread:
    """A worker answering in a thread of its own, as the cluster's would."""
    thread = threading.Thread(target=_tick, daemon=True)
    thread.start()
    return thread


def _written(page) -> str:
    return page.inner_text(".draft .draft-text") if page.locator(".draft-text").count() else ""


def _until_words(page, count: int) -> str:
    """Wait until the answer being written has at least `count` words; its text then."""
    page.wait_for_function(
        """(count) => {
            const text = document.querySelector('.draft .draft-text');
            return text !== null && text.innerText.trim().split(/\\s+/).length >= count;
        }""",
        arg=count,
        timeout=15000,
    )
    return _written(page)


def _stopped_marks(page) -> list[str]:
    """The "stopped" the row shows: the stream's note, or the row's own once drawn again."""
    return page.locator(
        ".chat-row .draft-note:visible, .chat-row .run-stopped:visible"
    ).all_inner_texts()


def _passes_nothing_more_of(run: AgentRun) -> bool:
    """No page of the live server can get more of the run's text: its delta hub heard the run
    end (and drops what comes after), or no page follows the run any more."""
    run_id = str(run.pk)
    hubs = [named["deltas"] for named in live_hub._hubs.values() if "deltas" in named]
    return all(run_id in hub.ended or run_id not in hub.subscribers for hub in hubs)


def _color(page, selector: str) -> str:
    return page.eval_on_selector(selector, "(element) => getComputedStyle(element).color")


def test_the_answer_grows_as_it_is_written_then_the_committed_answer_shows_once(
    demo, signed_in, live_server, slow_words
):
    # given alice's chat open on a desktop
    alice = signed_in("alice")
    alice.set_viewport_size(DESKTOP)
    alice.goto(f"{live_server.url}/portal/chat/")

    # when she asks, and a worker writes the answer a word at a time
    _send(alice, STATUS)
    answering = _answering()

    # then she sees it grow, in her question's row, with a caret while it grows
    seen = [_until_words(alice, 3)]
    screenshot(alice, "chat-streaming-1-desktop")
    assert seen[0].startswith("Order ORD-1001")
    assert alice.locator(".chat-row .draft.writing").count() == 1
    assert alice.is_hidden(".progress")

    # when she asks another question meanwhile (in another tab): the chat fetches its rows
    alice.eval_on_selector("#chat-messages", "(rows) => { rows.dataset.drawnBefore = 'yes'; }")
    conversations.message_send(conversation=Conversation.objects.get(), text=SECOND)
    alice.wait_for_selector("#chat-messages:not([data-drawn-before])", timeout=10000)

    # then the text stays as it was and grows on
    assert _written(alice).startswith(seen[0])
    for words in (8, 13):
        seen.append(_until_words(alice, words))
        screenshot(alice, f"chat-streaming-{len(seen)}-desktop")
    assert len(seen[0]) < len(seen[1]) < len(seen[2])
    alice.set_viewport_size(PHONE)
    screenshot(alice, "chat-streaming-phone")

    # when the answer is committed, and the second question's answer is being written
    alice.wait_for_selector(".answer", timeout=10000)
    first, second = ConversationMessage.objects.order_by("created_at", "pk")
    alice.wait_for_selector(f"#answer-{second.pk} .draft-text", timeout=10000)
    screenshot(alice, "chat-streaming-second-phone")

    # then the committed answer stands in the text's place, once; the second answer grows in
    # its own row, with none of the first's text
    run = AgentRun.objects.get(pk=first.run_id)
    assert run.status == RunStatus.COMPLETED
    assert run.result.startswith(seen[2])
    assert alice.inner_text("#chat-messages").count(run.result) == 1
    assert alice.locator(f"#answer-{first.pk}").count() == 0
    assert not alice.inner_text(f"#answer-{second.pk}").startswith("Order ORD-1001")

    # when the second answer is committed too
    answering.join(timeout=60)
    alice.wait_for_function("() => document.querySelectorAll('.answer').length === 2")

    # then each answer shows once, and nothing is left of the texts being written
    shown = alice.inner_text("#chat-messages")
    for message in (first, second):
        assert shown.count(AgentRun.objects.get(pk=message.run_id).result) == 1
    assert alice.locator(".draft").count() == 0
    screenshot(alice, "chat-streamed-answers-phone")
    alice.set_viewport_size(DESKTOP)
    screenshot(alice, "chat-streamed-answers-desktop")


def test_stop_keeps_what_was_written_greyed_and_marked_stopped_and_keeps_none_of_it(
    demo, signed_in, live_server, slow_words
):
    # given alice's question being answered, her chat open on a phone
    alice = signed_in("alice")
    alice.set_viewport_size(PHONE)
    alice.goto(f"{live_server.url}/portal/chat/")
    _send(alice, STATUS)
    answering = _answering()
    _until_words(alice, 5)

    # when she presses Stop
    alice.click("#stop-form button")

    # then the page stays: it says it stopped, and what was written stays, greyed and marked
    # stopped once, also when the chat's rows show the stopped run
    alice.wait_for_selector("#chat-notice .messages", timeout=10000)
    assert alice.inner_text("#chat-notice") == "Stopped."
    alice.wait_for_selector(".chat-row.ended .run-stopped", state="attached", timeout=10000)
    partial = _written(alice)
    assert len(partial.split()) >= 5
    assert _stopped_marks(alice) == ["stopped"]
    assert _color(alice, ".draft-text") == GREY
    screenshot(alice, "chat-streaming-stopped-phone")
    alice.set_viewport_size(DESKTOP)
    screenshot(alice, "chat-streaming-stopped-desktop")
    assert serious_violations(alice) == []

    # (had the rows shown the stopped run before the stream heard of the stop, the row's own
    # "stopped" says it, alike)
    alice.evaluate(
        """() => {
            const slot = document.querySelector('.draft.stopped');
            if (slot) {
                slot.classList.remove('stopped');
                slot.querySelector('.draft-note').remove();
            }
        }"""
    )
    assert _stopped_marks(alice) == ["stopped"]
    assert _color(alice, ".draft-text") == GREY
    screenshot(alice, "chat-streaming-stopped-row-desktop")

    # and nothing written after the stop reaches the page: the worker is done, and the portal
    # passes nothing more of the run on
    answering.join(timeout=30)
    run = AgentRun.objects.get()
    wait_for(
        lambda: _passes_nothing_more_of(run),
        timeout=10,
        message="the portal still passes the stopped run's text on",
    )
    assert _written(alice) == partial

    # and nothing of it was kept: the run is stopped with no answer, and after a reload the
    # chat says stopped, without the text
    assert run.status == RunStatus.CANCELLED
    assert run.result is None
    assert not [m for m in run.messages if m.get("role") == "assistant" and m.get("content")]
    alice.reload()
    assert partial not in alice.inner_text("#chat-messages")
    assert re.search(r"Assistant: stopped", alice.inner_text("#chat-messages"))
