"""The counts and slots in the shared cache: none is forgotten while live, however many there
are, and expired ones are swept."""

import time
from datetime import timedelta

import pytest
import time_machine
from django.core.cache import cache
from django.utils import timezone

from agentportal.counters import Slots, WindowCounter, cache_expired_delete
from runs import services
from tests.threads import in_threads


@pytest.mark.counters
@pytest.mark.usefixtures("fresh_cache")
def test_counts_added_at_once_each_get_a_number_of_their_own(transactional_db):
    # given one count, and forty requests that add to it at the same instant
    counter = WindowCounter("count:together", 60)

    # when they all add
    numbers = in_threads([lambda: counter.add().number for _ in range(40)])

    # then none saw another's number: a limit checked on them lets exactly its number through
    assert sorted(numbers) == list(range(1, 41))


@pytest.mark.counters
@pytest.mark.usefixtures("fresh_cache")
def test_a_count_starts_again_when_its_window_has_passed_and_says_how_long_is_left():
    counter = WindowCounter("count:window", 1)
    first = counter.add()
    assert first.number == 1
    assert 0 <= first.seconds_left <= 1
    assert counter.add().number == 2

    # when the window has passed (the database's cache keeps whole seconds)
    time.sleep(2.1)

    # then the count starts again, and clearing it starts it again too
    assert counter.add().number == 1
    counter.clear()
    assert counter.add().number == 1


@pytest.mark.counters
@pytest.mark.usefixtures("fresh_cache")
def test_a_key_holding_hundreds_of_slots_gets_exactly_its_limit():
    # given a limit of 400 slots, past the 300 rows the cache used to keep before dropping some
    slots = Slots("streams:many", 400, 60)

    # when 401 holders ask
    taken = [slots.take() for _ in range(401)]

    # then the first 400 each hold a different slot and the last is refused
    assert None not in taken[:400]
    assert len(set(taken[:400])) == 400
    assert taken[400] is None


@pytest.mark.usefixtures("fresh_cache")
def test_maintain_deletes_the_expired_rows_of_the_shared_cache_and_keeps_the_live_ones():
    # given a count that expires in a second and one that lives for a minute
    cache.set("count:short", 1, timeout=1)
    cache.set("count:long", 1, timeout=60)

    # when maintain runs two seconds later
    with time_machine.travel(timezone.now() + timedelta(seconds=2)):
        report = services.maintain()

    # then the expired row is gone from the table and the live one kept
    assert report["cache_expired"] == 1
    assert cache_expired_delete() == 0
    assert cache.get("count:long") == 1
