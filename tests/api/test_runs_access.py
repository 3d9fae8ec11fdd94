"""Who may see and start runs: keys, roles, merchants, revocation (API.md)."""

import json

import pytest
from django.contrib.auth.models import User
from rest_framework.test import APIClient

from agentportal.models import ApiKey, Membership
from agentportal.problems import CONTENT_TYPE
from agentportal.services import (
    api_key_create,
    api_key_parse_prefix,
    api_key_revoke,
    membership_revoke,
)
from runs.models import AgentRun, RunStatus
from tests.api.runs_helpers import BODY, RUNS, post_run
from tests.problems import assert_problem


def raw_key_of(client: APIClient) -> str:
    return client._credentials["HTTP_AUTHORIZATION"].removeprefix("Bearer ")


def assert_no_run_data(response, run_id: str) -> None:
    """A problem, not a run: no run members, and the id nowhere but in the request's path."""
    assert response.status_code not in (200, 201, 202)
    assert response["Content-Type"].startswith(CONTENT_TYPE)
    body = response.json()
    for member in ("id", "next_node", "graph_version", "result", "results", "events", "run"):
        assert member not in body, member
    body.pop("instance", None)
    assert run_id not in json.dumps(body)


@pytest.fixture
def alice_run(demo, api) -> str:
    response = post_run(api("alice"), "alice-run")
    assert response.status_code == 201
    return response.json()["id"]


# --- reading one run ---------------------------------------------------------------------------


def test_alice_reads_her_own_run(alice_run, api):
    response = api("alice").get(f"{RUNS}/{alice_run}")

    assert response.status_code == 200
    body = response.json()
    assert body["id"] == alice_run
    assert body["status"] == "QUEUED"
    for member in (
        "next_node",
        "step",
        "version",
        "graph_version",
        "conversation_id",
        "pending",
        "result",
        "error_code",
        "created_at",
        "updated_at",
    ):
        assert member in body, member
    assert body["created_at"].endswith("Z")


@pytest.mark.parametrize("username", ["olga", "oscar"])
def test_another_shops_key_gets_404_run_not_found(alice_run, api, username):
    client = api(username, merchant="other-shop")

    for path in (f"{RUNS}/{alice_run}", f"{RUNS}/{alice_run}/events"):
        body = assert_problem(client.get(path), 404, "run_not_found")
        assert alice_run not in body["detail"]
    assert_problem(client.post(f"{RUNS}/{alice_run}/cancel"), 404, "run_not_found")
    assert AgentRun.objects.get(pk=alice_run).status == RunStatus.QUEUED


def test_another_shops_service_key_gets_404(alice_run, api):
    client = api(merchant="other-shop")

    assert_problem(client.get(f"{RUNS}/{alice_run}"), 404, "run_not_found")


def test_another_customer_of_the_same_shop_gets_404(alice_run, api):
    bob = api("bob")

    assert_problem(bob.get(f"{RUNS}/{alice_run}"), 404, "run_not_found")
    assert_problem(bob.get(f"{RUNS}/{alice_run}/events"), 404, "run_not_found")
    assert_problem(bob.post(f"{RUNS}/{alice_run}/cancel"), 404, "run_not_found")
    assert AgentRun.objects.get(pk=alice_run).status == RunStatus.QUEUED


def test_unknown_run_id_is_404_run_not_found(demo, api):
    response = api("alice").get(f"{RUNS}/00000000-0000-4000-8000-000000000000")

    assert_problem(response, 404, "run_not_found")


@pytest.mark.parametrize("username", ["sam", None], ids=["supervisor", "service"])
def test_supervisor_and_service_key_of_the_shop_read_the_run(alice_run, api, username):
    client = api(username)

    response = client.get(f"{RUNS}/{alice_run}")

    assert response.status_code == 200
    assert response.json()["id"] == alice_run
    events = client.get(f"{RUNS}/{alice_run}/events")
    assert events.status_code == 200
    assert events.json()["events"][0]["type"] == "run.queued"


# --- credentials -------------------------------------------------------------------------------


def test_no_authorization_is_401_with_bearer_challenge(alice_run):
    client = APIClient()

    for response in (client.get(RUNS), client.get(f"{RUNS}/{alice_run}")):
        body = assert_problem(response, 401, "not_authenticated")
        assert response["WWW-Authenticate"].startswith("Bearer")
        assert "id" not in body
        assert body["instance"].startswith(RUNS)


def test_no_authorization_is_401_even_when_html_is_accepted(alice_run):
    # API.md: a missing credential is 401 with WWW-Authenticate, a problem whatever Accept says.
    response = APIClient().get(f"{RUNS}/{alice_run}", HTTP_ACCEPT="text/html")

    assert_problem(response, 401, "not_authenticated")
    assert response["WWW-Authenticate"].startswith("Bearer")


def test_no_authorization_cannot_create_a_run(demo):
    response = post_run(APIClient(), "anon-1")

    assert_problem(response, 401, "not_authenticated")
    assert response["WWW-Authenticate"].startswith("Bearer")
    assert AgentRun.objects.count() == 0


