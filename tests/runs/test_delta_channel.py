"""The PostgreSQL delta channel's publishing side, without a database: the calls of a worker
that flush at once share one connection and, while a statement is under way, the next one;
their messages go packed into as few notifications as fit."""

import asyncio
import json

import psycopg

from runs import deltas
from runs.delta_channels import MAX_PAYLOAD, PostgresChannel, decoded, encode, packed
from tests.threads import run_coroutine


class FakeConnection:
    closed = False

    def __init__(self) -> None:
        self.executed: list[list] = []

    async def execute(self, sql: str, params: list) -> None:
        self.executed.append(params)
        await asyncio.sleep(0.01)  # a round trip


def test_calls_that_flush_at_once_open_one_connection(monkeypatch):
    # given: a connection that takes a moment to open, as a real one does
    opened: list[FakeConnection] = []

    async def connect(**kwargs) -> FakeConnection:
        await asyncio.sleep(0.01)
        opened.append(FakeConnection())
        return opened[-1]

    monkeypatch.setattr(psycopg.AsyncConnection, "connect", connect)
    channel = PostgresChannel()
    monkeypatch.setattr(channel, "_conninfo", lambda: {})

    # when: a hundred calls publish their first text at the same time
    async def publish_all() -> None:
        await asyncio.gather(
            *(
                channel.publish([{"run": f"r{index}", "gen": "1.1", "seq": 1, "text": "Hi"}])
                for index in range(100)
            )
        )

    run_coroutine(publish_all())

    # then: one connection carried all of them, those that came while the first statement
    # was under way together in the next one, each once and in order
    assert len(opened) == 1
    assert len(opened[0].executed) == 2
    sent = [
        message["run"]
        for _, payloads in opened[0].executed
        for payload in payloads
        for message in decoded(payload)
    ]
    assert sent == [f"r{index}" for index in range(100)]


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
