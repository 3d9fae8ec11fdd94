"""A run's events as server-sent events, served without holding a thread or reading once per
stream: under the ASGI server every stream of a web process waits on its event loop, on one
hub, and the hub reads what changed for all of them at once (in a thread of the loop's pool,
only while it reads)."""

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

from runs import selectors
from runs.deltas import delta_hub
from runs.live_hub import (
    KEEPALIVE,
    KEEPALIVE_SECONDS,
    PollingHub,
    loop_hub,
    sse_event,
    sse_retry,
    stream_deadline,
)
from runs.serializers import RunEventSerializer

logger = logging.getLogger(__name__)

TERMINAL_EVENTS = {"run.completed", "run.failed", "run.cancelled"}
# How often the hub reads while streams wait, and the least time between two reads: streams
# opened together are answered by one read.
POLL_SECONDS = 0.5
READ_GAP_SECONDS = 0.05
# How often a new stream looks whether it may send the text written before it began.
CATCH_UP_SECONDS = 0.1


class Subscription:
    """One stream's place at the hub: the events it has yet to send, from `after` on, and the
    text the model is writing (runs.deltas), sent as `message.delta` events without an id."""

    def __init__(self, run_id: Any, after: int) -> None:
        self.run_id, self.after = run_id, after
        self.events: list[dict] = []
        self.deltas: list[dict] = []
        self.over = False
        self.ready = asyncio.Event()

    def hear(self, message: dict) -> None:
        if "text" in message:
            self.deltas.append(
                {key: message[key] for key in ("text", "gen", "seq", "at") if key in message}
            )
            self.ready.set()

    def take_deltas(self) -> list[dict]:
        deltas, self.deltas = self.deltas, []
        return deltas

    def deliver(self, news: tuple[list[dict], bool]) -> None:
        events, finished = news
        fresh = [data for data in events if data["seq"] > self.after]
        if fresh:
            self.events += fresh
            self.after = fresh[-1]["seq"]
        # Every event of a finished run came with this delivery: nothing more will follow.
        self.over = self.over or finished
        if fresh or finished:
            self.ready.set()

    def take(self) -> tuple[list[dict], bool]:
        events, self.events = self.events, []
        self.ready.clear()
        return events, self.over


def _read(watched: dict[Any, set[Subscription]]) -> dict[Any, tuple[list[dict], bool]]:
    """What changed for the watched runs after the earliest event any of their streams has,
    as the streams send it."""
    cursors = {run_id: min(s.after for s in streams) for run_id, streams in watched.items()}
    return {
        run_id: ([RunEventSerializer(event).data for event in events], finished)
        for run_id, (events, finished) in selectors.runs_events_since(cursors).items()
    }


def stream_hub() -> PollingHub:
    """The running event loop's hub of run event streams."""
    return loop_hub(
        "run events",
        lambda: PollingHub(_read, every=POLL_SECONDS, gap=READ_GAP_SECONDS, name="event streams"),
    )


async def run_event_stream(run_id, after: int) -> AsyncIterator[str]:
    """The run's events after `after`, and a comment line when quiet for KEEPALIVE_SECONDS;
    ends after a terminal event, once the run finished, or after STREAM_SECONDS or a little
    less."""
    ends = stream_deadline()
    yield sse_retry(1000)
    hub = stream_hub()
    subscription = hub.join(run_id, Subscription(run_id, after))
    answers = delta_hub()
    so_far = answers.watch(run_id, subscription.hear)
    # Text of the answer being written (written before this stream began, or since) is sent
    # only once the events committed before it were: after the first read that began after
    # this subscription was delivered.
    first_read, caught_up, sent = hub.read_started + 1, False, ("", 0)
    try:
        while True:
            remaining = ends - time.monotonic()
            if remaining <= 0:
                return
            wait = min(remaining, KEEPALIVE_SECONDS, remaining if caught_up else CATCH_UP_SECONDS)
            try:
                await asyncio.wait_for(subscription.ready.wait(), wait)
            except TimeoutError:
                if time.monotonic() >= ends:
                    return
                if caught_up:
                    yield KEEPALIVE
                    continue
            events, over = subscription.take()
            for data in events:
                yield sse_event(data["type"], json.dumps(data), event_id=data["seq"])
                if data["type"] in TERMINAL_EVENTS:
                    return
            if over:
                return
            if not caught_up and hub.read_delivered >= first_read:
                caught_up = True
                if so_far:
                    yield _delta({"text": so_far.text, "gen": so_far.gen, "seq": so_far.seq})
                    sent = (so_far.gen, so_far.seq)
            if caught_up:
                for data in subscription.take_deltas():
                    if data["gen"] != sent[0] or data["seq"] > sent[1]:
                        yield _delta(data)
    finally:
        answers.unwatch(run_id, subscription.hear)
        hub.leave(run_id, subscription)


def _delta(data: dict) -> str:
    return sse_event("message.delta", json.dumps(data))


class ClosingStream:
    """An async stream that calls `on_close` when the server closes the response, however it
    ends: finished, timed out, or the client gone before the first byte."""

    def __init__(self, events: AsyncIterator[str], on_close: Callable[[], None]) -> None:
        self.events, self.on_close = events, on_close

    def __aiter__(self) -> AsyncIterator[str]:
        return self.events

    def close(self) -> None:
        self.on_close()
