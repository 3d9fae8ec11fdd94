"""The PostgreSQL delta channel's publishing side, without a database: the calls of a worker
that flush at once share one connection and, while a statement is under way, the next one."""

import asyncio
import json

import psycopg

from runs.delta_channels import PostgresChannel
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
    sent = [json.loads(text)["run"] for _, texts in opened[0].executed for text in texts]
    assert sent == [f"r{index}" for index in range(100)]
