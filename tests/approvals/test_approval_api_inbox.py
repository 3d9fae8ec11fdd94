"""The supervisors' inbox over REST (API.md: approvals): the list of tool-call approvals, its
filters, its cursor and its cost in queries, and one approval's detail.

Every run here is the scripted refund: the agent looks ORD-1003 up, proposes issue_refund
(policy: approval) and waits WAITING_APPROVAL; runs.worker.tick() drives it in-process.
"""

from datetime import timedelta

from django.contrib.auth.models import User
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from agentportal.services import api_key_create
from approvals.models import Approval, ApprovalStatus
from runs.models import AgentRun
from tests import factories
from tests.approvals.approval_api_helpers import (
    APPROVAL_FIELDS,
    APPROVALS,
    PROPOSED,
    RESUME,
    finish,
)
from tests.approvals.refund_helpers import REFUND, refund_run_waiting
from tests.problems import assert_problem

# --- the inbox -----------------------------------------------------------------------------


def test_approvals_list_shows_pending_call_to_supervisors_of_its_shop_only(refund_waiting, api):
    listed = api("sam").get(APPROVALS)
    assert listed.status_code == 200
    [approval] = listed.json()["results"]
    assert set(approval) == APPROVAL_FIELDS
    assert approval["interrupt_id"] == refund_waiting.interrupt_id
    assert approval["run_id"] == str(refund_waiting.run.pk)
    assert approval["status"] == "PENDING_APPROVAL"
    assert approval["proposed_args"] == PROPOSED
    assert approval["decided_by"] is None and approval["decision"] is None
    assert listed.json()["next"] is None

    assert api().get(APPROVALS).json()["results"][0]["interrupt_id"] == refund_waiting.interrupt_id
    assert api("oscar", merchant="other-shop").get(APPROVALS).json()["results"] == []
    for customer in ("alice", "bob"):
        assert_problem(api(customer).get(APPROVALS), 403, "permission_denied")


def test_approvals_list_filters_by_status_and_tool(demo, api):
    # given: one call pending, one executed, one rejected
    executed = refund_run_waiting()
    sam = api("sam")
    approved = RESUME.post(sam, executed.run.pk, executed.interrupt_id, decision="approve")
    assert approved.status_code == 200
    finish(executed)
    rejected = refund_run_waiting("I want a refund for ORD-1001 amount 10")
    assert (
        RESUME.post(
            sam, rejected.run.pk, rejected.interrupt_id, decision="reject", reason="no"
        ).status_code
        == 200
    )
    finish(rejected)
    pending = refund_run_waiting("I want a refund for ORD-1002 amount 5")

    def listed(**params) -> list[str]:
        response = sam.get(APPROVALS, params)
        assert response.status_code == 200, response.content
        return [a["interrupt_id"] for a in response.json()["results"]]

    # then
    assert listed(status="PENDING_APPROVAL") == [pending.interrupt_id]
    assert listed(status="EXECUTED") == [executed.interrupt_id]
    assert listed(status="REJECTED") == [rejected.interrupt_id]
    assert listed(status="EXPIRED") == []
    assert set(listed(tool="issue_refund")) == {
        pending.interrupt_id,
        executed.interrupt_id,
        rejected.interrupt_id,
    }
    assert listed(tool="lookup_order") == []
    assert listed(status="EXECUTED", tool="issue_refund") == [executed.interrupt_id]
    assert_problem(sam.get(APPROVALS, {"status": "DONE"}), 400, "validation_error")


def bulk_approvals(run: AgentRun, count: int, *, start: int = 0) -> list[Approval]:
    """Valid approvals, quickly: half pending, a quarter decided by sam, a quarter by a key."""
    sam = User.objects.get(username="sam")
    key, _ = api_key_create(merchant=run.merchant, role="service")
    now = timezone.now()
    rows = []
    for n in range(start, start + count):
        args = {"order_id": "ORD-1003", "amount": f"{1 + n % 50}.00", "reason": "bulk"}
        decided = n % 2 == 1
        by_key = n % 4 == 3
        rows.append(
            Approval(
                interrupt_id=f"int-bulk{n:012d}",
                run=run,
                merchant=run.merchant,
                tool_name="issue_refund",
                tool_execution_key=f"agent:{run.pk}:bulk:{n}",
                proposed_args=args,
                approved_args=args if decided else None,
                status=(
                    ApprovalStatus.APPROVED_EXECUTING
                    if decided
                    else ApprovalStatus.PENDING_APPROVAL
                ),
                decision="approve" if decided else "",
                decided_by=None if (by_key or not decided) else sam,
                decided_by_key=key if (decided and by_key) else None,
                decided_at=now if decided else None,
                expires_at=now + timedelta(minutes=30),
            )
        )
    return Approval.objects.bulk_create(rows)


