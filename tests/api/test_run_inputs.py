"""POST /api/v1/runs/{id}/inputs and the receipt lookup (API.md, Runs; DESIGN 6.2)."""

from datetime import timedelta

import pytest
import time_machine
from django.contrib.auth.models import User
from django.utils import timezone

from runs import services, worker
from runs.models import RunInput, RunStatus
from tests import factories
from tests.problems import assert_problem

VAGUE = "I want to exchange my shoes for size 43"


@pytest.fixture
def waiting(demo):
    """A run that asked the customer which order this is about."""
    run = factories.run_queue(
        customer=User.objects.get(username="alice"), merchant=demo, message=VAGUE
    )
    worker.tick()
    run.refresh_from_db()
    assert run.status == RunStatus.WAITING_USER
    return run


def _answer(client, run, *, key="answer-1", **body):
    body = {
        "interrupt_id": run.wait_state["interrupt_id"],
        "run_version": run.version,
        "text": "It is ORD-1002",
        **body,
    }
    return client.post(
        f"/api/v1/runs/{run.pk}/inputs", body, format="json", HTTP_IDEMPOTENCY_KEY=key
    )


def test_the_question_is_pending_and_the_answer_resumes_the_same_run(waiting, api):
    alice = api("alice")
    [pending] = alice.get(f"/api/v1/runs/{waiting.pk}").json()["pending"]
    assert pending["kind"] == "clarification"
    assert pending["question"] == "Which order is this about?"
    assert pending["interrupt_id"] == waiting.wait_state["interrupt_id"]
    assert pending["expires_at"].endswith("Z")

    response = _answer(alice, waiting)

    assert response.status_code == 202
    body = response.json()
    assert body["receipt"]["interrupt_id"] == pending["interrupt_id"]
    assert body["run"]["status"] == "QUEUED"
    assert body["run"]["pending"] == []
    # the agent carries on with the answer: the order is found and a plan proposed
    worker.tick()
    waiting.refresh_from_db()
    assert waiting.status == RunStatus.WAITING_USER
    assert waiting.wait_state["kind"] == "confirmation"
    types = list(waiting.events.values_list("type", flat=True))
    assert types.count("input.received") == 1
    assert "plan.proposed" in types


def test_a_retry_returns_the_same_receipt_and_another_body_is_refused(waiting, api):
    alice = api("alice")
    first = _answer(alice, waiting)

    again = _answer(alice, waiting)
    other = _answer(alice, waiting, text="It is ORD-1003")
    missing = alice.post(
        f"/api/v1/runs/{waiting.pk}/inputs",
        {"interrupt_id": "x", "run_version": 1, "text": "t"},
        format="json",
    )

    assert again.status_code == 200
    assert again.headers["Idempotent-Replayed"] == "true"
    assert again.json()["receipt"] == first.json()["receipt"]
    assert_problem(other, 422, "idempotency_key_reused")
    assert_problem(missing, 400, "idempotency_key_missing")
    assert RunInput.objects.filter(run=waiting).count() == 1


def test_stale_or_wrong_inputs_are_refused_and_change_nothing(waiting, api):
    alice = api("alice")
    version = waiting.version

    assert_problem(_answer(alice, waiting, interrupt_id="int-other"), 409, "interrupt_mismatch")
    assert_problem(
        _answer(alice, waiting, key="k2", run_version=version - 1), 409, "version_conflict"
    )
    bad = _answer(alice, waiting, key="k3", run_version="2", text="")
    assert_problem(bad, 400, "validation_error")
    assert {error["field"] for error in bad.json()["errors"]} == {"run_version", "text"}
    assert_problem(_answer(api("sam"), waiting, key="k4"), 403, "permission_denied")
    assert_problem(_answer(api("bob"), waiting, key="k5"), 404, "run_not_found")

    waiting.refresh_from_db()
    assert (waiting.status, waiting.version) == (RunStatus.WAITING_USER, version)
    assert not RunInput.objects.exists()
    # once answered, another key finds nothing waiting
    assert _answer(alice, waiting).status_code == 202
    assert_problem(_answer(alice, waiting, key="k6"), 409, "not_waiting")


def test_an_input_after_the_wait_deadline_fails_the_run_and_gets_410(waiting, api):
    alice = api("alice")
    with time_machine.travel(timezone.now() + timedelta(hours=24, seconds=1)):
        late = _answer(alice, waiting)
        assert_problem(late, 410, "interrupt_expired")
        waiting.refresh_from_db()
        assert (waiting.status, waiting.error_code) == (RunStatus.FAILED, "WAIT_EXPIRED")
        assert_problem(_answer(alice, waiting, key="later"), 410, "interrupt_expired")
    assert not RunInput.objects.exists()


def test_maintain_fails_a_wait_nobody_answered_in_24_hours(waiting):
    with time_machine.travel(timezone.now() + timedelta(hours=23, minutes=59)):
        services.maintain()
        waiting.refresh_from_db()
        assert waiting.status == RunStatus.WAITING_USER
    with time_machine.travel(timezone.now() + timedelta(hours=24, seconds=1)):
        report = services.maintain()
    waiting.refresh_from_db()
    assert report["waits_expired"] == 1
    assert (waiting.status, waiting.error_code) == (RunStatus.FAILED, "WAIT_EXPIRED")
    assert list(waiting.events.values_list("type", flat=True))[-1] == "run.failed"


def test_a_service_key_looks_up_a_receipt_and_customers_may_not(waiting, api):
    answer = _answer(api("alice"), waiting).json()

    found = api().get(f"/api/v1/runs/{waiting.pk}/receipts/answer-1")
    missing = api().get(f"/api/v1/runs/{waiting.pk}/receipts/nope")
    customer = api("alice").get(f"/api/v1/runs/{waiting.pk}/receipts/answer-1")

    assert found.status_code == 200
    assert found.json()["receipt"]["id"] == answer["receipt"]["id"]
    assert found.json()["receipt"]["kind"] == "clarification"
    assert found.json()["run"]["id"] == str(waiting.pk)
    assert_problem(missing, 404, "not_found")
    assert_problem(customer, 403, "permission_denied")


def test_an_expired_wait_answers_410_before_a_stale_version(waiting, api):
    with time_machine.travel(timezone.now() + timedelta(hours=24, seconds=1)):
        late = _answer(api("alice"), waiting, run_version=waiting.version - 1)
    assert_problem(late, 410, "interrupt_expired")


def test_keys_are_scoped_per_principal(waiting, api):
    # given: alice answered with a key
    assert _answer(api("alice"), waiting, key="shared").status_code == 202

    # when: a service key uses the same key for another body
    other = _answer(api(), waiting, key="shared", text="It is ORD-1003")

    # then: not a reuse of alice's key; the wait is simply answered already
    assert_problem(other, 409, "not_waiting")
    assert api().get(f"/api/v1/runs/{waiting.pk}/receipts/shared").status_code == 200
