"""Hostile input is answered with a clear problem (or a plain 400 page), never a 500, and
leaves nothing written, on SQLite and on PostgreSQL."""

import json

import pytest

from runs.models import AgentRun
from tests.problems import assert_problem

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    "path",
    [
        "/api/v1/approvals/%00",
        "/api/v1/approvals?tool=%00",
        "/api/v1/runs?status=%00",
        "/api/v1/runs/%00/events",
    ],
)
def test_a_nul_character_in_a_path_or_a_query_is_a_400_problem(demo, api, path):
    assert_problem(api("sam").get(path), 400, "validation_error")


def test_a_nul_character_on_a_page_is_a_400_page(demo, client):
    response = client.get("/portal/approvals/%00/")

    assert response.status_code == 400
    assert "NUL" in response.text


def test_a_body_over_the_limit_is_a_413_problem(demo, api):
    body = json.dumps({"message": "x" * (20 * 1024 * 1024)})

    response = api("alice").post(
        "/api/v1/runs", body, content_type="application/json", HTTP_IDEMPOTENCY_KEY="big"
    )

    assert_problem(response, 413, "payload_too_large")
    assert not AgentRun.objects.exists()


@pytest.mark.parametrize("depth", [33, 1000, 100_000])
def test_json_nested_too_deep_is_a_400_problem(demo, api, depth):
    body = "[" * depth + "]" * depth

    response = api("alice").post(
        "/api/v1/runs", body, content_type="application/json", HTTP_IDEMPOTENCY_KEY=f"d{depth}"
    )

    assert_problem(response, 400, "validation_error")


def test_a_nul_character_inside_json_is_a_400_problem(demo, api):
    response = api("alice").post(
        "/api/v1/runs",
        {"message": "hello\u0000there"},
        format="json",
        HTTP_IDEMPOTENCY_KEY="nul",
    )

    assert_problem(response, 400, "validation_error")
    assert not AgentRun.objects.exists()


@pytest.mark.parametrize("text", [" ", "   \n\t "])
def test_a_blank_message_is_a_400_problem_and_starts_nothing(demo, api, text):
    alice = api("alice")
    conversation = alice.post("/api/v1/conversations", {}, format="json").json()["id"]

    standalone = alice.post(
        "/api/v1/runs", {"message": text}, format="json", HTTP_IDEMPOTENCY_KEY="blank"
    )
    chat = alice.post(
        f"/api/v1/conversations/{conversation}/messages", {"text": text}, format="json"
    )

    assert_problem(standalone, 400, "validation_error")
    assert_problem(chat, 400, "validation_error")
    assert not AgentRun.objects.exists()
