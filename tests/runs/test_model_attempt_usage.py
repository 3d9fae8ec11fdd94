"""A model call whose run is stopped, taken over or lost while the model answers still records
what became of it on its attempt (DESIGN 5, 7): RESPONDED with the answer's usage and latency
when the answer came, ABANDONED when the worker gave the call up first. Nothing else of the run
is committed: no assistant text, no event, no next node.

A real worker thread holds the run and waits on a real OpenAI-compatible endpoint on loopback
(the `stub` fixture) while the test stops the run on its own connection. The worker
looks at the runs in slow calls every CANCEL_POLL_SECONDS: left at its 0.25 s it notices the
stop before the answer comes and gives the call up; made long, the answer comes first.
"""

import copy
from collections.abc import Callable
from datetime import timedelta

import pytest
from django.utils import timezone

from agentportal.models import Role
from runs import services, worker
from runs.models import AgentRun, AttemptStatus, ModelAttempt, Node, RunEvent, RunStatus
from runs.monitoring import RunsCollector
from runs.services import Lease, LostRun, StepCommit
from tests import factories, threads
from tests.conftest import wait_for
from tests.extension_app import parcels
from tests.runs import helpers
from tests.runs.conversation_helpers import say
from tests.runs.helpers import attempts
from tests.threads import Background

pytestmark = pytest.mark.django_db(transaction=True)

STATUS = helpers.STATUS_QUESTION.format(parcel="PCL-1")
# What the stub endpoint says each answer cost.
STUB_USAGE = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
LATENCY = 1.5
# Longer than the test: the worker does not look at the run before the answer comes.
NO_POLL = 60.0


@pytest.fixture
def shop(parcel_shop):
    """The parcel shop, its release asking the model the settings name (the stub endpoint
    here), and its supervisor sid."""
    factories.release_publish(merchant=parcel_shop, model="default", tools=parcels.TOOLS)
    factories.user_create("sid", merchant=parcel_shop, role=Role.SUPERVISOR)
    return parcel_shop


@pytest.fixture
def model(settings, stub):
    """model(poll=...) -> an endpoint that answers in LATENCY seconds, the runtime's model;
    the worker looks at runs in slow calls every `poll` seconds."""

    def use(*, poll: float = 0.25):
        endpoint = stub(latency=LATENCY, text_only=True)
        settings.AGENTPORTAL = {
            **settings.AGENTPORTAL,
            "MODEL": "openai",
            "OPENAI_BASE_URL": endpoint.base_url,
            "OPENAI_API_KEY": "sk-test-key",
            "OPENAI_MODEL": "stub",
            "CANCEL_POLL_SECONDS": poll,
        }
        return endpoint

    return use


def _worker_in_the_call(endpoint) -> tuple[Lease, Background]:
    """A worker claims the next run and executes it; back once the model is answering."""
    lease = helpers.run_claim()
    assert lease is not None
    working = Background(lambda: worker.run_slices([lease]))
    wait_for(lambda: endpoint.in_flight >= 1, timeout=10, interval=0.01)
    return lease, working


def _types(run_id) -> list[str]:
    return list(
        RunEvent.objects.filter(run_id=run_id).order_by("seq").values_list("type", flat=True)
    )


def assert_nothing_committed_after_the_cancel(run_id) -> None:
    run = AgentRun.objects.get(pk=run_id)
    assert run.status == RunStatus.CANCELLED
    assert run.result is None
    assert "assistant" not in [m["role"] for m in run.messages]
    types = _types(run_id)
    assert types[-1] == "run.cancelled" and types.count("run.cancelled") == 1
    assert "model.responded" not in types and "message.assistant" not in types
    assert run.model_calls == 1


STOPS = ["/stop", "/takeover", "service"]


def _queue_for_pat(shop) -> str:
    pat = shop.memberships.get(user__username="pat").user
    return str(helpers.queue(pat, shop, "PCL-1").pk)


