"""The one core of the live streams: streams that join together are answered by one read,
each gets its key's news, a failing read is survived, and the reading ends with the last
stream."""

import asyncio

from runs.live_hub import PollingHub, sse_event
from tests.threads import run_coroutine


class Stream:
    def __init__(self) -> None:
        self.told: list = []
        self.heard = asyncio.Event()

    def deliver(self, news) -> None:
        self.told.append(news)
        self.heard.set()


def test_streams_joining_together_are_answered_by_one_read_with_their_own_news():
    reads: list[set] = []

    def read(watched):
        reads.append(set(watched))
        return {key: f"news of {key}" for key in watched}

    async def scenario():
        hub = PollingHub(read, every=60, gap=0.01, name="test")
        first, second, other = Stream(), Stream(), Stream()
        hub.join("a", first)
        hub.join("a", second)
        hub.join("b", other)
        await asyncio.wait_for(other.heard.wait(), 5)
        for stream, key in ((first, "a"), (second, "a"), (other, "b")):
            hub.leave(key, stream)
        hub.wake.set()
        await asyncio.wait_for(hub.task, 5)
        return first.told, second.told, other.told, hub.reads

    first, second, other, count = run_coroutine(scenario())

    assert (first, second, other) == (["news of a"], ["news of a"], ["news of b"])
    assert reads == [{"a", "b"}] and count == 1


def test_a_failing_read_is_survived_and_the_next_one_delivers():
    answers = [RuntimeError("database away"), {"a": "back"}]

    def read(watched):
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    async def scenario():
        hub = PollingHub(read, every=0.05, name="test")
        stream = hub.join("a", Stream())
        await asyncio.wait_for(stream.heard.wait(), 5)
        failing_after = hub.failing
        hub.leave("a", stream)
        await asyncio.wait_for(hub.task, 5)
        return stream.told, hub.reads, failing_after

    told, count, failing = run_coroutine(scenario())

    assert told == ["back"] and count == 2 and failing is False


def test_an_event_is_framed_with_its_id_when_it_has_one():
    assert sse_event("changed", "abc") == "event: changed\ndata: abc\n\n"
    assert sse_event("run.queued", "{}", event_id=3) == "id: 3\nevent: run.queued\ndata: {}\n\n"
