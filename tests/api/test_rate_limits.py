"""Rate limits: per key, and for wrong keys per address, answered as 429 rate_limited with
Retry-After."""

import pytest
from rest_framework.test import APIClient

from tests.problems import assert_problem

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("fresh_cache")]


def test_a_key_past_its_rate_gets_429_with_retry_after(demo, api, settings):
    # given a rate of 5 requests a minute per key
    settings.AGENTPORTAL = {**settings.AGENTPORTAL, "API_RATE": "5/minute"}
    alice, bob = api("alice"), api("bob")

    # when alice makes 6 requests
    answers = [alice.get("/api/v1/runs") for _ in range(6)]

    # then the 6th is refused, says when to come back, and bob's key is not slowed
    assert [answer.status_code for answer in answers[:5]] == [200] * 5
    body = assert_problem(answers[5], 429, "rate_limited")
    assert int(answers[5]["Retry-After"]) >= 1
    assert "try again in" in body["detail"]
    assert bob.get("/api/v1/runs").status_code == 200


def test_guessing_keys_from_one_address_is_slowed_down(demo, api, settings):
    settings.AGENTPORTAL = {**settings.AGENTPORTAL, "AUTH_FAILURES_PER_MINUTE": 10}
    guesser = APIClient()
    guesser.credentials(HTTP_AUTHORIZATION="Bearer ap_guess_0000000000000000")

    answers = [guesser.get("/api/v1/runs").status_code for _ in range(12)]

    assert answers[:10] == [401] * 10
    assert_problem(guesser.get("/api/v1/runs"), 429, "rate_limited")