def _start_and_stop(how: str, shop, api, endpoint) -> str:
    """pat's run, its worker waiting on the model, stopped `how`; the run's id."""
    pat, conversation = api("pat", merchant=shop.slug), None
    if how == "service":
        run_id = _queue_for_pat(shop)
    else:
        conversation = pat.post("/api/v1/conversations", {}, format="json").json()["id"]
        run_id = say(pat, conversation, STATUS).json()["run_id"]
    _lease, working = _worker_in_the_call(endpoint)
    if how == "service":
        services.run_cancel(run=AgentRun.objects.get(pk=run_id), reason="stopped by a test")
    else:
        client = api("sid", merchant=shop.slug) if how == "/takeover" else pat
        assert say(client, conversation, how).json()["result"]["cancelled_run_id"] == run_id
    assert AgentRun.objects.get(pk=run_id).status == RunStatus.CANCELLED
    working.join()
    return run_id


@pytest.mark.parametrize("how", STOPS)
def test_an_answer_that_comes_after_the_stop_records_its_usage_and_nothing_else(
    how, shop, api, model
):
    # given a worker waiting on the model, which answers before the worker looks at the run
    endpoint = model(poll=NO_POLL)

    # when the run is stopped while the model answers, and then the answer comes
    run_id = _start_and_stop(how, shop, api, endpoint)

    # then the attempt says what the call cost, and nothing else of the answer landed
    attempt = ModelAttempt.objects.get(run_id=run_id)
    assert attempt.status == AttemptStatus.RESPONDED
    assert attempt.usage == STUB_USAGE
    assert attempt.latency_ms >= LATENCY * 1000 * 0.8
    assert attempt.finished_at is not None
    assert_nothing_committed_after_the_cancel(run_id)


@pytest.mark.parametrize("how", STOPS)
def test_a_call_given_up_after_the_stop_is_recorded_abandoned(how, shop, api, model):
    # given a worker waiting on the model, looking at the run every 0.25 s
    endpoint = model()

    # when the run is stopped while the model answers
    run_id = _start_and_stop(how, shop, api, endpoint)

    # then the worker gave the call up before its answer, and its attempt says so
    attempt = ModelAttempt.objects.get(run_id=run_id)
    assert attempt.status == AttemptStatus.ABANDONED
    assert attempt.usage == {}
    assert attempt.latency_ms is not None and attempt.latency_ms < LATENCY * 1000
    assert attempt.finished_at is not None
    assert_nothing_committed_after_the_cancel(run_id)
    # and the metrics count it as given up, not as a call in flight
    [family] = [f for f in RunsCollector().collect() if f.name == "agentportal_model_attempts"]
    counts = {sample.labels["outcome"]: sample.value for sample in family.samples}
    assert counts[AttemptStatus.ABANDONED] == 1 and counts[AttemptStatus.STARTED] == 0


def _expire(run_id) -> None:
    AgentRun.objects.filter(pk=run_id).update(
        lease_expires_at=timezone.now() - timedelta(seconds=1)
    )


def assert_taken_over_and_completed_once(run_id) -> None:
    run = AgentRun.objects.get(pk=run_id)
    assert run.status == RunStatus.COMPLETED
    assert run.model_calls == 2  # the lost worker's call counts
    types = _types(run_id)
    assert types.count("run.completed") == 1 and types.count("model.responded") == 1
    assert [m["role"] for m in run.messages].count("assistant") == 1


def test_an_answer_that_comes_after_the_lease_expired_records_its_usage_and_nothing_else(
    shop, model
):
    # given a worker waiting on the model, which answers before the worker looks at the run
    endpoint = model(poll=NO_POLL)
    run_id = _queue_for_pat(shop)
    _lease, working = _worker_in_the_call(endpoint)
    before = _types(run_id)

    # when its lease expires, then the answer comes
    _expire(run_id)
    working.join()

    # then the attempt says what the call cost, and nothing else of the answer landed
    attempt = ModelAttempt.objects.get(run_id=run_id)
    assert (attempt.status, attempt.usage) == (AttemptStatus.RESPONDED, STUB_USAGE)
    assert attempt.latency_ms is not None and attempt.finished_at is not None
    assert _types(run_id) == before
    assert "assistant" not in [m["role"] for m in AgentRun.objects.get(pk=run_id).messages]

    # when another worker takes the run over, it leaves that attempt as it is
    taken = helpers.run_claim()
    assert (taken.run_id, taken.token) == (AgentRun.objects.get(pk=run_id).pk, 2)
    assert attempts(run_id) == [(0, 1, AttemptStatus.RESPONDED), (0, 2, AttemptStatus.STARTED)]
    worker.run_slices([taken])

    # then the run completes once, on the second call
    assert attempts(run_id) == [(0, 1, AttemptStatus.RESPONDED), (0, 2, AttemptStatus.RESPONDED)]
    assert ModelAttempt.objects.get(run_id=run_id, attempt=1).usage == STUB_USAGE
    assert_taken_over_and_completed_once(run_id)


