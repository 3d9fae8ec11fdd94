"""The threads of the blocking tools, and the one event a worker waits on while slow calls
(in those threads, or awaited on the event loop) are in flight."""

import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

from django.conf import settings
from django.db import connections

T = TypeVar("T")

# Set when any slow call ends: the worker waits on this one event, however many calls are in
# flight (waiting on each of hundreds of futures costs as much as the calls' own work).
call_ended = threading.Event()


def wake(_future: Future) -> None:
    call_ended.set()


_executor: ThreadPoolExecutor | None = None
_executor_lock = threading.Lock()


def tool_pool() -> ThreadPoolExecutor:
    global _executor
    with _executor_lock:
        if _executor is None:
            # The blocking tools' own threads: model calls never wait for one.
            _executor = ThreadPoolExecutor(
                max_workers=settings.AGENTPORTAL["TOOL_THREADS"], thread_name_prefix="agent-tool"
            )
        return _executor


def in_thread(function: Callable[[], T]) -> T:
    try:
        return function()
    finally:
        # A thread that waited on a model or a tool closes its own database connections.
        connections.close_all()
