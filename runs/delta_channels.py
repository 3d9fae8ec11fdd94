"""The channels that carry an answer's deltas (runs.deltas) from the worker to every web
process, one per deployment (`channel()` picks):
- PostgreSQL: NOTIFY/LISTEN on one channel; a notification is delivered in commit order, so
  the end marker written in the ending transaction orders every later delta after it;
- Redis pub/sub, when AGENTPORTAL_BROKER_URL names a Redis: the same, off the database;
- SQLite (the embedded demo, one machine): a file per run in a directory next to the
  database, appended to by the worker and read by the web processes. Nothing to run, and
  appends of a line are atomic.
"""

import abc
import asyncio
import contextlib
import json
import logging
import os
import time
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import connection, transaction

logger = logging.getLogger(__name__)

CHANNEL = "agentportal_deltas"
# How often the file channel looks at the files of watched runs.
FILE_POLL_SECONDS = 0.05
# An answer in progress that nothing finished or ended is forgotten after this long.
FORGET_SECONDS = 600.0


# A NOTIFY payload must stay under 8000 bytes.
MAX_PAYLOAD = 7900


def encode(message: dict[str, Any]) -> str:
    """The message as ASCII JSON: its length is its size in bytes."""
    return json.dumps(message, separators=(",", ":"))


def packed(encoded: list[str]) -> list[str]:
    """Encoded messages packed in order into JSON arrays of at most MAX_PAYLOAD bytes: the
    deltas one statement sends go as few notifications, not one each (the server queues, and
    every listener wakes for, each one)."""
    payloads, part, size = [], [], 2
    for message in encoded:
        if part and size + len(message) + 1 > MAX_PAYLOAD:
            payloads.append(f"[{','.join(part)}]")
            part, size = [], 2
        part.append(message)
        size += len(message) + 1
    if part:
        payloads.append(f"[{','.join(part)}]")
    return payloads


def decoded(payload: str) -> list[dict[str, Any]]:
    """The messages of one payload: a packed array, or one message alone."""
    messages = json.loads(payload)
    return messages if isinstance(messages, list) else [messages]


class SendQueue:
    """What an event loop publishes, sent in order by one task: whatever is queued while a
    send is under way goes together in the next one, and no caller waits for it unless it
    asks to."""

    def __init__(self, send: Callable[[list[str]], Awaitable[None]]) -> None:
        self._send = send
        self._waiting: list[str] = []
        self._sent: asyncio.Future | None = None
        self._task: asyncio.Task | None = None

    def put(self, encoded: list[str]) -> asyncio.Future:
        """Queue the messages; the future is done once they are sent, with the error that
        stopped them (or None) as its result."""
        loop = asyncio.get_running_loop()
        self._waiting += encoded
        if self._sent is None:
            self._sent = loop.create_future()
        sent = self._sent
        if self._task is None or self._task.done():
            self._task = loop.create_task(self._drain())
        return sent

    async def _drain(self) -> None:
        while self._waiting:
            batch, self._waiting = self._waiting, []
            sent, self._sent = self._sent, None
            try:
                await self._send(batch)
            except Exception as error:
                sent.set_result(error)
            else:
                sent.set_result(None)


class QueuedChannel(abc.ABC):
    """A channel a worker publishes on from its event loop, through one SendQueue per loop
    (a connection belongs to the loop it was made on)."""

    broadcast = True

    def __init__(self) -> None:
        self._queues: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

    def _queue(self) -> SendQueue:
        loop = asyncio.get_running_loop()
        if loop not in self._queues:
            self._queues[loop] = SendQueue(self._send)
        return self._queues[loop]

    def publish_soon(self, messages: list[dict[str, Any]]) -> asyncio.Future:
        """Queue the messages without waiting; see SendQueue.put for the future."""
        return self._queue().put([encode(message) for message in messages])

    async def publish(self, messages: list[dict[str, Any]]) -> None:
        """Send the messages, after those queued before them; raise what stopped them."""
        error = await self.publish_soon(messages)
        if error is not None:
            raise error

    @abc.abstractmethod
    async def _send(self, encoded: list[str]) -> None:
        """Send encoded messages, in order, from the running loop's SendQueue task."""


class PostgresChannel(QueuedChannel):
    def __init__(self) -> None:
        super().__init__()
        self._publishers: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

    def _conninfo(self) -> dict[str, Any]:
        url = settings.AGENTPORTAL["LISTEN_DATABASE_URL"]
        if url:
            return {"conninfo": url}
        params = connection.settings_dict
        return {
            "dbname": params["NAME"],
            "user": params.get("USER") or None,
            "password": params.get("PASSWORD") or None,
            "host": params.get("HOST") or None,
            "port": params.get("PORT") or None,
        }

    async def _send(self, encoded: list[str]) -> None:
        import psycopg

        loop = asyncio.get_running_loop()
        publisher = self._publishers.get(loop)
        if publisher is None or publisher.closed:
            publisher = self._publishers[loop] = await psycopg.AsyncConnection.connect(
                **self._conninfo(), autocommit=True, prepare_threshold=None
            )
        await publisher.execute(
            "SELECT pg_notify(%s, payload) FROM unnest(%s::text[]) AS payload",
            [CHANNEL, packed(encoded)],
        )

    def publish_in_transaction(self, message: dict[str, Any]) -> None:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_notify(%s, %s)", [CHANNEL, encode(message)])

    async def listen(self, watched: Callable[[], set[str]]) -> AsyncIterator[dict[str, Any]]:
        import psycopg

        async with await psycopg.AsyncConnection.connect(
            **self._conninfo(), autocommit=True
        ) as listener:
            await listener.execute(f"LISTEN {CHANNEL}")
            async for notification in listener.notifies():
                for message in decoded(notification.payload):
                    yield message


