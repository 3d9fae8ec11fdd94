"""Hundreds of runs in flight while models think: the real django-q2 cluster and the real openai
client against a slow OpenAI-compatible endpoint on loopback (the `stub` fixture), which counts
the calls it holds at once."""

import os
import signal

import pytest
from django.contrib.auth.models import User
from django.utils import timezone

from agentportal.models import Merchant
from runs import services
from runs.models import AgentRun, AttemptStatus, ModelAttempt, RunEvent, RunStatus
from tests import factories
from tests.conftest import wait_for
from tests.extension_app import parcels
from tests.product import manage
from tests.runs.helpers import STATUS_QUESTION, customer_with_parcel, queue

pytestmark = [pytest.mark.cluster, pytest.mark.django_db(transaction=True)]

QUESTION = STATUS_QUESTION.format(parcel="PCL-1")


@pytest.fixture
def shop(db) -> Merchant:
    """A shop whose agent is the OpenAI-compatible endpoint of OPENAI_BASE_URL, with the parcel
    tools declared, and its customer pat, whose parcel PCL-1 is on its way:
    `api("pat", merchant="endpoint-shop")` asks as pat."""
    shop = factories.merchant_create(slug="endpoint-shop")
    factories.release_publish(merchant=shop, model="openai", tools=parcels.TOOLS)
    customer_with_parcel(shop, "PCL-1", username="pat")
    return shop


@pytest.fixture
def many_open_runs(settings):
    """Tests queue hundreds of runs for one customer: lift the per-account limit."""
    settings.AGENTPORTAL = {**settings.AGENTPORTAL, "MAX_OPEN_RUNS_PER_ACCOUNT": 10_000}


def _openai(endpoint, **env: str) -> dict[str, str]:
    return {"OPENAI_BASE_URL": endpoint.base_url, **env}


def _queue(shop, count: int) -> list:
    pat = User.objects.get(username="pat")
    return [queue(pat, shop, "PCL-1").pk for _ in range(count)]


def _all_finished(run_ids) -> bool:
    return not AgentRun.objects.filter(pk__in=run_ids, finished_at__isnull=True).exists()


def _statuses(run_ids) -> set[str]:
    return set(AgentRun.objects.filter(pk__in=run_ids).values_list("status", flat=True))


@pytest.mark.usefixtures("many_open_runs")
def test_two_hundred_runs_wait_on_the_model_at_once_and_all_complete(
    shop, cluster, stub, admin_client
):
    # given a shop with room for all of them and an endpoint that takes 4 s a call (the
    # workers report what they hold every 2 s)
    shop.max_running_runs = 256
    shop.save(update_fields=["max_running_runs"])
    endpoint = stub(latency=4.0, text_only=True)
    run_ids = _queue(shop, 200)

    # when two worker processes take them, /healthz watched meanwhile by a superuser
    cluster(workers=2, env=_openai(endpoint))
    reports: list[dict] = []

    def finished_watching() -> bool:
        reports.append(admin_client.get("/healthz").json())
        return _all_finished(run_ids)

    wait_for(finished_watching, timeout=120, interval=0.2)

    # then every run completed with one call, and at least 100 calls waited at once
    assert _statuses(run_ids) == {RunStatus.COMPLETED}
    assert endpoint.calls == 200
    assert endpoint.max_in_flight >= 100
    assert ModelAttempt.objects.filter(status=AttemptStatus.RESPONDED).count() == 200
    # and /healthz said what each worker process held, and its endpoint's calls
    held = [sum(p["in_flight"] for p in r["worker_processes"]) for r in reports]
    assert max(held) >= 100
    busiest = max((p for r in reports for p in r["worker_processes"]), key=lambda p: p["in_flight"])
    assert busiest["free_slots"] == 256 - busiest["in_flight"]
    [(endpoint_name, queue)] = busiest["model_endpoints"].items()
    assert endpoint.base_url in endpoint_name and queue["in_flight"] >= 1


@pytest.mark.usefixtures("many_open_runs")
def test_stop_among_two_hundred_calls_in_flight_commits_nothing_of_the_late_answer(
    shop, api, cluster, stub
):
    # given 200 runs waiting on a 3-second model, one of them in pat's conversation
    shop.max_running_runs = 256
    shop.save(update_fields=["max_running_runs"])
    endpoint = stub(latency=3.0, text_only=True)
    pat = api("pat", merchant="endpoint-shop")
    conversation = pat.post("/api/v1/conversations", {}, format="json").json()["id"]
    messages = f"/api/v1/conversations/{conversation}/messages"
    stopped = pat.post(messages, {"text": QUESTION}, format="json").json()["run_id"]
    others = _queue(shop, 199)
    cluster(workers=2, env=_openai(endpoint))
    wait_for(lambda: endpoint.in_flight >= 150, timeout=60, interval=0.05)

    # when pat says /stop
    answer = pat.post(messages, {"text": "/stop"}, format="json")

    # then it is cancelled at once; once every late answer came, none of it landed there
    assert answer.status_code == 200
    assert AgentRun.objects.get(pk=stopped).status == RunStatus.CANCELLED
    wait_for(lambda: _all_finished(others), timeout=120, interval=0.2)
    assert _statuses(others) == {RunStatus.COMPLETED}
    types = list(RunEvent.objects.filter(run_id=stopped).values_list("type", flat=True))
    assert "model.responded" not in types and types[-1] == "run.cancelled"
    # its call was given up (or answered just before the worker noticed): never left STARTED
    [outcome] = ModelAttempt.objects.filter(run_id=stopped).values_list("status", flat=True)
    assert outcome in (AttemptStatus.ABANDONED, AttemptStatus.RESPONDED)


