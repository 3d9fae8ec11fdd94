"""A run's events as server-sent events, served without holding a thread or reading once per
stream: under the ASGI server every stream of a web process waits on its event loop, on one
hub, and the hub reads what changed for all of them at once (in a thread of the loop's pool,
only while it reads)."""

import asyncio
import contextlib
import json
import logging
import random
import time
import weakref
from collections.abc import AsyncIterator, Callable
from typing import Any

from asgiref.sync import sync_to_async
from django.db import connection

from runs import selectors
from runs.deltas import delta_hub
from runs.serializers import RunEventSerializer

logger = logging.getLogger(__name__)

TERMINAL_EVENTS = {"run.completed", "run.failed", "run.cancelled"}
# A stream ends after at most this long (the client reconnects with Last-Event-ID), so a
# stream the client forgot does not hold its key's slot for ever; each lasts a random part of
# the last fifth less, so that pages opened together do not all come back at once. Reconnects
# are the costly part of a held stream: a thousand 30 s streams took the web server's CPU
# from a third to all of a core.
STREAM_SECONDS = 300.0
STREAM_JITTER = 0.2
# A comment line this often on a quiet stream: proxies close connections that stay silent
# (nginx after 60 s), and writing is how the server learns that a client went away.
KEEPALIVE_SECONDS = 15.0
KEEPALIVE = ": keep-alive\n\n"
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

    def deliver(self, events: list[dict], finished: bool) -> None:
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


class StreamHub:
    """The streams of one event loop (one web process) and the one task that reads for them;
    the task ends when the last stream does."""

    def __init__(self) -> None:
        self.streams: dict[Any, set[Subscription]] = {}
        self.wake = asyncio.Event()
        self.reader: asyncio.Task | None = None
        self.reads = 0
        # The number of the read under way, and of the last one whose news was delivered: a
        # stream knows it has had what was committed when it subscribed once a read that
        # began after that was delivered.
        self.read_started = 0
        self.read_delivered = 0
        self.failing = False

    def subscribe(self, run_id: Any, after: int) -> Subscription:
        subscription = Subscription(run_id, after)
        self.streams.setdefault(run_id, set()).add(subscription)
        self.wake.set()
        if self.reader is None or self.reader.done():
            self.reader = asyncio.get_running_loop().create_task(self._read_while_watched())
        return subscription

    def unsubscribe(self, subscription: Subscription) -> None:
        watching = self.streams.get(subscription.run_id)
        if watching is not None:
            watching.discard(subscription)
            if not watching:
                del self.streams[subscription.run_id]

    async def _read_while_watched(self) -> None:
        read = sync_to_async(_read, thread_sensitive=False)
        while self.streams:
            self.wake.clear()
            self.read_started += 1
            this_read = self.read_started
            cursors = {
                run_id: min(subscription.after for subscription in watching)
                for run_id, watching in self.streams.items()
            }
            try:
                news = await read(cursors)
            except Exception:
                # The database is away: the streams wait (and end on time); read again later.
                if not self.failing:
                    logger.warning("event streams could not read; trying again", exc_info=True)
                self.failing, news = True, {}
            else:
                self.failing = False
            self.reads += 1
            for run_id, (events, finished) in news.items():
                for subscription in list(self.streams.get(run_id, ())):
                    subscription.deliver(events, finished)
            self.read_delivered = this_read
            await asyncio.sleep(READ_GAP_SECONDS)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.wake.wait(), POLL_SECONDS - READ_GAP_SECONDS)


def _read(cursors: dict[Any, int]) -> dict[Any, tuple[list[dict], bool]]:
    """What changed for the watched runs, as the streams send it; in a thread of the pool,
    which gives its database connection back."""
    try:
        return {
            run_id: ([RunEventSerializer(event).data for event in events], finished)
            for run_id, (events, finished) in selectors.runs_events_since(cursors).items()
        }
    finally:
        connection.close()


_hubs: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, StreamHub]" = (
    weakref.WeakKeyDictionary()
)


def stream_hub() -> StreamHub:
    """The running event loop's hub."""
    loop = asyncio.get_running_loop()
    if loop not in _hubs:
        _hubs[loop] = StreamHub()
    return _hubs[loop]


async def run_event_stream(run_id, after: int) -> AsyncIterator[str]:
    """The run's events after `after`, and a comment line when quiet for KEEPALIVE_SECONDS;
    ends after a terminal event, once the run finished, or after STREAM_SECONDS or a little
    less."""
    ends = time.monotonic() + STREAM_SECONDS * (1 - random.uniform(0, STREAM_JITTER))
    yield "retry: 1000\n\n"
    hub = stream_hub()
    subscription = hub.subscribe(run_id, after)
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
                yield f"id: {data['seq']}\nevent: {data['type']}\ndata: {json.dumps(data)}\n\n"
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
        hub.unsubscribe(subscription)


def _delta(data: dict) -> str:
    return f"event: message.delta\ndata: {json.dumps(data)}\n\n"


class ClosingStream:
    """An async stream that calls `on_close` when the server closes the response, however it
    ends: finished, timed out, or the client gone before the first byte."""

    def __init__(self, events: AsyncIterator[str], on_close: Callable[[], None]) -> None:
        self.events, self.on_close = events, on_close

    def __aiter__(self) -> AsyncIterator[str]:
        return self.events

    def close(self) -> None:
        self.on_close()
