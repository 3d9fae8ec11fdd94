"""A run's timeline over REST and SSE, and cancelling a run (API.md, Runs)."""

import json

import pytest
from django.contrib.auth.models import User

from agentportal.models import Merchant
from agentportal.problems import CONTENT_TYPE
from runs import worker
from runs.models import AgentRun, RunEvent, RunStatus
from tests import factories, http
from tests.api.runs_helpers import RUNS
from tests.problems import assert_problem

QUESTION = "What is the status of order ORD-1001?"


@pytest.fixture
def alice(demo, api):
    return api("alice")


@pytest.fixture
def queued_run(alice) -> str:
    response = alice.post(
        RUNS, {"message": QUESTION}, format="json", HTTP_IDEMPOTENCY_KEY="events-run"
    )
    assert response.status_code == 201
    return response.json()["id"]


@pytest.fixture
def finished_run(queued_run) -> str:
    """The queued run, executed to the end by a worker tick in this process."""
    assert worker.tick() == 1
    assert AgentRun.objects.get(pk=queued_run).status == RunStatus.COMPLETED
    return queued_run


def sse_events(text: str) -> list[dict]:
    """Parse a text/event-stream body into [{id, event, data}] (comments and retry skipped)."""
    events = []
    for block in text.split("\n\n"):
        fields: dict = {}
        for line in block.splitlines():
            name, _, value = line.partition(":")
            fields[name] = value.removeprefix(" ")
        if "data" in fields:
            events.append(
                {"id": fields.get("id"), "event": fields.get("event"), "data": fields["data"]}
            )
    return events


@pytest.fixture
def served(web_server) -> str:
    """The product's web server: streams are served asynchronously, as in production."""
    return web_server()


def stream(base: str, username: str, run_id: str, **headers) -> http.Answer:
    key = factories.api_key_for(
        User.objects.get(username=username), Merchant.objects.get(slug="demo-shop")
    )
    return http.get(
        base, f"{RUNS}/{run_id}/events/stream", key=key, Accept="text/event-stream", **headers
    )


# --- GET .../events ----------------------------------------------------------------------------


def test_a_new_run_has_one_run_queued_event(alice, queued_run):
    response = alice.get(f"{RUNS}/{queued_run}/events")

    assert response.status_code == 200
    body = response.json()
    assert body["last_seq"] == 1
    assert len(body["events"]) == 1
    event = body["events"][0]
    assert event["seq"] == 1
    assert event["type"] == "run.queued"
    assert isinstance(event["data"], dict)
    assert event["created_at"].endswith("Z")


def test_events_of_a_finished_run_are_in_seq_order_and_end_with_run_completed(alice, finished_run):
    body = alice.get(f"{RUNS}/{finished_run}/events").json()

    seqs = [event["seq"] for event in body["events"]]
    types = [event["type"] for event in body["events"]]
    assert seqs == list(range(1, len(seqs) + 1))
    assert body["last_seq"] == seqs[-1]
    assert types[0] == "run.queued"
    assert "run.started" in types
    assert types[-1] == "run.completed"
    assert types.count("run.completed") == 1
    assert seqs == list(
        RunEvent.objects.filter(run_id=finished_run).order_by("seq").values_list("seq", flat=True)
    )


def test_after_returns_only_later_events(alice, finished_run):
    last_seq = RunEvent.objects.filter(run_id=finished_run).count()

    after_two = alice.get(f"{RUNS}/{finished_run}/events", {"after": 2}).json()
    after_last = alice.get(f"{RUNS}/{finished_run}/events", {"after": last_seq}).json()
    after_zero = alice.get(f"{RUNS}/{finished_run}/events", {"after": 0}).json()

    assert [event["seq"] for event in after_two["events"]] == list(range(3, last_seq + 1))
    assert after_two["last_seq"] == last_seq
    assert after_last["events"] == []
    assert after_last["last_seq"] == last_seq
    assert len(after_zero["events"]) == last_seq


@pytest.mark.parametrize("after", ["-1", "abc", "1.5", "2x"])
def test_bad_after_is_400_validation_error(alice, queued_run, after):
    response = alice.get(f"{RUNS}/{queued_run}/events", {"after": after})

    body = assert_problem(response, 400, "validation_error")
    assert [error["field"] for error in body["errors"]] == ["after"]


# --- the event stream (through the real server) ---------------------------------------------


