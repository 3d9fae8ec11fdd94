"""The OpenAI path when the endpoint fails: the real openai client over HTTP against a tiny
OpenAI-compatible server started in the test that errs, is too slow or is not there, driven by
the in-process worker (DESIGN 5, 8). A failed call is retried as the step's next attempt; a
step whose attempts all failed fails the run with MODEL_ERROR."""

import socket

import pytest

from runs import worker
from runs.models import (
    AttemptStatus,
    ErrorCode,
    ModelAttempt,
    RunEvent,
    RunStatus,
    ToolExecution,
)
from tests.runs.helpers import attempts
from tests.runs.openai_server import (
    always_failing,
    event_types,
    failing_first,
    parcel_agent,
    pat_asks,
    too_slow,
)

# The worker polls the run from the main thread while the model call waits in another one
# (DESIGN 5), so the tests commit for real instead of running inside one test transaction.
pytestmark = pytest.mark.django_db(transaction=True)


def test_openai_server_error_once_is_retried_as_a_second_attempt(
    endpoint_shop, chat_server, openai_model
):
    # given: the server fails the first call with a 500, then behaves
    server = chat_server(failing_first(1, parcel_agent()))
    openai_model(server)
    run = pat_asks(endpoint_shop)

    # when
    worker.tick()

    # then: the first step has one FAILED attempt, then a RESPONDED one; the run completes
    run.refresh_from_db()
    assert run.status == RunStatus.COMPLETED
    assert run.result == "Parcel PCL-1 is in transit."
    made = attempts(run.pk)
    assert made[:2] == [(0, 1, AttemptStatus.FAILED), (0, 2, AttemptStatus.RESPONDED)]
    assert [status for _, _, status in made[2:]] == [AttemptStatus.RESPONDED]
    failed = ModelAttempt.objects.get(run=run, step=0, attempt=1)
    assert "500" in failed.error or "InternalServerError" in failed.error
    assert failed.usage == {}
    assert run.model_calls == 3  # a failed call counts against the budget
    assert len(server.requests) == 3
    assert event_types(run).count("model.failed") == 1
    assert ToolExecution.objects.filter(run=run).count() == 1


def test_openai_server_always_failing_fails_run_with_model_error(
    endpoint_shop, chat_server, openai_model
):
    # given
    server = chat_server(always_failing)
    openai_model(server)
    run = pat_asks(endpoint_shop)

    # when: tick returns normally; the failure is the run's, not the worker's
    worker.tick()

    # then: MODEL_ATTEMPTS_PER_STEP (2) FAILED attempts, then the run FAILED
    run.refresh_from_db()
    assert run.status == RunStatus.FAILED
    assert run.error_code == ErrorCode.MODEL_ERROR
    assert attempts(run.pk) == [(0, 1, AttemptStatus.FAILED), (0, 2, AttemptStatus.FAILED)]
    assert len(server.requests) == 2
    assert run.model_calls == 2
    assert not ToolExecution.objects.filter(run=run).exists()
    types = event_types(run)
    assert types.count("model.failed") == 2
    assert types.count("run.failed") == 1
    assert types[-1] == "run.failed"
    failed_event = RunEvent.objects.get(run=run, type="run.failed")
    assert failed_event.data["error_code"] == ErrorCode.MODEL_ERROR


def test_an_unreachable_endpoint_fails_the_run_with_model_error_and_frees_its_slot(
    endpoint_shop, settings
):
    # given an endpoint where nothing listens
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed_port = probe.getsockname()[1]
    settings.AGENTPORTAL = {
        **settings.AGENTPORTAL,
        "MODEL": "openai",
        "OPENAI_BASE_URL": f"http://127.0.0.1:{closed_port}/v1",
        "MODEL_ATTEMPTS_PER_STEP": 2,
    }
    run = pat_asks(endpoint_shop)

    # when a worker takes it
    worker.tick()

    # then both attempts failed, the run failed with MODEL_ERROR, and it holds no slot
    run.refresh_from_db()
    assert (run.status, run.error_code) == (RunStatus.FAILED, ErrorCode.MODEL_ERROR)
    assert attempts(run.pk) == [(0, 1, AttemptStatus.FAILED), (0, 2, AttemptStatus.FAILED)]
    assert "APIConnectionError" in run.error_detail
    assert run.finished_at is not None


def test_openai_timeout_fails_attempts_then_run_with_model_error(
    endpoint_shop, chat_server, openai_model
):
    # given: a server slower than the client's timeout
    server = chat_server(too_slow)
    openai_model(server, timeout=1.0)
    run = pat_asks(endpoint_shop)

    # when
    worker.tick()

    # then: each attempt timed out and FAILED, and the run FAILED with MODEL_ERROR
    run.refresh_from_db()
    assert run.status == RunStatus.FAILED
    assert run.error_code == ErrorCode.MODEL_ERROR
    attempts = ModelAttempt.objects.filter(run=run).order_by("attempt")
    assert [(a.step, a.attempt, a.status) for a in attempts] == [
        (0, 1, AttemptStatus.FAILED),
        (0, 2, AttemptStatus.FAILED),
    ]
    for attempt in attempts:
        assert "timeout" in attempt.error.lower() or "timed out" in attempt.error.lower()
        assert attempt.latency_ms >= 900
        assert attempt.latency_ms < 4_000  # the client gave up; it did not wait for the server
    assert len(server.requests) == 2
    assert event_types(run)[-1] == "run.failed"
