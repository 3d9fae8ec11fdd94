"""Bad bodies for POST /api/v1/runs: 400 validation_error problems, and nothing written."""

import json

import pytest

from agentportal.problems import CONTENT_TYPE
from runs.models import AgentRun, RunEvent
from tests.api.runs_helpers import RUNS
from tests.problems import assert_problem


def assert_field_errors(body: dict) -> list[str]:
    """errors is a non-empty list of {field, message}; returns the fields."""
    assert isinstance(body.get("errors"), list), body
    assert body["errors"], body
    for error in body["errors"]:
        assert set(error) == {"field", "message"}, error
        assert isinstance(error["field"], str)
        assert isinstance(error["message"], str)
        assert error["message"]
    return [error["field"] for error in body["errors"]]


BAD_BODIES = [
    pytest.param('{"message": "What is the status', None, id="malformed-json"),
    pytest.param("", None, id="empty-body"),
    pytest.param(json.dumps(["What is the status of order ORD-1001?"]), None, id="json-list"),
    pytest.param(json.dumps("What is the status of order ORD-1001?"), None, id="json-string"),
    pytest.param(json.dumps({"message": 1001}), "message", id="message-number"),
    pytest.param(json.dumps({"message": True}), "message", id="message-boolean"),
    pytest.param(json.dumps({"message": ["hi"]}), "message", id="message-list"),
    pytest.param(json.dumps({"message": None}), "message", id="message-null"),
    pytest.param(json.dumps({}), "message", id="message-missing"),
    pytest.param(json.dumps({"text": "hello"}), "text", id="message-misnamed"),
    pytest.param(json.dumps({"message": ""}), "message", id="message-empty"),
    pytest.param(json.dumps({"message": "x" * 5000}), "message", id="message-5000-chars"),
    pytest.param(json.dumps({"message": "x" * 4001}), "message", id="message-4001-chars"),
    pytest.param(json.dumps({"message": "hi", "priority": "high"}), "priority", id="unknown-field"),
    pytest.param(
        json.dumps({"message": "hi", "account": "alice", "admin": True}), "admin", id="unknown-2"
    ),
]


def post_raw(client, raw: str, **headers):
    return client.post(
        RUNS, data=raw, content_type="application/json", HTTP_IDEMPOTENCY_KEY="bad-input", **headers
    )


@pytest.mark.parametrize(("raw", "field"), BAD_BODIES)
def test_bad_body_is_400_validation_error_and_writes_nothing(demo, api, raw, field):
    # given
    runs_before, events_before = AgentRun.objects.count(), RunEvent.objects.count()

    # when
    response = post_raw(api("alice"), raw)

    # then
    body = assert_problem(response, 400, "validation_error")
    fields = assert_field_errors(body)
    if field is not None:
        assert field in fields, fields
    assert "Traceback" not in response.content.decode()
    assert AgentRun.objects.count() == runs_before
    assert RunEvent.objects.count() == events_before


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        pytest.param('{"message": "What is', None, id="malformed-json"),
        pytest.param(json.dumps(["hi"]), None, id="json-list"),
        pytest.param(json.dumps({"message": 7}), "message", id="message-number"),
        pytest.param(json.dumps({"message": "hi", "priority": 1}), "priority", id="unknown-field"),
    ],
)
def test_bad_body_is_400_validation_error_problem_even_when_html_is_accepted(demo, api, raw, field):
    # API.md: every error is application/problem+json whatever the request's Accept header,
    # and a malformed body is a 400 validation_error with its field errors.
    response = post_raw(api("alice"), raw, HTTP_ACCEPT="text/html")

    body = assert_problem(response, 400, "validation_error")
    fields = assert_field_errors(body)
    if field is not None:
        assert field in fields, fields
    assert "<html" not in response.content.decode().lower()
    assert AgentRun.objects.count() == 0
    assert RunEvent.objects.count() == 0


def test_a_refused_body_does_not_burn_the_idempotency_key(demo, api):
    # given: a bad body under a key
    alice = api("alice")
    bad = alice.post(RUNS, {"message": ""}, format="json", HTTP_IDEMPOTENCY_KEY="retry-me")
    assert bad.status_code == 400

    # when: the client fixes the body and retries with the same key
    good = alice.post(RUNS, {"message": "hi"}, format="json", HTTP_IDEMPOTENCY_KEY="retry-me")

    # then
    assert good.status_code == 201
    assert AgentRun.objects.count() == 1


def test_message_of_4000_characters_is_accepted(demo, api):
    response = api("alice").post(
        RUNS, {"message": "x" * 4000}, format="json", HTTP_IDEMPOTENCY_KEY="long-ok"
    )

    assert response.status_code == 201
    run = AgentRun.objects.get(pk=response.json()["id"])
    assert run.messages[-1] == {"role": "user", "content": "x" * 4000}


def test_valid_post_with_accept_html_still_answers_json(demo, api):
    response = api("alice").post(
        RUNS,
        {"message": "What is the status of order ORD-1001?"},
        format="json",
        HTTP_IDEMPOTENCY_KEY="html-ok",
        HTTP_ACCEPT="text/html",
    )

    # Either the run is created, or a problem (never an HTML page).
    content_type = response["Content-Type"]
    assert content_type.startswith(("application/json", CONTENT_TYPE)), content_type
    assert "<html" not in response.content.decode().lower()


@pytest.mark.parametrize("accept", [None, "text/html"], ids=["no-accept", "accept-html"])
def test_form_encoded_body_is_a_problem_not_a_page(demo, api, accept):
    headers = {"HTTP_ACCEPT": accept} if accept else {}

    response = api("alice").post(
        RUNS, {"message": "hi"}, HTTP_IDEMPOTENCY_KEY="form-body", **headers
    )

    assert 400 <= response.status_code < 500
    assert response["Content-Type"].startswith(CONTENT_TYPE)
    body = response.json()
    for member in ("type", "title", "status", "detail", "instance", "code"):
        assert member in body, member
    assert AgentRun.objects.count() == 0