@pytest.mark.parametrize(
    "authorization",
    [
        "Bearer not-a-key",
        "Bearer ap_000000000000_wrongsecret",
        "Bearer ",
        "Basic YWxpY2U6ZGVtbw==",
    ],
    ids=["garbage", "unknown-prefix", "empty", "basic"],
)
def test_bad_credentials_are_401(alice_run, authorization):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=authorization)

    response = client.get(f"{RUNS}/{alice_run}")

    assert_problem(response, 401, "not_authenticated")
    assert response["WWW-Authenticate"].startswith("Bearer")


def test_right_prefix_with_wrong_secret_is_401(alice_run, api):
    prefix = api_key_parse_prefix(raw_key_of(api("alice")))
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer ap_{prefix}_guessed")

    assert_problem(client.get(f"{RUNS}/{alice_run}"), 401, "not_authenticated")


def test_revoked_key_is_401(alice_run, api):
    # given: alice's key, which works
    client = api("alice")
    assert client.get(f"{RUNS}/{alice_run}").status_code == 200

    # when
    api_key_revoke(api_key=ApiKey.objects.get(prefix=api_key_parse_prefix(raw_key_of(client))))

    # then
    response = client.get(f"{RUNS}/{alice_run}")
    assert_problem(response, 401, "not_authenticated")
    assert response["WWW-Authenticate"].startswith("Bearer")
    assert_problem(post_run(client, "after-revoke"), 401, "not_authenticated")


def test_every_generated_api_key_authenticates(demo):
    # api_key_create draws the secret from token_urlsafe, whose alphabet includes "_", the
    # separator of "ap_<prefix>_<secret>"; every key it hands out must still work.
    alice = User.objects.get(username="alice")
    refused = []
    for _ in range(20):
        _, raw_key = api_key_create(merchant=demo, role="customer", user=alice)
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw_key}")
        if client.get(RUNS).status_code != 200:
            refused.append(raw_key)

    assert refused == []


# --- revoked membership ------------------------------------------------------------------------


def test_revoked_customer_cannot_read_their_old_run(alice_run, api):
    # given
    client = api("alice")
    membership = Membership.objects.get(user__username="alice", merchant__slug="demo-shop")

    # when
    assert membership_revoke(membership=membership)

    # then
    assert_no_run_data(client.get(f"{RUNS}/{alice_run}"), alice_run)
    assert_no_run_data(client.get(f"{RUNS}/{alice_run}/events"), alice_run)
    listing = client.get(RUNS)
    assert_no_run_data(listing, alice_run)


def test_revoked_customer_cannot_read_their_run_by_replaying_the_post(demo, api):
    # given: alice created a run with a key, then lost her membership
    client = api("alice")
    created = post_run(client, "before-revoke")
    assert created.status_code == 201
    run_id = created.json()["id"]
    membership_revoke(
        membership=Membership.objects.get(user__username="alice", merchant__slug="demo-shop")
    )

    # when: she replays the same key and body
    replay = post_run(client, "before-revoke")

    # then: no run comes back, and nothing was created
    assert_no_run_data(replay, run_id)
    assert "Idempotent-Replayed" not in replay
    assert AgentRun.objects.count() == 1


def test_revoked_customer_cannot_start_a_run(demo, api):
    client = api("alice")
    membership_revoke(
        membership=Membership.objects.get(user__username="alice", merchant__slug="demo-shop")
    )

    response = post_run(client, "after-membership-revoke")

    assert response.status_code in (401, 403)
    assert AgentRun.objects.count() == 0


# --- creating runs: roles and accounts ---------------------------------------------------------


def test_service_key_creates_a_run_for_a_named_customer(demo, api):
    response = post_run(api(), "svc-1", {**BODY, "account": "alice"})

    assert response.status_code == 201
    run = AgentRun.objects.get(pk=response.json()["id"])
    assert run.account.username == "alice"
    assert run.merchant.slug == "demo-shop"
    # alice sees the run a service key started for her
    assert api("alice").get(f"{RUNS}/{run.pk}").status_code == 200


@pytest.mark.parametrize(
    "account",
    ["nobody", "olga", "sam", ""],
    ids=["unknown", "other-shop-customer", "supervisor", "empty"],
)
def test_service_key_naming_a_non_customer_account_is_400(demo, api, account):
    response = post_run(api(), "svc-bad", {**BODY, "account": account})

    body = assert_problem(response, 400, "validation_error")
    assert "account" in [error["field"] for error in body["errors"]]
    assert AgentRun.objects.count() == 0


def test_service_key_without_account_is_400(demo, api):
    response = post_run(api(), "svc-none")

    body = assert_problem(response, 400, "validation_error")
    assert "account" in [error["field"] for error in body["errors"]]
    assert AgentRun.objects.count() == 0


def test_customer_naming_an_account_is_403(demo, api):
    # Well formed, but acting for another customer is a service key's privilege.
    response = post_run(api("alice"), "cust-account", {**BODY, "account": "bob"})

    body = assert_problem(response, 403, "permission_denied")
    assert "service keys" in body["detail"]
    assert AgentRun.objects.count() == 0


def test_supervisor_cannot_start_a_run(demo, api):
    response = post_run(api("sam"), "sup-1")

    assert_problem(response, 403, "permission_denied")
    assert AgentRun.objects.count() == 0
