"""A run's events as server-sent events, served without holding a thread: under the ASGI server
the stream is an async generator that waits on the event loop between polls, and each poll
reads in a thread of the loop's pool only while it reads."""

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable

from asgiref.sync import sync_to_async
from django.db import connection

from runs import selectors
from runs.models import FINISHED_STATUSES, AgentRun
from runs.serializers import RunEventSerializer

TERMINAL_EVENTS = {"run.completed", "run.failed", "run.cancelled"}
# A stream ends after this long (the client reconnects with Last-Event-ID), so a stream the
# client forgot does not hold its key's slot for ever.
STREAM_SECONDS = 30.0
POLL_SECONDS = 0.5


def _read(run_id, after: int) -> tuple[list[dict], bool]:
    """The run's events after `after` as the stream sends them, and whether there can be no
    more; in a thread of the pool, which gives its database connection back."""
    try:
        # The status first: a run's final event commits with its final status, so a run read
        # as finished has all its events visible to the read that follows.
        finished = AgentRun.objects.filter(pk=run_id, status__in=FINISHED_STATUSES).exists()
        events = selectors.run_events_after(run=AgentRun(pk=run_id), after=after)
        return [RunEventSerializer(event).data for event in events], finished and not events
    finally:
        connection.close()


async def run_event_stream(run_id, after: int) -> AsyncIterator[str]:
    """The run's events after `after`; ends after a terminal event, once the run finished, or
    after STREAM_SECONDS."""
    ends = time.monotonic() + STREAM_SECONDS
    read = sync_to_async(_read, thread_sensitive=False)
    yield "retry: 1000\n\n"
    while True:
        events, over = await read(run_id, after)
        for data in events:
            after = data["seq"]
            yield f"id: {after}\nevent: {data['type']}\ndata: {json.dumps(data)}\n\n"
            if data["type"] in TERMINAL_EVENTS:
                return
        if over or time.monotonic() >= ends:
            return
        await asyncio.sleep(POLL_SECONDS)


class ClosingStream:
    """An async stream that calls `on_close` when the server closes the response, however it
    ends: finished, timed out, or the client gone before the first byte."""

    def __init__(self, events: AsyncIterator[str], on_close: Callable[[], None]) -> None:
        self.events, self.on_close = events, on_close

    def __aiter__(self) -> AsyncIterator[str]:
        return self.events

    def close(self) -> None:
        self.on_close()
