import io
import json
import os
from pathlib import Path

import pytest
from django.core.management import call_command

from runs.models import ErrorCode
from tests.product import manage


@pytest.mark.django_db
def test_openapi_schema_validates_without_warnings():
    out = io.StringIO()
    call_command("spectacular", "--validate", "--fail-on-warn", stdout=out)
    schema = out.getvalue()
    assert "/api/v1/runs/{run_id}/cancel" in schema
    assert "bearer" in schema


def test_openapi_schema_matches_the_published_contract():
    # given the schema as published with API.md's v1 representations
    published = (Path(__file__).parent / "openapi_v1.json").read_text()

    # when the product (its settings, without the test-only extension app) generates it now
    # (Integer bounds in the schema come from the database's column ranges: the contract was
    # published from the embedded default, SQLite; the schema reads no data.)
    generated = manage(
        "spectacular",
        "--format",
        "openapi-json",
        DJANGO_SECRET_KEY=os.environ["DJANGO_SECRET_KEY"],
        DATABASE_URL="sqlite:///:memory:",
    )
    assert generated.returncode == 0, generated.stderr

    # then nothing an integration sees has changed, to the byte (as the file is written: keys
    # sorted, indented by one)
    assert json.dumps(json.loads(generated.stdout), indent=1, sort_keys=True) + "\n" == published


def test_the_schema_states_the_rules_the_api_enforces():
    schema = json.loads((Path(__file__).parent / "openapi_v1.json").read_text())
    components = schema["components"]["schemas"]
    operations = [op for item in schema["paths"].values() for op in item.values()]

    # every operation declares its problems, with the problem schema
    for operation in operations:
        for status in ("400", "401", "403", "406", "429"):
            problem = operation["responses"][status]["content"]["application/problem+json"]
            assert problem["schema"] == {"$ref": "#/components/schemas/Problem"}
    # bodies name all their fields
    for name in ("RunCreate", "MessageCreate", "TicketRevision", "RejectDecision"):
        assert components[name]["additionalProperties"] is False
    # a rejection needs a reason and a revision the arguments; lists start at 0
    assert "reason" in components["RejectDecision"]["required"]
    assert "tool_args" in components["ReviseDecision"]["required"]
    # a plan is rejected with a note; a customer asks for changes in one, a supervisor revises
    # the items
    assert "note" in components["RejectTicketDecide"]["required"]
    assert "note" not in components["ApproveTicketDecide"].get("required", [])
    assert "note" in components["TicketChangesRequest"]["required"]
    assert "items" in components["TicketRevision"]["required"]
    events = schema["paths"]["/api/v1/runs/{run_id}/events"]["get"]["parameters"]
    assert {"type": "integer", "minimum": 0, "maximum": 2**31 - 1} in [p["schema"] for p in events]
    # the event stream is typed as one
    stream = schema["paths"]["/api/v1/runs/{run_id}/events/stream"]["get"]["responses"]["200"]
    assert list(stream["content"]) == ["text/event-stream"]


def test_a_runs_error_code_is_one_of_the_codes_a_run_ends_with():
    schema = json.loads((Path(__file__).parent / "openapi_v1.json").read_text())

    error_code = schema["components"]["schemas"]["Run"]["properties"]["error_code"]

    assert error_code["nullable"] is True
    assert set(_resolved(schema, error_code)["enum"]) == set(ErrorCode.values)


def test_a_policy_names_a_tool_whose_calls_wait_for_approval():
    schema = json.loads((Path(__file__).parent / "openapi_v1.json").read_text())

    for operation in schema["paths"]["/api/v1/policies/{tool_name}"].values():
        (tool_name,) = [p for p in operation["parameters"] if p["name"] == "tool_name"]
        assert tool_name["schema"]["enum"] == ["issue_refund"]


# (source operation, status) -> the operations its answer leads to, and the parameter it fills
LINKS = {
    ("runs_create", "201"): {
        "runs_retrieve": "run_id",
        "runs_events": "run_id",
        "runs_cancel": "run_id",
    },
    ("runs_list", "200"): {"runs_retrieve": "run_id", "runs_events": "run_id"},
    ("runs_retrieve", "200"): {"runs_inputs": "run_id", "runs_cancel": "run_id"},
    ("runs_inputs", "202"): {"runs_receipt": "idempotency_key"},
    ("approvals_list", "200"): {
        "approvals_retrieve": "interrupt_id",
        "approvals_decide": "interrupt_id",
        "runs_resume": "run_id",
    },
    ("approvals_retrieve", "200"): {"approvals_decide": "interrupt_id", "runs_resume": "run_id"},
    ("tickets_list", "200"): {
        "tickets_retrieve": "ticket_id",
        "tickets_confirm": "ticket_id",
        "tickets_revise": "ticket_id",
        "tickets_decide": "ticket_id",
    },
    ("tickets_retrieve", "200"): {
        "tickets_confirm": "ticket_id",
        "tickets_revise": "ticket_id",
        "tickets_decide": "ticket_id",
    },
    ("conversations_create", "201"): {
        "conversations_retrieve": "conversation_id",
        "conversations_messages": "conversation_id",
        "conversations_send": "conversation_id",
    },
    ("policies_list", "200"): {"policies_retrieve": "tool_name", "policies_update": "tool_name"},
}


def test_links_lead_from_the_answer_that_names_an_id_to_the_operations_that_take_it():
    schema = json.loads((Path(__file__).parent / "openapi_v1.json").read_text())
    operations = {
        op["operationId"]: op for item in schema["paths"].values() for op in item.values()
    }

    for (source, status), targets in LINKS.items():
        links = operations[source]["responses"][status].get("links", {})
        reached = {link["operationId"]: link for link in links.values()}
        for target, parameter in targets.items():
            assert target in reached, (source, target)
            assert parameter in reached[target]["parameters"], (source, target)
    # every link names an operation there is, and each of its parameters
    for operation in operations.values():
        for response in operation["responses"].values():
            for link in response.get("links", {}).values():
                target = operations[link["operationId"]]
                names = {p["name"] for p in target.get("parameters", [])}
                assert set(link.get("parameters", {})) <= names, link


def _resolved(schema: dict, node: dict) -> dict:
    """A property's schema, through an `allOf` or `oneOf` of one `$ref` if it has one."""
    for key in ("allOf", "oneOf", "anyOf"):
        for part in node.get(key, []):
            if "$ref" in part:
                return schema["components"]["schemas"][part["$ref"].rpartition("/")[2]]
    if "$ref" in node:
        return schema["components"]["schemas"][node["$ref"].rpartition("/")[2]]
    return node
