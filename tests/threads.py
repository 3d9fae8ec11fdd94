"""Racing real threads on real database connections, for the concurrency tests."""

import threading
from collections.abc import Callable
from typing import Any

from django.db import connection


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
