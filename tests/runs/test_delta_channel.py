"""The PostgreSQL delta channel's publishing side, without a database: the calls of a worker
that flush at once share one connection."""

import asyncio

import psycopg

from runs.deltas import PostgresChannel
from tests.threads import run_coroutine


class FakeConnection:
    closed = False

    def __init__(self) -> None:
        self.executed: list[list] = []

    async def execute(self, sql: str, params: list) -> None:
        self.executed.append(params)


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

    # then: one connection carried all of them
    assert len(opened) == 1
    assert len(opened[0].executed) == 100