def test_a_call_given_up_after_the_lease_expired_is_recorded_abandoned(shop, model):
    # given a worker waiting on the model, looking at the run every 0.25 s
    endpoint = model()
    run_id = _queue_for_pat(shop)
    _lease, working = _worker_in_the_call(endpoint)
    before = _types(run_id)

    # when its lease expires
    _expire(run_id)

    # then the worker gives the call up and says so on its attempt, and commits nothing else
    wait_for(
        lambda: attempts(run_id) == [(0, 1, AttemptStatus.ABANDONED)], timeout=10, interval=0.05
    )
    working.join()
    assert ModelAttempt.objects.get(run_id=run_id).finished_at is not None
    assert _types(run_id) == before

    # and another worker that takes the run over leaves that attempt as it is
    taken = helpers.run_claim()
    assert attempts(run_id) == [(0, 1, AttemptStatus.ABANDONED), (0, 2, AttemptStatus.STARTED)]
    worker.run_slices([taken])
    assert attempts(run_id) == [(0, 1, AttemptStatus.ABANDONED), (0, 2, AttemptStatus.RESPONDED)]
    assert_taken_over_and_completed_once(run_id)


def _late_answer(total: int, latency_ms: int) -> StepCommit:
    usage = {"prompt_tokens": total - 1, "completion_tokens": 1, "total_tokens": total}
    return StepCommit(
        next_node=Node.DONE,
        messages=[{"role": "assistant", "content": f"answer costing {total}"}],
        events=[("model.responded", {"usage": usage})],
        attempt_status=AttemptStatus.RESPONDED,
        attempt_usage=usage,
        attempt_latency_ms=latency_ms,
        complete_with=f"answer costing {total}",
    )


def _recorded(run_id) -> tuple:
    return ModelAttempt.objects.values_list("status", "usage", "latency_ms", "finished_at").get(
        run_id=run_id
    )


def test_an_answer_delivered_twice_after_the_stop_records_its_usage_once(parcel_shop):
    # given a run its worker holds at the model, then cancelled
    run_id = _queue_for_pat(parcel_shop)
    lease = helpers.run_claim()
    services.run_cancel(run=AgentRun.objects.get(pk=run_id), reason="stopped by a test")

    def deliver(total: int, latency_ms: int) -> Callable[[], Exception]:
        def commit() -> Exception:
            # Each worker has its own copy of what it holds.
            held = copy.deepcopy(lease)
            with pytest.raises(LostRun) as lost:
                helpers.run_step_commit(lease=held, commit=_late_answer(total, latency_ms))
            return lost.value

        return commit

    # when the answer reaches two workers at once (its task delivered twice)
    threads.in_threads([deliver(100, 1000), deliver(200, 2000)])
    recorded = _recorded(run_id)

    # then one of them recorded it, whole
    status, usage, latency_ms, finished_at = recorded
    assert status == AttemptStatus.RESPONDED and finished_at is not None
    assert (usage["total_tokens"], latency_ms) in {(100, 1000), (200, 2000)}

    # and a third delivery changes nothing
    deliver(300, 3000)()
    assert _recorded(run_id) == recorded
    assert ModelAttempt.objects.filter(run_id=run_id).count() == 1
    assert AgentRun.objects.get(pk=run_id).model_calls == 1
    assert "model.responded" not in _types(run_id)
