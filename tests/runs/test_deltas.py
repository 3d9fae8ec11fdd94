"""The delta channel on the database in use: what the worker publishes, a web process hears in
order; a run's end, written in the transaction that ends it, silences everything after it."""

import asyncio
import os
import time

import pytest
from django.db import transaction

from runs import delta_channels, deltas
from runs.deltas import DeltaHub, DeltaPublisher
from tests.conftest import wait_for_async
from tests.runs.helpers import RecordingChannel
from tests.threads import run_coroutine

pytestmark = pytest.mark.django_db(transaction=True)


def hub_hearing(run: str, action, *, until, timeout: float = 10.0) -> tuple[list[dict], object]:
    """Watch `run` on a fresh hub, do `action(heard_so_far)` (a coroutine function; awaiting
    heard_so_far() waits until the hub heard all that was published before), and collect
    what the hub passes on until `until(messages)` and the hub heard all that was published;
    returns the messages and the hub's answer."""

    async def scenario():
        hub = DeltaHub()
        heard: list[dict] = []
        hub.watch(run, heard.append)
        try:
            # the listener hears the channel before anything is published
            await heard_so_far(hub)
            await action(lambda: heard_so_far(hub))
            await wait_for_async(
                lambda: until(heard), timeout=timeout, message=f"the hub passed on only {heard}"
            )
            # and hears nothing more of the run after what was published until now
            await heard_so_far(hub)
        finally:
            hub.task.cancel()
        return heard, hub.answers.get(run)

    return run_coroutine(scenario())


async def heard_so_far(hub: DeltaHub) -> None:
    """Until the hub has heard everything published on the channel so far: a probe about a
    run of its own, published after it (and again until heard, as a listener that is still
    connecting misses what comes before), reaches the hub, and the channel keeps the order
    of what is published."""
    probe = f"probe-{os.getpid()}-{time.monotonic_ns()}"
    probes: list[dict] = []
    hub.watch(probe, probes.append)
    sent = 0

    async def probe_heard() -> bool:
        nonlocal sent
        sent += 1
        message = {"run": probe, "gen": "0.1", "seq": sent, "text": ".", "at": time.time()}
        await delta_channels.channel().publish([message])
        return bool(probes)

    try:
        await wait_for_async(
            probe_heard, interval=0.05, message="the hub never heard the delta channel"
        )
    finally:
        hub.unwatch(probe, probes.append)
        if isinstance(delta_channels.channel(), delta_channels.FileChannel):
            delta_channels.channel().forget(probe)


def test_published_deltas_are_heard_in_order_and_done_forgets_the_answer():
    run = f"run-{os.getpid()}-{time.monotonic_ns()}"
    publisher = DeltaPublisher(run=run, gen="2.1")

    async def write(_heard_so_far):
        for word in ["Your ", "parcel ", "PCL-1 ", "was ", "delivered."]:
            await publisher.add(word)
            await publisher.flush()
        await publisher.flush(done=True)

    heard, answer = hub_hearing(run, write, until=lambda m: any(x.get("done") for x in m))

    texts = [m["text"] for m in heard if "text" in m]
    assert "".join(texts) == "Your parcel PCL-1 was delivered."
    assert [m["seq"] for m in heard if "text" in m] == list(range(1, len(texts) + 1))
    assert heard[-1] == {"run": run, "gen": "2.1", "done": True}
    assert answer is None


def test_nothing_published_after_a_runs_end_is_heard():
    run = f"run-{os.getpid()}-{time.monotonic_ns()}"
    publisher = DeltaPublisher(run=run, gen="0.1")

    async def write_stop_write(heard_so_far):
        await publisher.add("Before the stop. ")
        await publisher.flush()
        await heard_so_far()
        await asyncio.to_thread(end_in_a_transaction, run)
        await heard_so_far()
        await publisher.add("After the stop.")
        await publisher.flush()

    heard, answer = hub_hearing(
        run, write_stop_write, until=lambda m: any(x.get("end") for x in m), timeout=5
    )

    assert [m.get("text") for m in heard if "text" in m] == ["Before the stop. "]
    assert heard[-1] == {"run": run, "end": True}
    assert answer is None


def end_in_a_transaction(run: str) -> None:
    from django.db import connection

    try:
        with transaction.atomic():
            deltas.run_ended(run)
    finally:
        connection.close()


def test_a_new_attempt_starts_the_answer_over():
    hub = DeltaHub()
    hub.hear({"run": "r", "gen": "1.1", "seq": 1, "text": "Half an ans", "at": 0})
    hub.hear({"run": "r", "gen": "1.2", "seq": 1, "text": "A whole", "at": 0})
    hub.hear({"run": "r", "gen": "1.2", "seq": 2, "text": " answer.", "at": 0})
    # a repeated delivery changes nothing
    hub.hear({"run": "r", "gen": "1.2", "seq": 2, "text": " answer.", "at": 0})

    assert hub.answers["r"].text == "A whole answer."
    assert hub.answers["r"].gen == "1.2"


def test_long_text_is_published_in_parts_that_fit_a_notification():
    recorder = RecordingChannel()
    delta_channels._channel, saved = recorder, delta_channels._channel
    try:
        publisher = DeltaPublisher(run="r", gen="0.1")
        run_coroutine(publisher.add("x" * (deltas.MAX_TEXT * 2 + 5)))
    finally:
        delta_channels._channel = saved

    [messages] = recorder.statements
    assert [len(m["text"]) for m in messages] == [deltas.MAX_TEXT, deltas.MAX_TEXT, 5]
    assert all(len(delta_channels.encode(m)) < 8000 for m in messages)


def test_a_hub_forgets_old_answers_and_ends_at_most_once_a_second(monkeypatch):
    # given: a hub that heard an answer begin and a run end, at second 1000
    clock = [1000.0]
    monkeypatch.setattr(time, "monotonic", lambda: clock[0])
    hub = DeltaHub()
    hub.hear({"run": "talking", "gen": "1.1", "seq": 1, "text": "Hal", "at": 0})
    hub.hear({"run": "stopped", "end": True})

    # when: nothing more is heard of them for longer than they are kept, then a message comes
    clock[0] += delta_channels.FORGET_SECONDS + 0.5
    hub.hear({"run": "other", "gen": "1.1", "seq": 1, "text": "Hi", "at": 0})

    # then: both are forgotten
    assert "talking" not in hub.answers
    assert "stopped" not in hub.ended

    # and a message within a second of that sweep does not sweep again
    hub.hear({"run": "later", "end": True})
    hub.ended["later"] -= delta_channels.FORGET_SECONDS * 2
    clock[0] += 0.5
    hub.hear({"run": "another", "gen": "1.1", "seq": 1, "text": "Hi", "at": 0})
    assert "later" in hub.ended
    clock[0] += deltas.SWEEP_SECONDS
    hub.hear({"run": "another", "gen": "1.1", "seq": 2, "text": "!", "at": 0})
    assert "later" not in hub.ended
