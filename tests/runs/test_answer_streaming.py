"""Answers that stream: through the real cluster and the real openai client against a local
streaming endpoint, the run's event stream delivers the text as the model writes it, on every
web node; /stop cuts it at once and nothing of the stopped answer is kept."""

import json
import threading
import time

import pytest
from django.contrib.auth.models import User

from runs.models import AgentRun, AttemptStatus, ModelAttempt, RunStatus
from tests import factories
from tests.conftest import wait_for
from tests.extension_app import parcels
from tests.http import open_stream
from tests.runs.helpers import LOCKER_QUESTION

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.cluster]

# Its answer is long enough to stream in many parts: "Parcel PCL-1 is in transit; you can
# pick it up at Station Square."
QUESTION = LOCKER_QUESTION.format(parcel="PCL-1")


class EventReader:
    """Reads an event stream in a thread: each event with when it arrived."""

    def __init__(self, response) -> None:
        self.response = response
        self.events: list[tuple[float, str, dict]] = []
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        kind, data = "", ""
        try:
            for raw in self.response:
                line = raw.decode().rstrip("\n")
                if line.startswith("event: "):
                    kind = line[7:]
                elif line.startswith("data: "):
                    data = line[6:]
                elif not line and kind:
                    self.events.append((time.time(), kind, json.loads(data)))
                    kind, data = "", ""
        except (OSError, ValueError):
            return

    def types(self) -> list[str]:
        return [kind for _, kind, _ in self.events]

    def deltas(self) -> list[dict]:
        return [data for _, kind, data in self.events if kind == "message.delta"]

    def close(self) -> None:
        self.response.close()


@pytest.fixture
def streaming_shop(parcel_shop):
    """The parcel shop, its agent on the model the settings name (the cluster is given the
    loopback endpoint)."""
    factories.release_publish(merchant=parcel_shop, model="default", tools=parcels.TOOLS)
    return parcel_shop


def answering_cluster(cluster, stub, *, latency: float):
    endpoint = stub(latency=latency, script=parcels.SCRIPT)
    cluster(
        env={
            "AGENTPORTAL_MODEL": "openai",
            "OPENAI_BASE_URL": endpoint.base_url,
            "AGENTPORTAL_OPENAI_MODEL": "stub",
            # (the locker is found at once: only the model's writing takes time)
            "PARCEL_LOCKER_LATENCY_SECONDS": "0",
        }
    )
    return endpoint


def queue_locker_question(merchant) -> AgentRun:
    pat = User.objects.get(username="pat")
    return factories.run_queue(customer=pat, merchant=merchant, message=QUESTION)


def test_the_event_stream_delivers_deltas_before_the_answer_commits_on_every_web_node(
    streaming_shop, cluster, stub, web_server
):
    # given: two web nodes, the cluster, and a model that writes its answer over a second
    first, second = web_server(), web_server()
    key = factories.api_key_for(User.objects.get(username="pat"), streaming_shop)
    answering_cluster(cluster, stub, latency=1.0)

    # when: pat asks, and a client on each node follows the run
    run = queue_locker_question(streaming_shop)
    path = f"/api/v1/runs/{run.pk}/events/stream"
    readers = [EventReader(open_stream(base, path, key=key)) for base in (first, second)]
    wait_for(lambda: all("run.completed" in r.types() for r in readers), timeout=60)

    # then: on both nodes, at least five deltas of the answer came before its commit, and
    # together they are the answer the run stored
    run.refresh_from_db()
    assert run.status == RunStatus.COMPLETED
    assert run.result == "Parcel PCL-1 is in transit; you can pick it up at Station Square."
    for reader in readers:
        types = reader.types()
        last_responded = len(types) - 1 - types[::-1].index("model.responded")
        before = [t for t in types[:last_responded] if t == "message.delta"]
        assert len(before) >= 5, types
        final_gen = reader.deltas()[-1]["gen"]
        text = "".join(d["text"] for d in reader.deltas() if d["gen"] == final_gen)
        assert text == run.result
        reader.close()


