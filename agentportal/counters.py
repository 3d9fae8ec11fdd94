"""Counts of attempts over a fixed window, per client, in the cache every web node shares."""

import hashlib
import random
import time
import unicodedata

from django.core.cache import cache, caches
from django.core.cache.backends.db import DatabaseCache
from django.db import connections, router
from django.utils import timezone


def counter_key(kind: str, *parts: str) -> str:
    """A cache key for `parts` as a person would mean them: the same name however it is
    spelled in Unicode or case, and never a character the cache's table refuses."""
    meant = "\x1f".join(unicodedata.normalize("NFKC", part).casefold() for part in parts)
    return f"{kind}:{hashlib.sha256(meant.encode()).hexdigest()}"


class WindowCounter:
    """How many times something happened since its first time in the current window; the
    window does not move with later attempts. Concurrent requests may each miss the other's
    count: a limit can be passed by as many requests as arrive at the same instant."""

    def __init__(self, key: str, window: int) -> None:
        self.key, self.window = key, window

    def count(self) -> int:
        value = cache.get(self.key)
        return value[0] if value else 0

    def add(self) -> int:
        now = time.time()
        count, ends = cache.get(self.key) or (0, now + self.window)
        count += 1
        cache.set(self.key, (count, ends), timeout=max(1, int(ends - now)))
        return count

    def clear(self) -> None:
        cache.delete(self.key)


class Slots:
    """At most `limit` holders at once under one key, in the shared cache: each holds a slot
    of its own, so nothing counts up and down; a holder that dies without letting go frees its
    slot when it expires after `seconds`."""

    def __init__(self, key: str, limit: int, seconds: float) -> None:
        self.key, self.limit, self.seconds = key, limit, seconds

    def take(self) -> str | None:
        """A free slot's key, now held; None when all are held. The search starts at a slot
        chosen at random: from the first, a key holding hundreds would try each held one
        first, a write to the cache each."""
        start = random.randrange(self.limit) if self.limit else 0
        for index in range(self.limit):
            slot = f"{self.key}:{(start + index) % self.limit}"
            if cache.add(slot, 1, timeout=self.seconds):
                return slot
        return None

    @staticmethod
    def give_back(slot: str) -> None:
        cache.delete(slot)


def cache_expired_delete() -> int:
    """Delete the shared cache's expired rows (counts and slots nobody gave back), which the
    cache itself deletes only when read; how many. A sweep of `maintain`."""
    backend = caches["default"]
    if not isinstance(backend, DatabaseCache):
        return 0
    db = connections[router.db_for_write(backend.cache_model_class)]
    table, expires = db.ops.quote_name(backend._table), db.ops.quote_name("expires")
    with db.cursor() as cursor:
        cursor.execute(
            f"DELETE FROM {table} WHERE {expires} < %s",
            [db.ops.adapt_datetimefield_value(timezone.now().replace(microsecond=0))],
        )
        return cursor.rowcount