def test_approvals_list_pages_with_a_cursor(demo, api):
    # given: 120 approvals
    run = factories.run_queue(
        customer=User.objects.get(username="alice"), merchant=demo, message=REFUND
    )
    bulk_approvals(run, 120)
    sam = api("sam")

    # when: follow the cursor to the end
    seen: list[str] = []
    params: dict[str, str] = {}
    pages = 0
    while True:
        response = sam.get(APPROVALS, params)
        assert response.status_code == 200, response.content
        body = response.json()
        seen.extend(a["interrupt_id"] for a in body["results"])
        pages += 1
        if body["next"] is None:
            break
        params = {"cursor": body["next"]}
        assert pages < 10

    # then: each once, newest first
    assert pages == 3
    assert len(seen) == len(set(seen)) == 120
    created = dict(Approval.objects.values_list("interrupt_id", "created_at"))
    assert [created[i] for i in seen] == sorted((created[i] for i in seen), reverse=True)

    # and the filters keep the cursor's promise too
    pending = sam.get(APPROVALS, {"status": "PENDING_APPROVAL"}).json()
    more = sam.get(APPROVALS, {"status": "PENDING_APPROVAL", "cursor": pending["next"]}).json()
    assert len(pending["results"]) + len(more["results"]) == 60
    assert more["next"] is None
    assert_problem(sam.get(APPROVALS, {"cursor": "not-a-cursor"}), 400, "validation_error")


def test_approvals_list_costs_the_same_queries_at_10_and_1000(
    demo, api, django_assert_max_num_queries
):
    # given
    run = factories.run_queue(
        customer=User.objects.get(username="alice"), merchant=demo, message=REFUND
    )
    sam = api("sam")
    bulk_approvals(run, 10)
    with CaptureQueriesContext(connection) as at_10:
        assert sam.get(APPROVALS).status_code == 200
    # (3 of them count the key's requests for its rate limit, in the shared cache)
    assert len(at_10) <= 11, [q["sql"] for q in at_10.captured_queries]

    # when: a thousand
    bulk_approvals(run, 990, start=10)
    assert Approval.objects.count() == 1000

    # then: no more queries than at ten, for every filter
    for params in ({}, {"status": "APPROVED_EXECUTING"}, {"tool": "issue_refund"}):
        with django_assert_max_num_queries(len(at_10)):
            response = sam.get(APPROVALS, params)
        assert response.status_code == 200
        assert len(response.json()["results"]) == 50
        assert {a["decided_by"] for a in response.json()["results"]} >= (
            {"sam", "service:demo-shop"} if params.get("status") else {None}
        )


def test_approval_detail_for_supervisors_of_its_shop_only(refund_waiting, api):
    url = f"{APPROVALS}/{refund_waiting.interrupt_id}"

    response = api("sam").get(url)
    assert response.status_code == 200
    assert set(response.json()) == APPROVAL_FIELDS
    assert response.json()["interrupt_id"] == refund_waiting.interrupt_id
    assert response.json()["status"] == "PENDING_APPROVAL"
    assert parse_datetime(response.json()["expires_at"]) == refund_waiting.approval.expires_at
    assert response.json()["expires_at"].endswith("Z")

    assert api().get(url).status_code == 200
    assert_problem(api("oscar", merchant="other-shop").get(url), 404, "not_found")
    assert_problem(api("sam").get(f"{APPROVALS}/int-0000000000000000"), 404, "not_found")
    assert_problem(api("alice").get(url), 403, "permission_denied")
