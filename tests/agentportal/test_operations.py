"""Operations (API.md): health, unknown API paths, the schema, seed_demo, create_api_key."""

import io
import json
from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command
from django.utils import timezone
from rest_framework.test import APIClient

from agentportal.models import ApiKey, Membership, Merchant
from agentportal.problems import CONTENT_TYPE
from approvals.models import Order, StockLevel
from runs.models import AgentRelease, AgentRun, RunStatus, WorkerHeartbeat
from runs.services import heartbeat_record
from tests import factories

# --- /healthz ----------------------------------------------------------------------------------


def test_healthz_without_a_heartbeat_reports_the_worker_stale(db):
    response = APIClient().get("/healthz")

    assert response.status_code == 200
    assert response.json() == {
        "database": "ok",
        "worker": "stale",
        "queue": "ok",
    }


def test_healthz_after_a_heartbeat_reports_the_worker_ok(db):
    heartbeat_record()

    response = APIClient().get("/healthz")

    assert response.status_code == 200
    assert response.json() == {
        "database": "ok",
        "worker": "ok",
        "queue": "ok",
    }


def test_healthz_with_an_old_heartbeat_reports_the_worker_stale(db):
    WorkerHeartbeat.objects.create(name="worker", seen_at=timezone.now() - timedelta(minutes=5))

    response = APIClient().get("/healthz")

    assert response.json() == {
        "database": "ok",
        "worker": "stale",
        "queue": "ok",
    }


def _queued_a_while_ago(merchant, minutes: float):
    customer = factories.user_create(merchant=merchant)
    run = factories.run_queue(customer=customer, merchant=merchant, message="Where is ORD-1?")
    AgentRun.objects.filter(pk=run.pk).update(
        updated_at=timezone.now() - timedelta(minutes=minutes)
    )
    return run


def test_healthz_is_503_when_a_shop_with_room_has_not_moved_for_a_minute(db):
    # given a shop whose run has waited two minutes and no worker took one
    stalled = factories.merchant_create(slug="stalled-shop")
    _queued_a_while_ago(stalled, minutes=2)

    # when
    response = APIClient().get("/healthz")

    # then anyone is told the queue is stalled and why, without the shop's name
    assert response.status_code == 503
    body = response.json()
    assert body["queue"] == "stalled"
    assert "workers" in body["reason"]
    assert "stalled-shop" not in response.text


def _process_reports(name: str = "process:web-7.internal:4242") -> None:
    report = {"in_flight": 3, "free_slots": 253, "model_endpoints": {"m@http://llm:8080": {}}}
    heartbeat_record(name=name, report=report)


def test_healthz_tells_anyone_the_status_only(db):
    # given a worker process reporting, and a shop stalled
    heartbeat_record()
    _process_reports()
    _queued_a_while_ago(factories.merchant_create(slug="stalled-shop"), minutes=2)

    # when someone who is not signed in asks
    response = APIClient().get("/healthz")

    # then they learn the status and its coarse reason: no shop, host, process or endpoint
    assert response.status_code == 503
    assert set(response.json()) == {"database", "worker", "queue", "reason"}
    for detail in ("stalled-shop", "web-7", "4242", "llm:8080"):
        assert detail not in response.text


@pytest.mark.parametrize("who", ["sam", "superuser"])
def test_healthz_gives_its_details_to_a_superuser_only(demo, who):
    # given a worker process reporting, and a shop stalled
    _process_reports()
    _queued_a_while_ago(factories.merchant_create(slug="stalled-shop"), minutes=2)
    user = User.objects.get(username="sam")
    if who == "superuser":
        user = User.objects.create_superuser("root", password="x")
    client = APIClient()
    client.force_login(user)

    # when
    body = client.get("/healthz").json()

    # then only the superuser sees which shops and which processes
    if who == "superuser":
        assert body["stalled_shops"] == ["stalled-shop"]
        [process] = body["worker_processes"]
        assert process["name"] == "process:web-7.internal:4242"
        assert process["in_flight"] == 3
    else:
        assert "stalled_shops" not in body
        assert "worker_processes" not in body


def test_healthz_leaves_alone_a_full_shop_a_fresh_run_and_a_shop_just_served(db):
    # given a full shop whose queued run waits for its slot, a run queued seconds ago, and a
    # shop a worker claimed from a moment ago
    full = factories.merchant_create(max_running_runs=1)
    _queued_a_while_ago(full, minutes=2)
    AgentRun.objects.filter(merchant=full).update(status=RunStatus.RUNNING)
    _queued_a_while_ago(full, minutes=2)
    _queued_a_while_ago(factories.merchant_create(), minutes=0.2)
    _queued_a_while_ago(factories.merchant_create(last_scheduled_at=timezone.now()), minutes=2)

    # when / then
    response = APIClient().get("/healthz")
    assert response.status_code == 200
    assert response.json()["queue"] == "ok"


# --- unknown API paths and the schema ----------------------------------------------------------


@pytest.mark.parametrize("accept", [None, "text/html"], ids=["no-accept", "accept-html"])
def test_unknown_api_path_is_a_404_problem(db, accept):
    headers = {"HTTP_ACCEPT": accept} if accept else {}

    response = APIClient().get("/api/v1/nope", **headers)

    assert response.status_code == 404
    assert response["Content-Type"].startswith(CONTENT_TYPE)
    body = response.json()
    assert body["status"] == 404
    assert body["code"] == "not_found"
    assert body["instance"] == "/api/v1/nope"
    for member in ("type", "title", "detail"):
        assert body[member]


