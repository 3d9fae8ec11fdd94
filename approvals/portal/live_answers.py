"""The answer the assistant is writing, on the customer's open chat: the chat's stream follows
the run that may be writing (runs.deltas) and sends its text as it comes.

The chat's rows give each message that may be answered a slot, `#answer-<message>`, which the
rows keep when they are drawn again (htmx's hx-preserve), so the text neither flickers nor
goes when the page fetches its rows; the row of a committed answer has no slot, so the answer
takes the text's place. The stream sends `delta` events whose HTML htmx puts in place out of
band: the whole text in a new slot when an answer (re)starts (another run, or another model
call of the run: never one text after another), then each new piece at the slot's end, and
the text marked stopped when the run ends before its answer. The text is escaped: the model
wrote it. Nothing here reads the database: the stream waits on the loop's delta hub."""

from collections.abc import Callable
from typing import Any

from django.utils.html import escape

from runs.deltas import DeltaHub, delta_hub
from runs.live_hub import sse_event

EVENT = "delta"


def slot_id(message_pk: int) -> str:
    return f"answer-{message_pk}"


def whole_html(message_pk: int, text: str, *, state: str) -> str:
    """The slot with the text written so far: `writing`, `written` (its model call is done;
    the committed answer follows) or `stopped` (the run ended before its answer)."""
    slot = slot_id(message_pk)
    busy = ' aria-busy="true"' if state == "writing" else ""
    note = ' <span class="draft-note">stopped</span>' if state == "stopped" else ""
    return (
        f'<span id="{slot}" class="draft {state}"{busy} hx-swap-oob="true">'
        f'<span id="{slot}-text" class="draft-text">{escape(text)}</span>{note}</span>'
    )


def more_html(message_pk: int, text: str) -> str:
    """More text, at the end of the slot's."""
    return f'<span hx-swap-oob="beforeend:#{slot_id(message_pk)}-text">{escape(text)}</span>'


def event(html: str) -> str:
    return sse_event(EVENT, html)


class AnswerFollower:
    """One chat stream's follower: what the run writing the chat's answer has written, heard
    from the hub as it comes (`wake` is called then); `take()` gives what to send."""

    def __init__(self, wake: Callable[[], None]) -> None:
        self.wake = wake
        self.hub: DeltaHub | None = None
        self.run: str | None = None
        self.slot: int | None = None
        self.heard: list[dict[str, Any]] = []
        self.gen: str | None = None
        self.text = ""
        self.seq = 0

    def follow(self, writing: tuple[str, int] | None) -> None:
        """Follow this run into this message's slot (None: nothing is being written)."""
        run, slot = writing or (None, None)
        if (run, slot) == (self.run, self.slot):
            return
        self.close()
        self.run, self.slot = run, slot
        self.heard, self.gen, self.text, self.seq = [], None, "", 0
        if run is None:
            return
        self.hub = delta_hub()
        so_far = self.hub.watch(run, self.hear)
        if so_far is not None and so_far.text:
            self.heard.append({"gen": so_far.gen, "seq": so_far.seq, "text": so_far.text})
            self.wake()

    def hear(self, message: dict[str, Any]) -> None:
        self.heard.append(message)
        self.wake()

    def take(self) -> str:
        """The `delta` event that brings the slot up to what was heard, or ""."""
        heard, self.heard = self.heard, []
        if self.slot is None:
            return ""
        restarted = done = ended = False
        more = ""
        for message in heard:
            if message.get("end"):
                ended = True
            elif message.get("done"):
                done = done or message["gen"] == self.gen
            elif message["gen"] != self.gen:
                # Another model call's answer: the slot starts over with it.
                self.gen, self.text, self.seq = message["gen"], message["text"], message["seq"]
                restarted, done, more = True, False, ""
            elif message["seq"] > self.seq:
                self.text += message["text"]
                self.seq = message["seq"]
                more += message["text"]
        if not self.text:
            return ""
        if ended:
            return event(whole_html(self.slot, self.text, state="stopped"))
        if restarted or done:
            state = "written" if done else "writing"
            return event(whole_html(self.slot, self.text, state=state))
        return event(more_html(self.slot, more)) if more else ""

    def close(self) -> None:
        if self.hub is not None and self.run is not None:
            self.hub.unwatch(self.run, self.hear)
        self.hub = None
