"""A body the API refuses as malformed (400 `validation_error`) is one its published schema
refuses too: the contract states every rule of a body's form, so a client that keeps to the
schema is never told its request is malformed. (Rules that depend on what the path names, such
as revised arguments against the pending call's tool or items against the ticket's order, are
answers about that resource, not about the body's form: they are not here.)"""

import json
from pathlib import Path

import jsonschema
import pytest

from agentportal.models import Role
from approvals.models import ApprovalPolicy
from tests import factories
from tests.approvals.plan_helpers import command, exchange_run, ticket_of
from tests.problems import assert_problem

SCHEMA = json.loads((Path(__file__).parents[1] / "agentportal" / "openapi_v1.json").read_text())


def _json_schema(node):
    """An OpenAPI 3.0 schema as JSON Schema: `nullable` becomes a null alternative."""
    if isinstance(node, list):
        return [_json_schema(item) for item in node]
    if not isinstance(node, dict):
        return node
    converted = {key: _json_schema(value) for key, value in node.items() if key != "nullable"}
    if node.get("nullable"):
        return {"anyOf": [converted, {"type": "null"}]}
    return converted


def schema_refuses(path: str, method: str, body: dict) -> bool:
    """Whether the published schema refuses `body` as the request body of the operation."""
    operation = SCHEMA["paths"][path][method]
    body_schema = operation["requestBody"]["content"]["application/json"]["schema"]
    root = {**_json_schema(body_schema), "components": _json_schema(SCHEMA["components"])}
    return not jsonschema.Draft202012Validator(root).is_valid(body)


@pytest.fixture
def ticket(demo):
    return ticket_of(exchange_run(demo))


@pytest.fixture
def reviewed_ticket(demo, api, ticket):
    command(api("alice"), ticket, "confirm")
    return ticket


@pytest.mark.parametrize(
    "body",
    [
        pytest.param({"decision": "reject"}, id="reject-without-note"),
        pytest.param({"decision": "reject", "note": ""}, id="reject-with-empty-note"),
        pytest.param({"decision": "reject", "note": " \n"}, id="reject-with-blank-note"),
    ],
)
def test_a_plan_rejected_without_a_note_is_refused_by_the_api_and_the_schema(
    api, reviewed_ticket, body
):
    # when a supervisor rejects the confirmed plan without saying why
    response = command(api("sam"), reviewed_ticket, "decide", **body)

    # then the API refuses it, naming the note, and so does the schema
    problem = assert_problem(response, 400, "validation_error")
    assert [error["field"] for error in problem["errors"]] == ["note"]
    assert schema_refuses(
        "/api/v1/tickets/{ticket_id}/decide",
        "post",
        {"proposal_version": 1, **body},
    )


def test_a_plan_approved_without_a_note_is_taken_by_both(api, reviewed_ticket):
    response = command(api("sam"), reviewed_ticket, "decide", decision="approve")

    assert response.status_code == 200, response.content
    assert not schema_refuses(
        "/api/v1/tickets/{ticket_id}/decide", "post", {"proposal_version": 1, "decision": "approve"}
    )


@pytest.mark.parametrize(
    "note", [pytest.param(None, id="no-note"), "", pytest.param(" \t", id="blank-note")]
)
def test_a_customers_request_for_changes_without_saying_what_is_refused_by_both(api, ticket, note):
    body = {} if note is None else {"note": note}

    response = command(api("alice"), ticket, "revise", **body)

    problem = assert_problem(response, 400, "validation_error")
    assert [error["field"] for error in problem["errors"]] == ["note"]
    assert schema_refuses(
        "/api/v1/tickets/{ticket_id}/revise", "post", {"proposal_version": 1, **body}
    )


@pytest.mark.parametrize("sku", ["", " ", "\t\n"])
def test_a_supervisors_revision_naming_a_blank_sku_is_refused_by_both(api, ticket, sku):
    items = [{"sku": sku, "new_sku": "SHOE-TRAIL-43", "quantity": 1}]

    response = command(api("sam"), ticket, "revise", items=items)

    problem = assert_problem(response, 400, "validation_error")
    assert {error["field"].split(".")[0] for error in problem["errors"]} == {"items"}
    assert schema_refuses(
        "/api/v1/tickets/{ticket_id}/revise", "post", {"proposal_version": 1, "items": items}
    )


@pytest.mark.parametrize("amount_field", ["", " ", "order_id", "price"])
def test_a_policy_whose_amount_field_is_not_an_amount_is_refused_by_both(demo, api, amount_field):
    # given an operator of the shop
    factories.user_create("opal", merchant=demo, role=Role.OPERATOR)
    body = {
        "amount_field": amount_field,
        "auto_approve_up_to": "10.00",
        "two_approvers_from": None,
        "escalate_after_seconds": None,
    }

    # when the policy of refunds is set to weigh something that is not an amount
    response = api("opal").put(
        "/api/v1/policies/issue_refund", json.dumps(body), content_type="application/json"
    )

    # then the API refuses it, naming the field, and so does the schema
    problem = assert_problem(response, 400, "validation_error")
    assert [error["field"] for error in problem["errors"]] == ["amount_field"]
    assert schema_refuses("/api/v1/policies/{tool_name}", "put", body)


@pytest.mark.parametrize("threshold", ["two_approvers_from", "auto_approve_up_to"])
@pytest.mark.parametrize("empty", ["", " "])
def test_a_policy_threshold_of_empty_text_is_refused_not_read_as_never(demo, api, threshold, empty):
    # given an operator of the shop, and a body whose threshold is empty text (not null)
    factories.user_create("opal", merchant=demo, role=Role.OPERATOR)
    body = {
        "amount_field": "amount",
        "auto_approve_up_to": None,
        "two_approvers_from": None,
        "escalate_after_seconds": None,
        threshold: empty,
    }

    # when the policy is set with it
    response = api("opal").put(
        "/api/v1/policies/issue_refund", json.dumps(body), content_type="application/json"
    )

    # then the API refuses it as the schema does, and no policy was written
    problem = assert_problem(response, 400, "validation_error")
    assert [error["field"] for error in problem["errors"]] == [threshold]
    assert schema_refuses("/api/v1/policies/{tool_name}", "put", body)
    assert not ApprovalPolicy.objects.exists()
