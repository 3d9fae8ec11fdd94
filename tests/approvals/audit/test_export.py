"""The decision record read out: JSON Lines over REST a page at a time (operators and service
keys of the shop, nobody else, nothing of another shop), and CSV in the admin, where a cell
a spreadsheet would run as a formula reads as text."""

import csv
import io
import json

import pytest
from django.contrib.auth.models import User

from agentportal.models import Role
from tests import factories
from tests.approvals.policy_helpers import seen
from tests.approvals.refund_helpers import refund_run_waiting
from tests.pages import signed_in
from tests.problems import assert_problem

pytestmark = pytest.mark.django_db


@pytest.fixture
def record(demo, api):
    """Three of alice's refunds rejected by sam: six entries (asked, rejected)."""
    for reason in ("=SUM(A1:A9)", "+1 on that", "not eligible"):
        waiting = refund_run_waiting()
        api("sam").post(
            f"/api/v1/approvals/{waiting.interrupt_id}/decision",
            {"decision": "reject", **seen(waiting.approval, "reject", {"reason": reason})},
            format="json",
        )
    return demo


@pytest.fixture
def operator(demo, api):
    factories.user_create("opal", merchant=demo, role=Role.OPERATOR)
    return api("opal")


def lines(response) -> list[dict]:
    body = b"".join(response.streaming_content).decode()
    return [json.loads(line) for line in body.splitlines()]


def test_an_operator_reads_the_record_a_page_at_a_time(record, operator):
    # when opal reads pages of four
    first = operator.get("/api/v1/audit?limit=4")
    second = operator.get("/api/v1/audit?limit=4&after=4")

    # then the first names the second, which ends the record
    assert first.status_code == 200
    assert first["Content-Type"] == "application/jsonl"
    assert first["Link"] == '</api/v1/audit?limit=4&after=4>; rel="next"'
    assert "Link" not in second
    entries = lines(first) + lines(second)
    assert [entry["seq"] for entry in entries] == [1, 2, 3, 4, 5, 6]
    assert [entry["kind"] for entry in entries[:2]] == ["requested", "rejected"]
    assert entries[1]["actor"] == "sam" and entries[1]["justification"] == "=SUM(A1:A9)"
    assert entries[1]["prev_hash"] == entries[0]["hash"]


def test_a_service_key_reads_it_and_a_supervisor_or_customer_may_not(record, api):
    assert api(None).get("/api/v1/audit").status_code == 200
    assert_problem(api("sam").get("/api/v1/audit"), 403, "permission_denied")
    assert_problem(api("alice").get("/api/v1/audit"), 403, "permission_denied")


def test_another_shops_operator_sees_none_of_it(record, api):
    other = factories.merchant_create(slug="corner-shop")
    factories.user_create("orla", merchant=other, role=Role.OPERATOR)

    response = api("orla", merchant="corner-shop").get("/api/v1/audit")

    assert response.status_code == 200 and lines(response) == []


@pytest.mark.parametrize(
    ("query", "field"),
    [("limit=0", "limit"), ("after=-1", "after"), ("from=yesterday", "from"), ("limit=x", "limit")],
)
def test_a_query_that_does_not_read_is_a_problem_naming_it(record, operator, query, field):
    problem = assert_problem(operator.get(f"/api/v1/audit?{query}"), 400, "validation_error")
    assert [error["field"] for error in problem["errors"]] == [field]


def test_a_period_ending_before_it_starts_is_refused(record, operator):
    response = operator.get("/api/v1/audit?from=2026-12-02T00:00:00Z&to=2026-12-01T00:00:00Z")

    assert_problem(response, 400, "validation_error")


def test_the_admins_csv_neutralises_formulas(record):
    opal = factories.user_create("opal", merchant=record, role=Role.OPERATOR)
    client = signed_in(opal)

    listing = client.get("/admin/approvals/decisionrecord/")
    response = client.get("/admin/approvals/decisionrecord/csv/?shop=demo-shop")

    assert "Download the record of" in listing.content.decode()
    assert response["Content-Type"] == "text/csv"
    rows = list(csv.DictReader(io.StringIO(b"".join(response.streaming_content).decode())))
    assert [row["seq"] for row in rows] == ["1", "2", "3", "4", "5", "6"]
    reasons = [row["justification"] for row in rows if row["kind"] == "rejected"]
    assert reasons == ["'=SUM(A1:A9)", "'+1 on that", "not eligible"]


def test_a_supervisor_gets_no_csv(record):
    sam = signed_in(User.objects.get(username="sam"))

    response = sam.get("/admin/approvals/decisionrecord/csv/?shop=demo-shop")

    assert response.status_code in (302, 403)
    assert response.get("Content-Type", "").startswith("text/csv") is False
