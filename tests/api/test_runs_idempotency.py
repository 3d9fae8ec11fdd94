"""POST /api/v1/runs and its Idempotency-Key, and the open-run limit (API.md, Runs)."""

import threading

import pytest
from django.contrib.auth.models import User
from django.db import connection

from runs.models import AgentRun, RunEvent, RunStatus
from tests.api.runs_helpers import BODY, RUNS, post_run
from tests.problems import assert_problem


def runs_of(username: str):
    return AgentRun.objects.filter(account__username=username)


def race(clients, request) -> list:
    """Send request(client, index) from one real thread per client, all released at once.

    Returns the responses in client order (or the exception a thread raised, so that a 500 or
    a crash fails the test instead of vanishing in a thread).
    """
    barrier = threading.Barrier(len(clients))
    results: list = [None] * len(clients)

    def send(index: int, client) -> None:
        try:
            barrier.wait(timeout=10)
            results[index] = request(client, index)
        except Exception as error:  # reported by the test's assertions
            results[index] = error
        finally:
            connection.close()

    threads = [
        threading.Thread(target=send, args=(index, client)) for index, client in enumerate(clients)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not any(thread.is_alive() for thread in threads), "a request thread hung"
    return results


# --- replay ------------------------------------------------------------------------------------


def test_first_post_creates_a_queued_run_with_one_queued_event(demo, api):
    response = post_run(api("alice"), "first-1")

    assert response.status_code == 201
    body = response.json()
    assert body["status"] == "QUEUED"
    assert "Idempotent-Replayed" not in response
    run = AgentRun.objects.get(pk=body["id"])
    assert run.account.username == "alice"
    assert run.idempotency_key == "first-1"
    assert list(RunEvent.objects.filter(run=run).values_list("seq", "type")) == [(1, "run.queued")]


def test_replay_with_same_key_and_body_returns_the_same_run_with_200(demo, api):
    # given
    alice = api("alice")
    first = post_run(alice, "replay-1")
    assert first.status_code == 201

    # when
    replay = post_run(alice, "replay-1")

    # then
    assert replay.status_code == 200
    assert replay["Idempotent-Replayed"] == "true"
    assert replay.json()["id"] == first.json()["id"]
    assert replay.json()["status"] == first.json()["status"]
    assert runs_of("alice").count() == 1
    assert RunEvent.objects.filter(run_id=first.json()["id"]).count() == 1


def test_replay_from_another_key_of_the_same_user_is_still_a_replay(demo, api):
    # Keys are scoped per principal (the user), not per API key.
    first = post_run(api("alice"), "replay-2")

    replay = post_run(api("alice"), "replay-2")

    assert replay.status_code == 200
    assert replay["Idempotent-Replayed"] == "true"
    assert replay.json()["id"] == first.json()["id"]
    assert runs_of("alice").count() == 1


def test_same_key_with_another_body_is_422_idempotency_key_reused(demo, api):
    alice = api("alice")
    assert post_run(alice, "reuse-1").status_code == 201

    response = post_run(alice, "reuse-1", {"message": "Refund my order ORD-1002."})

    assert_problem(response, 422, "idempotency_key_reused")
    assert runs_of("alice").count() == 1


def test_missing_idempotency_key_is_400_and_creates_nothing(demo, api):
    response = post_run(api("alice"), None)

    body = assert_problem(response, 400, "idempotency_key_missing")
    assert body["instance"] == RUNS
    assert AgentRun.objects.count() == 0


def test_empty_idempotency_key_counts_as_missing(demo, api):
    response = post_run(api("alice"), "")

    assert_problem(response, 400, "idempotency_key_missing")
    assert AgentRun.objects.count() == 0


@pytest.mark.parametrize(
    "key",
    [
        pytest.param("has space", id="space"),
        pytest.param("k" * 256, id="256-chars"),
        pytest.param("tab\tkey", id="tab"),
        pytest.param("schlüssel", id="non-ascii"),
    ],
)
def test_idempotency_key_that_is_not_1_to_255_visible_ascii_is_400(demo, api, key):
    response = post_run(api("alice"), key)

    body = assert_problem(response, 400, "validation_error")
    assert body["errors"], body
    assert AgentRun.objects.count() == 0


def test_idempotency_key_of_255_visible_characters_is_accepted(demo, api):
    key = "~!" + "k" * 252 + "}"
    assert len(key) == 255

    response = post_run(api("alice"), key)

    assert response.status_code == 201
    assert AgentRun.objects.get(pk=response.json()["id"]).idempotency_key == key


def test_idempotency_keys_are_scoped_per_principal(demo, api):
    # when: alice, bob and a service key of the shop each use "k1"
    alice = post_run(api("alice"), "k1")
    bob = post_run(api("bob"), "k1")
    service = post_run(api(), "k1", {**BODY, "account": "bob"})

    # then: three runs, none a replay of another
    assert [alice.status_code, bob.status_code, service.status_code] == [201, 201, 201]
    assert len({alice.json()["id"], bob.json()["id"], service.json()["id"]}) == 3
    assert AgentRun.objects.get(pk=alice.json()["id"]).account.username == "alice"
    assert AgentRun.objects.get(pk=bob.json()["id"]).account.username == "bob"
    assert AgentRun.objects.get(pk=service.json()["id"]).account.username == "bob"
    assert AgentRun.objects.filter(idempotency_key="k1").count() == 3


def test_bob_cannot_replay_alices_key_to_read_her_run(demo, api):
    # given
    alice_run = post_run(api("alice"), "k-shared").json()["id"]

    # when: bob sends the same key and body
    response = post_run(api("bob"), "k-shared")

    # then: a new run of his own, never alice's
    assert response.status_code == 201
    assert response.json()["id"] != alice_run
    assert AgentRun.objects.get(pk=response.json()["id"]).account.username == "bob"


# --- concurrency -------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_concurrent_posts_with_the_same_key_create_exactly_one_run(demo, api):
    # given: eight clients acting as alice, each in its own thread
    clients = [api("alice") for _ in range(8)]

    # when
    responses = race(clients, lambda client, _: post_run(client, "race-1"))

    # then
    errors = [r for r in responses if isinstance(r, Exception)]
    assert not errors, errors
    statuses = [r.status_code for r in responses]
    assert set(statuses) <= {200, 201, 409}, statuses
    assert statuses.count(201) == 1, statuses
    assert AgentRun.objects.filter(idempotency_key="race-1").count() == 1
    run = AgentRun.objects.get(idempotency_key="race-1")
    assert RunEvent.objects.filter(run=run).count() == 1
    for response in responses:
        if response.status_code in (200, 201):
            assert response.json()["id"] == str(run.pk)
        if response.status_code == 200:
            assert response["Idempotent-Replayed"] == "true"
        if response.status_code == 409:
            assert_problem(response, 409, "idempotency_key_in_flight")


# --- the open-run limit ------------------------------------------------------------------------


def test_fourth_unfinished_run_is_429_too_many_open_runs(demo, api):
    # given: three unfinished runs
    alice = api("alice")
    for n in range(3):
        assert post_run(alice, f"open-{n}").status_code == 201

    # when
    response = post_run(alice, "open-3", {"message": "Refund my order ORD-1002."})

    # then
    assert_problem(response, 429, "too_many_open_runs")
    assert runs_of("alice").count() == 3
    assert not AgentRun.objects.filter(idempotency_key="open-3").exists()


def test_replay_is_answered_before_the_open_run_limit(demo, api):
    # given: alice at the limit
    alice = api("alice")
    first = post_run(alice, "limit-0")
    for n in range(1, 3):
        post_run(alice, f"limit-{n}")
    assert_problem(post_run(alice, "limit-3"), 429, "too_many_open_runs")

    # when: she replays a key she already used
    replay = post_run(alice, "limit-0")

    # then
    assert replay.status_code == 200
    assert replay["Idempotent-Replayed"] == "true"
    assert replay.json()["id"] == first.json()["id"]
    assert runs_of("alice").count() == 3


def test_open_run_limit_counts_per_account(demo, api):
    alice = api("alice")
    for n in range(3):
        post_run(alice, f"acct-{n}")

    response = post_run(api("bob"), "acct-0")

    assert response.status_code == 201


def test_open_run_limit_applies_to_service_keys_naming_the_account(demo, api):
    alice = api("alice")
    for n in range(3):
        post_run(alice, f"svc-limit-{n}")

    response = post_run(api(), "svc-limit-x", {**BODY, "account": "alice"})

    assert_problem(response, 429, "too_many_open_runs")
    assert runs_of("alice").count() == 3


def test_a_finished_run_frees_a_slot(demo, api):
    # given: three open runs, one of which is cancelled
    alice = api("alice")
    ids = [post_run(alice, f"free-{n}").json()["id"] for n in range(3)]
    assert alice.post(f"{RUNS}/{ids[0]}/cancel").status_code == 200

    # when
    response = post_run(alice, "free-3")

    # then
    assert response.status_code == 201
    assert runs_of("alice").exclude(status=RunStatus.CANCELLED).count() == 3


@pytest.mark.django_db(transaction=True)
def test_concurrent_posts_with_distinct_keys_never_pass_the_open_run_limit(demo, api):
    # given: six threads for alice, each with a key of its own
    clients = [api("alice") for _ in range(6)]

    # when
    responses = race(clients, lambda client, index: post_run(client, f"burst-{index}"))

    # then
    errors = [r for r in responses if isinstance(r, Exception)]
    assert not errors, errors
    statuses = sorted(r.status_code for r in responses)
    assert statuses == [201, 201, 201, 429, 429, 429], statuses
    for response in responses:
        if response.status_code == 429:
            assert_problem(response, 429, "too_many_open_runs")
    alice = User.objects.get(username="alice")
    assert AgentRun.objects.filter(account=alice).count() == 3
