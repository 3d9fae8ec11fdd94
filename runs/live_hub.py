"""The one core of every live stream (a run's events, the portal's live pages): the streams
of one event loop (one web process) wait on a hub, by what they watch, and one task reads
what changed for all of them at once, in a thread of the loop's pool and only while it
reads; and the framing of server-sent events those streams write."""

import abc
import asyncio
import contextlib
import logging
import random
import time
import weakref
from collections.abc import Callable, Hashable
from typing import Any, Generic, Protocol, TypeVar

from asgiref.sync import sync_to_async
from django.db import connection

logger = logging.getLogger(__name__)

# A stream ends after at most this long (the client reconnects), so that one the client
# forgot does not hold its slot for ever; each lasts a random part of the last fifth less, so
# that pages opened together do not all come back at once. Reconnects are the costly part of
# a held stream: a thousand 30 s streams took the web server's CPU from a third to all of a
# core.
STREAM_SECONDS = 300.0
STREAM_JITTER = 0.2
# A comment line this often on a quiet stream: proxies close connections that stay silent
# (nginx after 60 s), and writing is how the server learns that a client went away.
KEEPALIVE_SECONDS = 15.0
KEEPALIVE = ": keep-alive\n\n"


def stream_deadline() -> float:
    """When a stream opened now ends (time.monotonic()), jitter included."""
    return time.monotonic() + STREAM_SECONDS * (1 - random.uniform(0, STREAM_JITTER))


def sse_retry(milliseconds: int) -> str:
    return f"retry: {milliseconds}\n\n"


def sse_event(event: str, data: str, *, event_id: int | None = None) -> str:
    """One server-sent event; a line break in `data` goes as a data line of its own."""
    said = f"id: {event_id}\n" if event_id is not None else ""
    if "\n" not in data and "\r" not in data:
        return f"{said}event: {event}\ndata: {data}\n\n"
    lines = data.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    return f"{said}event: {event}\n" + "".join(f"data: {line}\n" for line in lines) + "\n"


class Subscriber(Protocol):
    def deliver(self, news: Any) -> None: ...


Key = TypeVar("Key", bound=Hashable)
Item = TypeVar("Item", bound=Hashable)
S = TypeVar("S", bound=Subscriber)


class Subscriptions(abc.ABC, Generic[Key, Item]):
    """Who on one event loop watches what, by key, and the one task that serves them all
    (`_serve`): started when a subscriber joins and none runs, ending when it sees nobody
    left. The polling hub below and the delta hub (runs.deltas) are made of it."""

    def __init__(self) -> None:
        self.subscribers: dict[Key, set[Item]] = {}
        self.task: asyncio.Task | None = None

    def join(self, key: Key, subscriber: Item) -> Item:
        self.subscribers.setdefault(key, set()).add(subscriber)
        if self.task is None or self.task.done():
            self.task = asyncio.get_running_loop().create_task(self._serve())
        return subscriber

    def leave(self, key: Key, subscriber: Item) -> None:
        watching = self.subscribers.get(key)
        if watching is not None:
            watching.discard(subscriber)
            if not watching:
                del self.subscribers[key]

    @abc.abstractmethod
    async def _serve(self) -> None:
        """Serve the subscribers until none is left."""


class PollingHub(Subscriptions[Key, S]):
    """The streams of one event loop, by key, and the one task that reads for them: at once
    when a stream joins, then every `every` seconds (at least `gap` apart, so that streams
    opened together are answered by one read); the task ends when the last stream leaves.

    `read` gets the watched keys with their streams and returns the news per key, which each
    of the key's streams is given (`deliver`); it runs in a thread of the loop's pool, and
    its database connection is closed after it.
    """

    def __init__(
        self,
        read: Callable[[dict[Key, set[S]]], dict[Key, Any]],
        *,
        every: float,
        gap: float = 0.0,
        name: str,
    ) -> None:
        super().__init__()
        self.read, self.every, self.gap, self.name = read, every, gap, name
        self.wake = asyncio.Event()
        self.failing = False
        self.reads = 0
        # The number of the read under way, and of the last one whose news was delivered: a
        # stream knows it has had what was committed when it joined once a read that began
        # after that was delivered.
        self.read_started = 0
        self.read_delivered = 0

    def join(self, key: Key, subscriber: S) -> S:
        self.wake.set()
        return super().join(key, subscriber)

    def _read_closing(self, watched: dict[Key, set[S]]) -> dict[Key, Any]:
        try:
            return self.read(watched)
        finally:
            connection.close()

    async def _serve(self) -> None:
        read = sync_to_async(self._read_closing, thread_sensitive=False)
        while self.subscribers:
            self.wake.clear()
            self.read_started += 1
            this_read = self.read_started
            watched = {key: set(streams) for key, streams in self.subscribers.items()}
            try:
                news = await read(watched)
            except Exception:
                # The database is away: the streams keep what they have; read again later.
                if not self.failing:
                    logger.warning("%s could not read; trying again", self.name, exc_info=True)
                self.failing, news = True, {}
            else:
                self.failing = False
            self.reads += 1
            for key, told in news.items():
                for subscriber in list(self.subscribers.get(key, ())):
                    subscriber.deliver(told)
            self.read_delivered = this_read
            if self.gap:
                await asyncio.sleep(self.gap)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.wake.wait(), self.every - self.gap)


_hubs: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, Subscriptions]]" = (
    weakref.WeakKeyDictionary()
)

Hub = TypeVar("Hub", bound=Subscriptions)


def loop_hub(name: str, make: Callable[[], Hub]) -> Hub:
    """The running event loop's hub called `name`, made by `make` the first time."""
    hubs = _hubs.setdefault(asyncio.get_running_loop(), {})
    if name not in hubs:
        hubs[name] = make()
    return hubs[name]
