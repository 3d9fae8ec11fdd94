"""Counts of attempts over a fixed window, per client, in the cache every web node shares."""

import hashlib
import random
import unicodedata
from datetime import timedelta
from typing import NamedTuple

from django.core.cache import cache, caches
from django.core.cache.backends.db import DatabaseCache
from django.core.cache.backends.redis import RedisCache
from django.db import connections, models, router
from django.utils import timezone


def counter_key(kind: str, *parts: str) -> str:
    """A cache key for `parts` as a person would mean them: the same name however it is
    spelled in Unicode or case, and never a character the cache's table refuses."""
    meant = "\x1f".join(unicodedata.normalize("NFKC", part).casefold() for part in parts)
    return f"{kind}:{hashlib.sha256(meant.encode()).hexdigest()}"


class Count(NamedTuple):
    number: int  # this one included
    seconds_left: float  # until the window ends and the count starts again


class WindowCounter:
    """How many times something happened since its first time in the current window; the
    window does not move with later attempts. Each add is one atomic increment in the shared
    cache, so requests that arrive together each get a number of their own: a limit checked
    on that number is never passed, however many arrive at once."""

    def __init__(self, key: str, window: int) -> None:
        self.key, self.window = key, window

    def add(self) -> Count:
        backend = caches["default"]
        if isinstance(backend, DatabaseCache):
            return self._add_in_table(backend)
        if isinstance(backend, RedisCache):
            return self._add_in_redis(backend)
        return self._add_by_incr(backend)

    def clear(self) -> None:
        cache.delete(self.key)

    def _add_in_table(self, backend: DatabaseCache) -> Count:
        """One upsert of the key's row: a count of 1 when there is none or it expired, else
        one more. The row's value is the count in digits, read only by this class."""
        db = connections[router.db_for_write(backend.cache_model_class)]
        quote = db.ops.quote_name
        table, key, value, expires = map(quote, (backend._table, "cache_key", "value", "expires"))
        now = timezone.now().replace(microsecond=0)
        ends = now + timedelta(seconds=self.window)
        expired = f"{table}.{expires} < %s"
        with db.cursor() as cursor:
            cursor.execute(
                f"INSERT INTO {table} ({key}, {value}, {expires}) VALUES (%s, '1', %s) "
                f"ON CONFLICT ({key}) DO UPDATE SET "
                f"{value} = CASE WHEN {expired} THEN '1' "
                f"ELSE CAST(CAST({table}.{value} AS BIGINT) + 1 AS TEXT) END, "
                f"{expires} = CASE WHEN {expired} THEN excluded.{expires} "
                f"ELSE {table}.{expires} END "
                f"RETURNING {value}, {expires}",
                [
                    backend.make_and_validate_key(self.key),
                    *[db.ops.adapt_datetimefield_value(moment) for moment in (ends, now, now)],
                ],
            )
            number, ends = cursor.fetchone()
        field = models.Expression(output_field=models.DateTimeField())
        for converter in db.ops.get_db_converters(field) + field.get_db_converters(db):
            ends = converter(ends, field, db)
        return Count(int(number), max(0.0, (ends - timezone.now()).total_seconds()))

    def _add_in_redis(self, backend: RedisCache) -> Count:
        """Made with its expiry if missing, incremented, and its time left read, in one
        transaction (Django's incr would check the key exists first, and a key that expired
        in between would be made again without an expiry)."""
        key = backend.make_and_validate_key(self.key)
        pipeline = backend._cache.get_client(key, write=True).pipeline(transaction=True)
        pipeline.set(key, 0, ex=self.window, nx=True).incr(key).pttl(key)
        _, number, milliseconds_left = pipeline.execute()
        return Count(number, max(0, milliseconds_left) / 1000)

    def _add_by_incr(self, backend) -> Count:
        """Any other cache whose incr is atomic (the local memory one is, under its lock)."""
        while True:
            if backend.add(self.key, 1, timeout=self.window):
                return Count(1, self.window)
            try:
                return Count(backend.incr(self.key), self.window)
            except ValueError:  # it expired between the two: start the window again
                continue


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