def test_schema_is_an_openapi_document_with_the_runs_paths(db):
    response = APIClient().get("/api/v1/schema/", {"format": "json"})

    assert response.status_code == 200
    document = json.loads(response.content)
    assert document["openapi"].startswith("3.")
    paths = document["paths"]
    assert "/api/v1/runs" in paths
    assert {"get", "post"} <= set(paths["/api/v1/runs"])
    assert "/api/v1/runs/{run_id}/cancel" in paths
    assert "/api/v1/runs/{run_id}/events" in paths


# --- seed_demo ---------------------------------------------------------------------------------


def row_counts() -> dict[str, int]:
    return {
        model.__name__: model.objects.count()
        for model in (User, Merchant, Membership, Order, StockLevel, AgentRelease, ApiKey)
    }


def test_seed_demo_creates_the_documented_data(db):
    call_command("seed_demo", stdout=io.StringIO())

    demo, other = Merchant.objects.get(slug="demo-shop"), Merchant.objects.get(slug="other-shop")
    roles = dict(Membership.objects.filter(merchant=demo).values_list("user__username", "role"))
    assert roles == {
        "alice": "customer",
        "bob": "customer",
        "sam": "supervisor",
        "sue": "supervisor",
    }
    assert dict(
        Membership.objects.filter(merchant=other).values_list("user__username", "role")
    ) == {"olga": "customer", "oscar": "supervisor"}
    assert User.objects.get(username="admin").is_superuser
    assert set(
        Order.objects.filter(merchant=demo, customer__username="alice").values_list(
            "number", flat=True
        )
    ) == {f"ORD-100{n}" for n in range(1, 6)}
    assert set(
        Order.objects.filter(merchant=demo, customer__username="bob").values_list(
            "number", flat=True
        )
    ) == {"ORD-2001", "ORD-2002", "ORD-2003"}
    assert list(Order.objects.filter(merchant=other).values_list("number", flat=True)) == [
        "ORD-9001"
    ]
    assert AgentRelease.objects.filter(published=True).count() == 2


def test_seed_demo_twice_changes_nothing(db):
    # given
    call_command("seed_demo", stdout=io.StringIO())
    counts = row_counts()
    passwords = dict(User.objects.values_list("username", "password"))
    releases = list(AgentRelease.objects.values_list("merchant__slug", "version", "published"))

    # when
    call_command("seed_demo", stdout=io.StringIO())

    # then
    assert row_counts() == counts
    assert dict(User.objects.values_list("username", "password")) == passwords
    assert (
        list(AgentRelease.objects.values_list("merchant__slug", "version", "published")) == releases
    )


# --- create_api_key ----------------------------------------------------------------------------


def create_api_key(*args: str) -> str:
    out = io.StringIO()
    call_command("create_api_key", *args, stdout=out, stderr=io.StringIO())
    lines = out.getvalue().strip().splitlines()
    return lines[-1]


def test_create_api_key_prints_a_key_that_authenticates(db):
    # given
    call_command("seed_demo", stdout=io.StringIO())

    # when
    raw_key = create_api_key("--merchant", "demo-shop", "--role", "customer", "--user", "alice")

    # then: the last line is the key alone, and only its hash is stored
    assert raw_key == raw_key.strip()
    assert " " not in raw_key
    assert not ApiKey.objects.filter(key_hash=raw_key).exists()
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw_key}")
    response = client.get("/api/v1/runs")
    assert response.status_code == 200, response.content
    assert response.json() == {"results": [], "next": None}


def test_every_key_create_api_key_prints_authenticates(db):
    # The secret comes from a random generator; every key it prints must work, not most.
    call_command("seed_demo", stdout=io.StringIO())
    refused = []
    for _ in range(12):
        raw_key = create_api_key("--merchant", "demo-shop", "--role", "customer", "--user", "bob")
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw_key}")
        if client.get("/api/v1/runs").status_code != 200:
            refused.append(raw_key)

    assert refused == []


@pytest.mark.parametrize(
    "args",
    [
        ["--merchant", "no-such-shop", "--role", "customer", "--user", "alice"],
        ["--merchant", "demo-shop", "--role", "customer", "--user", "nobody"],
        ["--merchant", "other-shop", "--role", "customer", "--user", "alice"],
        ["--merchant", "demo-shop", "--role", "supervisor", "--user", "alice"],
        ["--merchant", "demo-shop", "--role", "service", "--user", "alice"],
        ["--merchant", "demo-shop", "--role", "customer"],
    ],
    ids=[
        "bad-merchant",
        "unknown-user",
        "not-a-member",
        "customer-as-supervisor",
        "service-with-user",
        "customer-without-user",
    ],
)
def test_create_api_key_refuses_bad_arguments(db, args):
    call_command("seed_demo", stdout=io.StringIO())
    keys_before = ApiKey.objects.count()

    with pytest.raises(CommandError):
        create_api_key(*args)

    assert ApiKey.objects.count() == keys_before
