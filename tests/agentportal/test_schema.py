import io
import json
import os
from pathlib import Path

import pytest
from django.core.management import call_command

from tests.product import manage


@pytest.mark.django_db
def test_openapi_schema_validates_without_warnings():
    out = io.StringIO()
    call_command("spectacular", "--validate", "--fail-on-warn", stdout=out)
    schema = out.getvalue()
    assert "/api/v1/runs/{run_id}/cancel" in schema
    assert "bearer" in schema


def _canonical(node):
    """The schema with the order of required fields and enums left out: the contract is which
    fields and values there are, not the order the generator lists them in."""
    if isinstance(node, dict):
        return {
            key: sorted(value)
            if key in ("required", "enum") and isinstance(value, list)
            else _canonical(value)
            for key, value in node.items()
        }
    if isinstance(node, list):
        return [_canonical(item) for item in node]
    return node


def test_openapi_schema_matches_the_published_contract():
    # given the schema as published with API.md's v1 representations
    published = json.loads((Path(__file__).parent / "openapi_v1.json").read_text())

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

    # then nothing an integration sees has changed
    assert _canonical(json.loads(generated.stdout)) == _canonical(published)


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
    for name in ("RunCreate", "MessageCreate", "TicketRevise", "RejectDecision"):
        assert components[name]["additionalProperties"] is False
    # a rejection needs a reason and a revision the arguments; lists start at 0
    assert "reason" in components["RejectDecision"]["required"]
    assert "tool_args" in components["ReviseDecision"]["required"]
    events = schema["paths"]["/api/v1/runs/{run_id}/events"]["get"]["parameters"]
    assert {"type": "integer", "minimum": 0, "maximum": 2**31 - 1} in [p["schema"] for p in events]
    # the event stream is typed as one
    stream = schema["paths"]["/api/v1/runs/{run_id}/events/stream"]["get"]["responses"]["200"]
    assert list(stream["content"]) == ["text/event-stream"]