class RedisChannel(QueuedChannel):
    def __init__(self, url: str) -> None:
        super().__init__()
        self.url = url
        self._publishers: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

    async def _send(self, encoded: list[str]) -> None:
        import redis.asyncio

        loop = asyncio.get_running_loop()
        if loop not in self._publishers:
            self._publishers[loop] = redis.asyncio.Redis.from_url(self.url)
        async with self._publishers[loop].pipeline(transaction=False) as pipe:
            for message in encoded:
                pipe.publish(CHANNEL, message)
            await pipe.execute()

    def publish_in_transaction(self, message: dict[str, Any]) -> None:
        import redis

        def publish() -> None:
            with redis.Redis.from_url(self.url) as client:
                client.publish(CHANNEL, encode(message))

        transaction.on_commit(publish, robust=True)

    async def listen(self, watched: Callable[[], set[str]]) -> AsyncIterator[dict[str, Any]]:
        import redis.asyncio

        client = redis.asyncio.Redis.from_url(self.url)
        pubsub = client.pubsub(ignore_subscribe_messages=True)
        try:
            await pubsub.subscribe(CHANNEL)
            async for message in pubsub.listen():
                yield json.loads(message["data"])
        finally:
            await pubsub.aclose()
            await client.aclose()


class FileChannel:
    """A file per run: the worker appends lines, the web processes read the files of the runs
    they watch. `maintain` removes those of runs long finished."""

    broadcast = False

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def _path(self, run: str) -> Path:
        return self.directory / f"{run}.jsonl"

    def _append(self, messages: list[dict[str, Any]]) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        by_run: dict[str, list[str]] = {}
        for message in messages:
            by_run.setdefault(message["run"], []).append(encode(message) + "\n")
        starts = {m["run"] for m in messages if m.get("seq") == 1}
        for run, lines in by_run.items():
            path = self._path(run)
            if run in starts:
                # A call's first text starts a new file: it holds one answer, the one being
                # written, so a web process that starts reading it replays nothing older
                # (readers notice the new file by its inode).
                fresh = path.with_suffix(".new")
                fresh.write_text("".join(lines), encoding="utf-8")
                os.replace(fresh, path)
                continue
            with open(path, "a", encoding="utf-8") as file:
                file.write("".join(lines))

    def forget(self, run: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self._path(run).unlink()

    async def publish(self, messages: list[dict[str, Any]]) -> None:
        self._append(messages)

    def publish_soon(self, messages: list[dict[str, Any]]) -> asyncio.Future:
        """Append at once (a file takes no round trip); the future as QueuedChannel's."""
        sent = asyncio.get_running_loop().create_future()
        try:
            self._append(messages)
        except OSError as error:
            sent.set_result(error)
        else:
            sent.set_result(None)
        return sent

    def publish_in_transaction(self, message: dict[str, Any]) -> None:
        def append_if_written() -> None:
            # Only a run that wrote something has a file, and listeners to tell.
            if self._path(message["run"]).exists():
                self._append([message])

        transaction.on_commit(append_if_written, robust=True)

    def forget_old(self) -> int:
        """Remove the files nothing has written to for FORGET_SECONDS; how many."""
        limit = time.time() - FORGET_SECONDS
        removed = 0
        for path in self.directory.glob("*.jsonl"):
            with contextlib.suppress(FileNotFoundError):
                if path.stat().st_mtime < limit:
                    path.unlink()
                    removed += 1
        return removed

    async def listen(self, watched: Callable[[], set[str]]) -> AsyncIterator[dict[str, Any]]:
        # By run: the file read (its inode) and how far.
        read: dict[str, tuple[int, int]] = {}
        while runs := watched():
            for run in list(read):
                if run not in runs:
                    del read[run]
            for run in runs:
                try:
                    with open(self._path(run), encoding="utf-8") as file:
                        inode = os.fstat(file.fileno()).st_ino
                        known, offset = read.get(run, (inode, 0))
                        if known != inode:
                            offset = 0  # a new answer's file
                        file.seek(offset)
                        chunk = file.read()
                except FileNotFoundError:
                    read.pop(run, None)
                    continue
                complete, _, _ = chunk.rpartition("\n")
                if not complete:
                    read[run] = (inode, offset)
                    continue
                read[run] = (inode, offset + len(complete.encode()) + 1)
                for line in complete.split("\n"):
                    yield json.loads(line)
            await asyncio.sleep(FILE_POLL_SECONDS)


_channel = None


def channel():
    """The deployment's channel: Redis when the broker is one, else the database's own."""
    global _channel
    if _channel is None:
        if settings.BROKER_URL:
            _channel = RedisChannel(settings.BROKER_URL)
        elif connection.vendor == "postgresql":
            _channel = PostgresChannel()
        else:
            name = Path(connection.settings_dict["NAME"])
            _channel = FileChannel(name.with_name(name.name + ".deltas"))
    return _channel


def files_forget_old() -> int:
    """`maintain`'s sweep: the file channel's answers of runs long finished (other channels
    keep nothing)."""
    source = channel()
    return source.forget_old() if isinstance(source, FileChannel) else 0
