"""The PostgreSQL delta channel's publishing side, without a database: the calls of a worker
share one connection, queue without waiting and, while a statement is under way, go together
in the next one; their messages go packed into as few notifications as fit."""

import asyncio
import json

import psycopg

from runs import deltas
from runs.delta_channels import MAX_PAYLOAD, PostgresChannel, decoded, encode, packed
from tests.threads import run_coroutine


class FakeConnection:
    """A connection whose statements wait until the test lets them through."""

    closed = False

    def __init__(self) -> None:
        self.executed: list[list] = []
        self.through = asyncio.Event()

    async def execute(self, sql: str, params: list) -> None:
        self.executed.append(params)
        await self.through.wait()


def _delta(run: str) -> dict:
    return {"run": run, "gen": "1.1", "seq": 1, "text": "Hi"}


def test_what_is_published_meanwhile_goes_together_in_the_next_statement(monkeypatch):
    # given: a connection that takes a moment to open, as a real one does
    opened: list[FakeConnection] = []

    async def connect(**kwargs) -> FakeConnection:
        await asyncio.sleep(0.01)
        opened.append(FakeConnection())
        return opened[-1]

    monkeypatch.setattr(psycopg.AsyncConnection, "connect", connect)
    channel = PostgresChannel()
    monkeypatch.setattr(channel, "_conninfo", lambda: {})

    async def publish_all() -> list:
        # when: a hundred calls publish their first text at the same time, a hundred more
        # while that statement is under way, and others queue without waiting at all
        first = asyncio.gather(*(channel.publish([_delta(f"a{i}")]) for i in range(100)))
        while not opened or not opened[0].executed:
            await asyncio.sleep(0.001)
        second = asyncio.gather(*(channel.publish([_delta(f"b{i}")]) for i in range(100)))
        await asyncio.sleep(0)  # (the second hundred queue)
        soon = [channel.publish_soon([_delta(f"c{i}")]) for i in range(10)]
        await asyncio.sleep(0.01)
        # (nothing waits on an open statement but the calls that asked to)
        assert not first.done() and not second.done()
        assert all(not sent.done() for sent in soon)
        opened[0].through.set()
        await asyncio.gather(first, second)
        return [await sent for sent in soon]

    errors = run_coroutine(publish_all())

    # then: one connection carried all of them in two statements, each once and in order
    assert errors == [None] * 10
    assert len(opened) == 1
    assert len(opened[0].executed) == 2
    sent = [
        message["run"]
        for _, payloads in opened[0].executed
        for payload in payloads
        for message in decoded(payload)
    ]
    expected = [f"a{i}" for i in range(100)] + [f"b{i}" for i in range(100)]
    assert sent == expected + [f"c{i}" for i in range(10)]


def test_a_failed_send_is_told_to_those_it_carried_and_the_next_is_tried(monkeypatch):
    # given: a connection whose first statement fails
    connection = FakeConnection()
    connection.through.set()
    failures = [psycopg.OperationalError("server closed the connection")]

    async def execute(sql: str, params: list) -> None:
        connection.executed.append(params)
        if failures:
            raise failures.pop()

    connection.execute = execute

    async def connect(**kwargs) -> FakeConnection:
        return connection

    monkeypatch.setattr(psycopg.AsyncConnection, "connect", connect)
    channel = PostgresChannel()
    monkeypatch.setattr(channel, "_conninfo", lambda: {})

    async def publish_twice() -> tuple:
        failed = await channel.publish_soon([_delta("r1")])
        try:
            await channel.publish([_delta("r2")])
        except psycopg.OperationalError as error:
            return failed, error
        return failed, None

    # when
    failed, raised = run_coroutine(publish_twice())

    # then: the first send's error is its result; the second went through
    assert isinstance(failed, psycopg.OperationalError)
    assert raised is None
    assert len(connection.executed) == 2


def test_messages_are_packed_in_order_into_payloads_a_notification_can_carry():
    # given: deltas of many runs, one of them the longest text a delta carries, written in
    # characters JSON escapes the most (outside the basic plane: 12 bytes each)
    messages = [
        {"run": f"r{index}", "gen": "1.1", "seq": 1, "text": "word " * (index % 7)}
        for index in range(400)
    ]
    messages.insert(200, {"run": "emoji", "gen": "1.1", "seq": 1, "text": "🙂" * deltas.MAX_TEXT})

    # when
    payloads = packed([encode(message) for message in messages])

    # then: every payload fits a notification, and together they hold the messages in order
    assert len(payloads) > 1
    assert all(len(payload.encode()) <= MAX_PAYLOAD for payload in payloads)
    assert [m for payload in payloads for m in decoded(payload)] == messages


def test_a_message_sent_alone_is_read_as_one():
    # (what a transaction publishes, such as a run's end, goes alone and unpacked)
    assert decoded(json.dumps({"run": "r1", "end": True})) == [{"run": "r1", "end": True}]
