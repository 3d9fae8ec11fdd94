"""Waiting on many slow calls at once: one event loop per worker process, in a thread of its
own, where model calls wait without holding a thread each; and a gate per model endpoint that
caps its calls in flight and holds them back while it asks for a pause (429, Retry-After).

The worker's loop (runs.worker) stays synchronous Django: it hands a coroutine here and waits on
the concurrent.futures.Future it gets back, as it waits on the tool threads' futures.
"""

import asyncio
import concurrent.futures
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TypeVar

import uvloop
from django.conf import settings

T = TypeVar("T")

_loop: asyncio.AbstractEventLoop | None = None
_loop_lock = threading.Lock()


def _event_loop() -> asyncio.AbstractEventLoop:
    global _loop
    with _loop_lock:
        if _loop is None:
            # uvloop: hundreds of streamed calls at once spend much of the loop's time in
            # the selector and the transports, which it does in C.
            loop = uvloop.new_event_loop()
            threading.Thread(target=loop.run_forever, name="agent-model-calls", daemon=True).start()
            _loop = loop
        return _loop


def submit(call: Callable[[], Awaitable[T]]) -> concurrent.futures.Future[T]:
    """Start `call()` on the process's event loop; cancelling the future cancels the call."""
    loop = _event_loop()

    async def started() -> T:
        return await call()

    return asyncio.run_coroutine_threadsafe(started(), loop)


@dataclass
class EndpointGate:
    """One endpoint's (and model's) calls from this process: at most `limit` in flight, none
    sent before `paused_until`. Used on the event loop only."""

    limit: int
    in_flight: int = 0
    waiting: int = 0
    paused_until: float = 0.0
    _slots: asyncio.Semaphore | None = field(default=None, repr=False)

    async def __aenter__(self) -> "EndpointGate":
        if self._slots is None:
            self._slots = asyncio.Semaphore(self.limit)
        self.waiting += 1
        try:
            await self._slots.acquire()
            try:
                # A pause that began while this call waited for a slot holds it too.
                while (pause := self.paused_until - time.monotonic()) > 0:
                    await asyncio.sleep(pause)
            except BaseException:
                self._slots.release()
                raise
        finally:
            self.waiting -= 1
        self.in_flight += 1
        return self

    async def __aexit__(self, *exc_info) -> None:
        self.in_flight -= 1
        self._slots.release()

    def pause(self, seconds: float) -> None:
        """The endpoint asked for a pause: no call of this process is sent before it ends."""
        self.paused_until = max(self.paused_until, time.monotonic() + seconds)


_gates: dict[tuple[str, str], EndpointGate] = {}


def gate(base_url: str, model: str) -> EndpointGate:
    """The gate of an endpoint and model (on the event loop: no lock needed)."""
    key = (base_url, model)
    if key not in _gates:
        _gates[key] = EndpointGate(limit=settings.AGENTPORTAL["MODEL_CONCURRENCY"])
    return _gates[key]


def gates_report() -> dict[str, dict[str, float]]:
    """Each endpoint's calls in flight and waiting, and how long its pause lasts yet."""
    now = time.monotonic()
    return {
        f"{model}@{url}": {
            "in_flight": g.in_flight,
            "waiting": g.waiting,
            "paused_seconds": round(max(0.0, g.paused_until - now), 1),
        }
        for (url, model), g in list(_gates.items())
    }