def test_a_stream_that_joins_mid_answer_gets_the_text_written_so_far(
    streaming_shop, cluster, stub, web_server
):
    # given: an answer being written slowly
    base = web_server()
    key = factories.api_key_for(User.objects.get(username="pat"), streaming_shop)
    answering_cluster(cluster, stub, latency=3.0)
    run = queue_locker_question(streaming_shop)
    path = f"/api/v1/runs/{run.pk}/events/stream"
    early = EventReader(open_stream(base, path, key=key))
    wait_for(lambda: len(early.deltas()) >= 3, timeout=60)

    # when: another client connects, as a reconnecting one would, with the last event it had,
    # and a third from the start
    last_seq = AgentRun.objects.get(pk=run.pk).last_event_seq
    late = EventReader(open_stream(base, path, key=key, **{"Last-Event-ID": str(last_seq)}))
    fresh = EventReader(open_stream(base, path, key=key))
    wait_for(lambda: all("run.completed" in r.types() for r in (late, fresh)), timeout=60)

    # then: each got the committed events first, then the text written before it came, then
    # the rest: the whole answer
    run.refresh_from_db()
    for reader in (late, fresh):
        gen = reader.deltas()[0]["gen"]
        assert "".join(d["text"] for d in reader.deltas() if d["gen"] == gen) == run.result
    assert fresh.types()[:2] == ["run.queued", "run.started"], fresh.types()
    for reader in (early, late, fresh):
        reader.close()


def test_stop_while_the_answer_streams_delivers_nothing_after_it_and_keeps_nothing(
    streaming_shop, cluster, stub, web_server, api
):
    # given: pat's conversation, its answer being written over several seconds
    base = web_server()
    key = factories.api_key_for(User.objects.get(username="pat"), streaming_shop)
    answering_cluster(cluster, stub, latency=4.0)
    client = api("pat", merchant="parcel-shop")
    conversation = client.post("/api/v1/conversations", {}, format="json").json()["id"]
    messages = f"/api/v1/conversations/{conversation}/messages"
    run_id = client.post(messages, {"text": QUESTION}, format="json").json()["run_id"]
    reader = EventReader(open_stream(base, f"/api/v1/runs/{run_id}/events/stream", key=key))
    # (the turns that call tools write no text: the first deltas are of the answer)
    wait_for(lambda: len(reader.deltas()) >= 2, timeout=60)

    # when: pat sends /stop, then their next question
    stop = client.post(messages, {"text": "/stop"}, format="json")
    # (the stop has committed, and with it the run's end on the delta channel)
    stopped_at = time.time()
    next_run = client.post(messages, {"text": QUESTION}, format="json").json()["run_id"]
    wait_for(lambda: "run.cancelled" in reader.types(), timeout=30)
    # (the stream ends after the run's end, so nothing can reach it after that; and the
    # worker gave up the stopped answer's model call, so whatever it would keep is kept)
    wait_for(lambda: not reader.thread.is_alive(), timeout=30, message="the stream did not end")
    wait_for(
        lambda: (
            not ModelAttempt.objects.filter(run_id=run_id, status=AttemptStatus.STARTED).exists()
        ),
        timeout=30,
        message="the worker never gave up the stopped answer's model call",
    )

    # then: the run is cancelled; no delta written after the stop committed reached the stream
    # (one written while it committed may have: the end marker is heard at its commit), and
    # the transcript keeps no text of the stopped answer
    assert stop.status_code == 200
    run = AgentRun.objects.get(pk=run_id)
    assert run.status == RunStatus.CANCELLED
    written_after = [d for d in reader.deltas() if d["at"] > stopped_at]
    assert written_after == []
    assert reader.types().index("run.cancelled") > max(
        index for index, kind in enumerate(reader.types()) if kind == "message.delta"
    )
    assert not [m for m in run.messages if m.get("role") == "assistant" and m.get("content")]
    assert run.result is None
    reader.close()

    # and the next question's deltas are its own run's
    follow = EventReader(open_stream(base, f"/api/v1/runs/{next_run}/events/stream", key=key))
    wait_for(lambda: "run.completed" in follow.types(), timeout=60)
    answer = AgentRun.objects.get(pk=next_run).result
    gen = follow.deltas()[-1]["gen"]
    assert "".join(d["text"] for d in follow.deltas() if d["gen"] == gen) == answer
    follow.close()
