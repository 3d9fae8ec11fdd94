"""Racing real threads on real database connections, for the concurrency tests."""

import asyncio
import functools
import threading
from collections.abc import Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from django.db import connection

T = TypeVar("T")


def in_threads(targets: list[Callable[[], Any]]) -> list[Any]:
    """Run every target in its own thread, released together by a barrier; each thread
    closes its own connection. Re-raises the first error."""
    barrier = threading.Barrier(len(targets))
    results: list[Any] = [None] * len(targets)
    errors: list[BaseException] = []

    def body(index: int) -> None:
        try:
            barrier.wait(timeout=20)
            results[index] = targets[index]()
        except BaseException as error:
            errors.append(error)
        finally:
            connection.close()

    threads = [threading.Thread(target=body, args=(i,)) for i in range(len(targets))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=90)
    assert not any(thread.is_alive() for thread in threads), "a thread hung"
    if errors:
        raise errors[0]
    return results


def in_threads_numbered(target: Callable[[int], T], count: int) -> list[T]:
    """target(0) ... target(count - 1), each in its own thread, as in_threads runs them."""
    return in_threads([functools.partial(target, index) for index in range(count)])


class Background:
    """One call in a thread of its own (a second worker), on its own connection; join()
    returns its result or re-raises its error."""

    def __init__(self, target: Callable[[], Any]):
        self.result: Any = None
        self.error: BaseException | None = None

        def body() -> None:
            try:
                self.result = target()
            except BaseException as error:
                self.error = error
            finally:
                connection.close()

        self.thread = threading.Thread(target=body)
        self.thread.start()

    def join(self, timeout: float = 30) -> Any:
        self.thread.join(timeout=timeout)
        assert not self.thread.is_alive(), "the worker thread hung"
        if self.error is not None:
            raise self.error
        return self.result


def run_coroutine(coroutine: Coroutine[Any, Any, T]) -> T:
    """asyncio.run in a thread of its own: a test process may already have an event loop
    running in its main thread (the browser tests' Playwright)."""
    with ThreadPoolExecutor(1) as thread:
        return thread.submit(asyncio.run, coroutine).result()
