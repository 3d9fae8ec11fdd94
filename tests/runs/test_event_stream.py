"""The event-stream hub: every stream of a web process waits on one hub, and one read serves
them all, whatever their number."""

import asyncio
import threading

import pytest
from asgiref.sync import sync_to_async

from runs import event_stream, live_hub, selectors, services
from runs.deltas import delta_hub
from runs.event_stream import run_event_stream, stream_hub
from runs.models import AgentRun
from tests.conftest import wait_for_async
from tests.runs.helpers import customer_with_parcel, queue, shop_create
from tests.threads import run_coroutine


def _watching(hub) -> int:
    """How many streams wait at the hub."""
    return sum(len(streams) for streams in hub.subscribers.values())


def _queued(count: int) -> list[AgentRun]:
    """`count` customers of a new shop, each asking where their parcel is."""
    shop = shop_create()
    customers = [customer_with_parcel(shop, f"PCL-{n}") for n in range(1, count + 1)]
    return [queue(customer, shop, f"PCL-{n}") for n, customer in enumerate(customers, start=1)]


def test_runs_events_since_reads_once_for_runs_without_news(db, django_assert_num_queries):
    # given three queued runs, each read up to its one event
    runs = _queued(3)

    # when they are asked for news
    with django_assert_num_queries(1):
        news = selectors.runs_events_since({run.pk: 1 for run in runs})

    # then there is none
    assert news == {}


def test_runs_events_since_gives_each_run_its_events_after_its_own_seq(
    db, django_assert_num_queries
):
    # given three runs, one cancelled (two events, finished), one read from the start
    first, second, third = _queued(3)
    services.run_cancel(run=first)

    # when asked with a cursor each
    with django_assert_num_queries(2):
        news = selectors.runs_events_since({first.pk: 1, second.pk: 0, third.pk: 1})

    # then the cancelled run gives its last event and says it is finished; the run read from
    # the start gives its first; the third has no news
    assert {run_id: ([e.seq for e in events], over) for run_id, (events, over) in news.items()} == {
        first.pk: ([2], True),
        second.pk: ([1], False),
    }


@pytest.mark.django_db(transaction=True)
def test_thirty_streams_of_three_runs_share_one_hub_and_get_each_event_once():
    # given three queued runs and ten streams on each, opened after the runs' first event
    runs = _queued(3)

    async def watch(run: AgentRun) -> list[str]:
        return [chunk async for chunk in run_event_stream(run.pk, after=1)]

    async def scenario() -> tuple[list[list[str]], int]:
        streams = [asyncio.create_task(watch(run)) for run in runs for _ in range(10)]
        hub = stream_hub()
        await wait_for_async(
            lambda: _watching(hub) == 30 and hub.reads and hub.read_delivered == hub.read_started,
            message="the thirty streams never all waited at the hub after a read",
        )
        reads_before = hub.reads
        # when the runs are cancelled
        for run in runs:
            await sync_to_async(services.run_cancel)(run=run)
        received = await asyncio.wait_for(asyncio.gather(*streams), 10)
        return received, stream_hub().reads - reads_before

    received, reads = run_coroutine(scenario())

    # then every stream sends its run's cancellation once and ends
    for chunks in received:
        assert chunks[0] == "retry: 1000\n\n"
        assert [chunk.split("\n")[:2] for chunk in chunks[1:]] == [
            ["id: 2", "event: run.cancelled"]
        ]
    # and a few reads served all thirty streams, not one each per poll
    assert reads <= 5


@pytest.mark.django_db(transaction=True)
def test_a_stream_on_a_finished_run_sends_what_is_left_and_ends():
    # given a cancelled run, read up to its first event
    (run,) = _queued(1)
    services.run_cancel(run=run)

    async def watch() -> list[str]:
        return [chunk async for chunk in run_event_stream(run.pk, after=1)]

    # when a stream opens on it
    chunks = run_coroutine(asyncio.wait_for(watch(), 10))

    # then it sends the rest and ends at once
    assert [chunk.split("\n")[:2] for chunk in chunks[1:]] == [["id: 2", "event: run.cancelled"]]


@pytest.mark.django_db(transaction=True)
def test_streams_of_one_run_from_different_places_each_get_their_own_events():
    # given a queued run, a stream from its start and one after its first event
    (run,) = _queued(1)

    async def watch(after: int) -> list[str]:
        return [chunk.split("\n")[0] async for chunk in run_event_stream(run.pk, after=after)]

    async def scenario() -> list[list[str]]:
        streams = [asyncio.create_task(watch(0)), asyncio.create_task(watch(1))]
        hub = stream_hub()
        await wait_for_async(
            lambda: _watching(hub) == 2, message="the two streams never waited at the hub"
        )
        # when the run is cancelled
        await sync_to_async(services.run_cancel)(run=run)
        return await asyncio.wait_for(asyncio.gather(*streams), 10)

    from_start, after_first = run_coroutine(scenario())

    # then each sent what came after its own place, once
    assert from_start == ["retry: 1000", "id: 1", "id: 2"]
    assert after_first == ["retry: 1000", "id: 2"]


@pytest.mark.django_db(transaction=True)
def test_a_quiet_stream_sends_keep_alive_lines_until_it_ends(monkeypatch):
    # given a run that stays queued, and streams that last 1 s with a keep-alive each 0.3 s
    monkeypatch.setattr(live_hub, "STREAM_SECONDS", 1.0)
    monkeypatch.setattr(event_stream, "KEEPALIVE_SECONDS", 0.3)
    (run,) = _queued(1)

    async def watch() -> list[str]:
        return [chunk async for chunk in event_stream.run_event_stream(run.pk, after=1)]

    # when a stream opens on it
    chunks = run_coroutine(asyncio.wait_for(watch(), 10))

    # then it sends comment lines only, and ends by itself
    assert chunks[0] == "retry: 1000\n\n"
    assert 2 <= len(chunks[1:]) <= 3
    assert set(chunks[1:]) == {": keep-alive\n\n"}


@pytest.mark.django_db(transaction=True)
def test_text_being_written_follows_the_events_committed_before_it(monkeypatch):
    # given a running run whose first read of events is held until the test lets it finish,
    # and text of its answer that arrives while that read is under way
    (run,) = _queued(1)
    reading, may_finish = threading.Event(), threading.Event()
    read = event_stream._read

    def read_held(cursors):
        reading.set()
        assert may_finish.wait(10), "the test never let the read finish"
        return read(cursors)

    monkeypatch.setattr(event_stream, "_read", read_held)

    async def watch() -> list[str]:
        chunks = []
        stream = run_event_stream(run.pk, after=0)
        try:
            chunks.append(await anext(stream))
            next_chunk = asyncio.ensure_future(anext(stream))
            await wait_for_async(reading.is_set, message="the hub never began its first read")
            delta_hub().hear({"run": str(run.pk), "gen": "1.1", "seq": 1, "text": "Hello", "at": 0})
            may_finish.set()
            chunks.append(await next_chunk)
            chunks.append(await anext(stream))
        finally:
            may_finish.set()
            await stream.aclose()
        return chunks

    # when a stream follows it
    chunks = run_coroutine(asyncio.wait_for(watch(), 10))

    # then the committed event comes first, the text after it
    assert [chunk.split("\n")[:2] for chunk in chunks[1:]] == [
        ["id: 1", "event: run.queued"],
        ["event: message.delta", 'data: {"text": "Hello", "gen": "1.1", "seq": 1, "at": 0}'],
    ]