@pytest.mark.usefixtures("many_open_runs")
def test_a_worker_killed_with_two_hundred_calls_in_flight_loses_no_run_and_no_attempt(
    shop, cluster, stub
):
    # given 200 runs in flight on a cluster with short leases
    shop.max_running_runs = 256
    shop.save(update_fields=["max_running_runs"])
    endpoint = stub(latency=2.0, text_only=True)
    env = _openai(endpoint, AGENTPORTAL_LEASE_SECONDS="4")
    run_ids = _queue(shop, 200)
    first = cluster(workers=2, env=env)
    wait_for(lambda: endpoint.in_flight >= 100, timeout=60, interval=0.05)

    # when it is SIGKILLed, its leases expire, the backstop requeues and another cluster runs
    first.kill()
    wait_for(
        lambda: (
            not AgentRun.objects.filter(
                pk__in=run_ids, status=RunStatus.RUNNING, lease_expires_at__gte=timezone.now()
            ).exists()
        ),
        timeout=30,
    )
    services.maintain()
    cluster(workers=2, env=env)
    wait_for(lambda: _all_finished(run_ids), timeout=120, interval=0.2)

    # then every run completed once, and every attempt is accounted for
    assert _statuses(run_ids) == {RunStatus.COMPLETED}
    attempts = ModelAttempt.objects.filter(run_id__in=run_ids)
    assert not attempts.filter(status=AttemptStatus.STARTED).exists()
    assert attempts.filter(status=AttemptStatus.RESPONDED).count() == 200
    assert RunEvent.objects.filter(run_id__in=run_ids, type="run.completed").count() == 200


@pytest.mark.usefixtures("many_open_runs")
def test_an_endpoint_that_asks_for_pauses_slows_calls_down_and_fails_no_run(shop, cluster, stub):
    # given an endpoint that answers 429 with Retry-After: 1 for its first 3 seconds
    endpoint = stub(latency=0.2, text_only=True)
    endpoint.throttle(seconds=3, retry_after=1)
    run_ids = _queue(shop, 20)

    # when the cluster runs them
    cluster(workers=2, env=_openai(endpoint))
    wait_for(lambda: _all_finished(run_ids), timeout=120, interval=0.2)

    # then none failed; calls were refused and tried again, and the attempts say so
    assert _statuses(run_ids) == {RunStatus.COMPLETED}
    assert endpoint.throttled > 0
    attempts = ModelAttempt.objects.filter(run_id__in=run_ids)
    assert not attempts.filter(status=AttemptStatus.FAILED).exists()
    assert sum(a.usage.get("throttled_tries", 0) for a in attempts) >= 1


@pytest.mark.usefixtures("many_open_runs")
def test_a_shop_of_capacity_two_never_has_more_than_two_calls_running(shop, cluster, stub):
    # given a shop of capacity 2 with 100 queued runs, and workers with 256 free slots each
    shop.max_running_runs = 2
    shop.save(update_fields=["max_running_runs"])
    endpoint = stub(latency=0.1, text_only=True)
    run_ids = _queue(shop, 100)

    # when the cluster runs them, counting what runs at each moment
    cluster(workers=2, env=_openai(endpoint))
    most_running = 0

    def finished_watching() -> bool:
        nonlocal most_running
        running = AgentRun.objects.filter(pk__in=run_ids, status=RunStatus.RUNNING).count()
        most_running = max(most_running, running)
        return _all_finished(run_ids)

    wait_for(finished_watching, timeout=120, interval=0.05)

    # then never more than two at once, by the database and by the endpoint
    assert _statuses(run_ids) == {RunStatus.COMPLETED}
    assert most_running <= 2
    assert endpoint.max_in_flight <= 2


@pytest.mark.parametrize(
    "variable", ["AGENTPORTAL_WORKER_IN_FLIGHT", "AGENTPORTAL_MODEL_CONCURRENCY"]
)
@pytest.mark.parametrize("value", ["0", "-3", "many"])
def test_a_bad_in_flight_setting_stops_the_worker_at_start_naming_it(variable, value):
    started = manage("qcluster", timeout=60, DJANGO_SECRET_KEY="k" * 50, **{variable: value})

    assert started.returncode != 0
    assert f"{variable} must be a whole number of 1 or more, not '{value}'." in started.stderr


@pytest.mark.usefixtures("many_open_runs")
def test_the_runs_of_a_killed_worker_process_finish_elsewhere_before_their_leases_expire(
    shop, cluster, stub
):
    # given two worker processes of four slots each, every slot waiting on a slow model call,
    # and more runs waiting: the surviving process stays busy
    endpoint = stub(latency=8, text_only=True)
    runs = _queue(shop, 16)
    cluster(workers=2, env=_openai(endpoint, AGENTPORTAL_WORKER_IN_FLIGHT="4"))
    running = AgentRun.objects.filter(pk__in=runs, status=RunStatus.RUNNING)
    wait_for(lambda: running.values("lease_holder").distinct().count() == 2, timeout=60)

    # when one process is killed outright (its cluster starts another in its place)
    holder = running.values_list("lease_holder", flat=True).first()
    leases = dict(running.filter(lease_holder=holder).values_list("pk", "lease_expires_at"))
    os.kill(int(holder.rsplit(":", 1)[1]), signal.SIGKILL)

    # then every run completes, the killed process's taken over while their leases still held
    wait_for(lambda: _all_finished(runs), timeout=120)
    assert _statuses(runs) == {RunStatus.COMPLETED}
    assert len(leases) == 4
    for run_id, lease_expires_at in leases.items():
        started = RunEvent.objects.filter(run_id=run_id, type="run.started").order_by("seq")
        assert started.count() == 2
        assert started.last().created_at < lease_expires_at