def test_stream_of_a_finished_run_sends_every_event_with_its_seq_as_id(served, finished_run):
    # when
    answer = stream(served, "alice", finished_run)

    # then
    assert answer.status == 200
    assert answer.headers["content-type"].startswith("text/event-stream")
    events = sse_events(answer.body)
    expected = list(
        RunEvent.objects.filter(run_id=finished_run).order_by("seq").values_list("seq", "type")
    )
    assert [(int(event["id"]), event["event"]) for event in events] == expected
    assert events[-1]["event"] == "run.completed"
    for event in events:
        data = json.loads(event["data"])
        assert data["seq"] == int(event["id"])
        assert data["type"] == event["event"]


def test_stream_honours_last_event_id(served, finished_run):
    last_seq = RunEvent.objects.filter(run_id=finished_run).count()
    assert last_seq > 3

    answer = stream(served, "alice", finished_run, **{"Last-Event-ID": "3"})

    ids = [int(event["id"]) for event in sse_events(answer.body)]
    assert ids == list(range(4, last_seq + 1))


@pytest.mark.parametrize("last_event_id", ["\u00b9", "\u0663", "99999999999999999999", "x"])
def test_a_last_event_id_the_stream_never_sent_is_ignored(served, finished_run, last_event_id):
    # A superscript digit passes str.isdigit() but not int(): it was a 500.
    answer = stream(served, "alice", finished_run, **{"Last-Event-ID": last_event_id.encode()})

    ids = [int(event["id"]) for event in sse_events(answer.body)]
    assert answer.status == 200
    assert ids[0] == 1


def test_stream_of_a_cancelled_run_ends_after_run_cancelled(served, alice, queued_run):
    assert alice.post(f"{RUNS}/{queued_run}/cancel").status_code == 200

    events = sse_events(stream(served, "alice", queued_run).body)

    assert [(int(e["id"]), e["event"]) for e in events] == [(1, "run.queued"), (2, "run.cancelled")]


def test_stream_of_another_customers_run_is_404(served, queued_run):
    answer = stream(served, "bob", queued_run)

    assert answer.status == 404
    assert answer.headers["content-type"].startswith(CONTENT_TYPE)
    assert json.loads(answer.body)["code"] == "run_not_found"


# --- cancel ------------------------------------------------------------------------------------


def test_cancel_a_queued_run(alice, queued_run):
    # when
    response = alice.post(f"{RUNS}/{queued_run}/cancel")

    # then
    assert response.status_code == 200
    assert response.json()["id"] == queued_run
    assert response.json()["status"] == "CANCELLED"
    run = AgentRun.objects.get(pk=queued_run)
    assert run.status == RunStatus.CANCELLED
    assert run.finished_at is not None
    assert RunEvent.objects.filter(run=run, type="run.cancelled").count() == 1
    assert run.last_event_seq == RunEvent.objects.filter(run=run).count() == 2
    assert alice.get(f"{RUNS}/{queued_run}").json()["status"] == "CANCELLED"


def test_a_cancelled_run_is_never_executed(alice, queued_run):
    # given
    assert alice.post(f"{RUNS}/{queued_run}/cancel").status_code == 200

    # when: a worker ticks
    executed = worker.tick()

    # then
    assert executed == 0
    run = AgentRun.objects.get(pk=queued_run)
    assert run.status == RunStatus.CANCELLED
    assert run.step == 0
    assert run.model_calls == 0
    assert list(RunEvent.objects.filter(run=run).values_list("type", flat=True)) == [
        "run.queued",
        "run.cancelled",
    ]


def test_cancel_twice_is_409_run_finished(alice, queued_run):
    assert alice.post(f"{RUNS}/{queued_run}/cancel").status_code == 200

    response = alice.post(f"{RUNS}/{queued_run}/cancel")

    assert_problem(response, 409, "run_finished")
    assert RunEvent.objects.filter(run_id=queued_run, type="run.cancelled").count() == 1


def test_cancel_a_completed_run_is_409_run_finished(alice, finished_run):
    events_before = RunEvent.objects.filter(run_id=finished_run).count()

    response = alice.post(f"{RUNS}/{finished_run}/cancel")

    assert_problem(response, 409, "run_finished")
    assert AgentRun.objects.get(pk=finished_run).status == RunStatus.COMPLETED
    assert RunEvent.objects.filter(run_id=finished_run).count() == events_before
