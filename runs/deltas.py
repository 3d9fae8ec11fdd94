"""An answer as the model writes it: deltas the worker publishes and every web process hears,
never stored. The committed step still stores the whole message, once.

A message on the channel is a small JSON object about one run:
- `{"run", "gen", "seq", "text", "at"}`: more text of the model call `gen` ("step.attempt"),
  in order (`seq` from 1); `at` is when it was published (epoch seconds);
- `{"run", "gen", "done": true}`: that call's answer is complete; its commit follows;
- `{"run", "end": true}`: the run ended (finished, stopped, taken over). Written in the
  transaction that ends it (or right after its commit), so anything published after it is
  ignored: no delta of a stopped run reaches anyone after the stop.

The channels that carry them, one per deployment, are in runs.delta_channels.
"""

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from runs.delta_channels import FORGET_SECONDS, channel
from runs.live_hub import Subscriptions, loop_hub

logger = logging.getLogger(__name__)

# The worker publishes what a call wrote at most this often: a delta per token would be a
# notification per token for every run in flight. A tenth of a second still reads as a steady
# stream (people read a few words a second) and halves the notifications of 50 ms.
FLUSH_SECONDS = 0.1
# NOTIFY payloads must stay under 8000 bytes; longer text is sent in parts, each under it
# even when every character is escaped in JSON (12 bytes for one outside the basic plane).
MAX_TEXT = 600
# How often a web process looks for answers and ends to forget (runs.delta_channels).
SWEEP_SECONDS = 1.0


def run_ended(run_id) -> None:
    """Mark the run's end on the channel. Call inside the transaction that ends it."""
    channel().publish_in_transaction({"run": str(run_id), "end": True})


# --- the worker's side ----------------------------------------------------------------------


@dataclass
class DeltaPublisher:
    """What one model call writes, published in order, at most every FLUSH_SECONDS. Used on
    the worker's event loop; the text goes to the channel's queue and the call reads on
    without waiting for it to be sent."""

    run: str
    gen: str
    seq: int = 0
    pending: str = ""
    flushed_at: float = 0.0
    failed: bool = False
    sending: asyncio.Future | None = None

    async def add(self, text: str) -> None:
        self.pending += text
        if time.monotonic() - self.flushed_at >= FLUSH_SECONDS:
            self._publish(self._take(done=False))

    async def flush(self, *, done: bool = False) -> None:
        """Publish what is pending and wait until everything this call wrote is sent: its
        commit's notifications then come after it."""
        self._publish(self._take(done=done))
        if self.sending is not None:
            self._check(await self.sending)

    def _take(self, *, done: bool) -> list[dict[str, Any]]:
        messages = []
        while self.pending:
            part, self.pending = self.pending[:MAX_TEXT], self.pending[MAX_TEXT:]
            self.seq += 1
            messages.append(
                {"run": self.run, "gen": self.gen, "seq": self.seq, "text": part, "at": time.time()}
            )
        if done and self.seq:
            # (a call that wrote no text, only tool calls, has nothing to close)
            messages.append({"run": self.run, "gen": self.gen, "done": True})
        self.flushed_at = time.monotonic()
        return messages

    def _publish(self, messages: list[dict[str, Any]]) -> None:
        if self.sending is not None and self.sending.done():
            self._check(self.sending.result())
        if not messages or self.failed:
            return
        try:
            self.sending = channel().publish_soon(messages)
        except Exception as error:
            self._check(error)

    def _check(self, error: BaseException | None) -> None:
        if error is not None and not self.failed:
            # Deltas are a courtesy: the committed answer is what counts. Stop trying for
            # this call rather than slow it down.
            self.failed = True
            logger.warning("could not publish deltas of run %s", self.run, exc_info=error)


# --- the web's side -------------------------------------------------------------------------


@dataclass
class Answer:
    """An answer in progress, as a web process heard it."""

    gen: str
    text: str = ""
    seq: int = 0
    heard_at: float = field(default_factory=time.monotonic)


class DeltaHub(Subscriptions[str, Callable[[dict[str, Any]], None]]):
    """What the web process hears of answers in progress, and who watches which run. One per
    event loop; its task listens on the channel (runs.delta_channels) from the first watcher
    on, for as long as anyone watches (a broadcast channel, for good)."""

    def __init__(self) -> None:
        super().__init__()
        self.answers: dict[str, Answer] = {}
        self.ended: dict[str, float] = {}
        self.swept_at = 0.0

    def watch(self, run_id, callback: Callable[[dict[str, Any]], None]) -> Answer | None:
        """Call `callback` with each message about the run from now on; returns what the run
        has written so far of the answer in progress, if any."""
        run = str(run_id)
        self.join(run, callback)
        answer = self.answers.get(run)
        return Answer(answer.gen, answer.text, answer.seq) if answer else None

    def unwatch(self, run_id, callback) -> None:
        self.leave(str(run_id), callback)

    def hear(self, message: dict[str, Any]) -> None:
        run = message.get("run", "")
        if run in self.ended:
            return
        if message.get("end"):
            self.ended[run] = time.monotonic()
            self.answers.pop(run, None)
        elif message.get("done"):
            self.answers.pop(run, None)
        else:
            answer = self.answers.get(run)
            if answer is None or answer.gen != message["gen"]:
                answer = self.answers[run] = Answer(message["gen"])
            if message["seq"] <= answer.seq:
                return
            answer.text += message["text"]
            answer.seq, answer.heard_at = message["seq"], time.monotonic()
        for callback in list(self.subscribers.get(run, ())):
            callback(message)
        self._forget_old()

    def _forget_old(self) -> None:
        # Once a second at most: the runs ended in the last ten minutes are many, and the
        # messages that come in a second more.
        now = time.monotonic()
        if now - self.swept_at < SWEEP_SECONDS:
            return
        self.swept_at = now
        limit = now - FORGET_SECONDS
        for run in [run for run, answer in self.answers.items() if answer.heard_at < limit]:
            del self.answers[run]
        for run in [run for run, at in self.ended.items() if at < limit]:
            del self.ended[run]

    async def _serve(self) -> None:
        source = channel()
        while True:
            try:
                async for message in source.listen(lambda: set(self.subscribers)):
                    self.hear(message)
            except asyncio.CancelledError:
                raise
            except Exception:
                logger.warning("the delta channel failed; listening again", exc_info=True)
                await asyncio.sleep(1.0)
            if not source.broadcast and not self.subscribers:
                return


def delta_hub() -> DeltaHub:
    """The running event loop's delta hub."""
    return loop_hub("deltas", DeltaHub)
