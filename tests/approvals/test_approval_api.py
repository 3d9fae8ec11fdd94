"""Tool-call decisions over REST (API.md: resume, approvals, problem codes; DESIGN 6.1).

Every run here is the scripted refund: the agent looks ORD-1003 up, proposes issue_refund
(policy: approval) and waits WAITING_APPROVAL; runs.worker.tick() drives it in-process.
"""

import json
import uuid
from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal
from typing import Any

import pytest
import time_machine
from django.contrib.auth.models import User
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from django.utils.dateparse import parse_datetime
from rest_framework.test import APIClient

from agentportal.models import ApiKey, Membership, Role
from agentportal.problems import CONTENT_TYPE
from agentportal.services import api_key_create, api_key_revoke, membership_revoke
from approvals.gate.services import approvals_expire_due
from approvals.models import Approval, ApprovalStatus, Order, Refund
from runs import worker
from runs.models import AgentRun, ErrorCode, RunEvent, RunStatus, ToolExecution, ToolStatus
from runs.snapshot import snapshot_parse
from tests import factories
from tests.approvals.refund_helpers import REFUND, Waiting, refund_run_waiting
from tests.problems import assert_problem

APPROVALS = "/api/v1/approvals"
APPROVAL_FIELDS = {
    "required_approvals",
    # whose approvals count: the policy's band's group (README, "Approval policies")
    "required_group",
    "approvals_given",
    "policy",
    "escalated_at",
    # who is on the call (README, "Who is on a call"), added to API.md's representation
    "assigned_to",
    "interrupt_id",
    "run_id",
    "tool_name",
    "proposed_args",
    "approved_args",
    "executed_args",
    "args_digest",
    "status",
    "decision",
    "reason",
    "decided_by",
    "decided_at",
    "expires_at",
    "cancel_cause",
    "result",
    "created_at",
}
PROPOSED = {"order_id": "ORD-1003", "amount": "20.00", "reason": "customer request"}


# --- helpers -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Endpoint:
    """The two doors to one decision: /runs/{id}/resume and /approvals/{id}/decision."""

    name: str

    def url(self, run_id, interrupt_id: str) -> str:
        if self.name == "resume":
            return f"/api/v1/runs/{run_id}/resume"
        return f"/api/v1/approvals/{interrupt_id}/decision"

    def body(self, interrupt_id: str, fields: dict[str, Any]) -> dict[str, Any]:
        return {"interrupt_id": interrupt_id, **fields} if self.name == "resume" else dict(fields)

    def post(self, client, run_id, interrupt_id: str, **fields):
        return client.post(
            self.url(run_id, interrupt_id), self.body(interrupt_id, fields), format="json"
        )

    def post_raw(self, client, run_id, interrupt_id: str, raw: str):
        return client.post(
            self.url(run_id, interrupt_id), data=raw, content_type="application/json"
        )

    @property
    def not_found_code(self) -> str:
        return "run_not_found" if self.name == "resume" else "not_found"


RESUME, DECISION = Endpoint("resume"), Endpoint("decision")


@pytest.fixture(params=[RESUME, DECISION], ids=lambda e: e.name)
def endpoint(request) -> Endpoint:
    return request.param


def error_fields(body: dict) -> list[str]:
    assert isinstance(body.get("errors"), list) and body["errors"], body
    for error in body["errors"]:
        assert set(error) == {"field", "message"}, error
        assert error["message"]
    return [error["field"] for error in body["errors"]]


def event_types(run_id) -> list[str]:
    return list(
        RunEvent.objects.filter(run_id=run_id).order_by("seq").values_list("type", flat=True)
    )


def recorded(waiting: Waiting) -> dict[str, Any]:
    """Everything a refused decision must leave as it was."""
    run = AgentRun.objects.get(pk=waiting.run.pk)
    approval = Approval.objects.get(pk=waiting.approval.pk)
    return {
        "run": (
            run.status,
            run.version,
            run.step,
            run.next_node,
            run.state_snapshot,
            run.last_event_seq,
            run.deadline_at,
            run.updated_at,
        ),
        "approval": (
            approval.status,
            approval.decision,
            approval.reason,
            approval.approved_args,
            approval.args_digest,
            approval.decided_by_id,
            approval.decided_by_key_id,
            approval.decided_at,
            approval.updated_at,
        ),
        "events": list(
            RunEvent.objects.filter(run_id=run.pk)
            .order_by("seq")
            .values_list("seq", "type", "data")
        ),
        "refunds": Refund.objects.count(),
        "executions": ToolExecution.objects.filter(run_id=run.pk).count(),
    }


def snapshot_status(run_id) -> str:
    return snapshot_parse(AgentRun.objects.get(pk=run_id).state_snapshot).pending_tool_call.status


def refund_executions(waiting: Waiting):
    return ToolExecution.objects.filter(idempotency_key=waiting.approval.tool_execution_key)


def finish(waiting: Waiting) -> AgentRun:
    worker.tick()
    return AgentRun.objects.get(pk=waiting.run.pk)


# --- 404 / 403 -----------------------------------------------------------------------------


def test_supervisor_of_another_shop_gets_404_and_nothing_changes(refund_waiting, api, endpoint):
    # given
    before = recorded(refund_waiting)

    # when
    response = endpoint.post(
        api("oscar", merchant="other-shop"),
        refund_waiting.run.pk,
        refund_waiting.interrupt_id,
        decision="approve",
    )

    # then
    assert_problem(response, 404, endpoint.not_found_code)
    assert recorded(refund_waiting) == before


def test_unknown_run_or_interrupt_is_404(refund_waiting, api, endpoint):
    sam = api("sam")
    if endpoint is RESUME:
        response = endpoint.post(sam, uuid.uuid4(), refund_waiting.interrupt_id, decision="approve")
    else:
        response = endpoint.post(
            sam, refund_waiting.run.pk, "int-0000000000000000", decision="approve"
        )
    assert_problem(response, 404, endpoint.not_found_code)


def test_another_customer_gets_404_not_403(refund_waiting, api, endpoint):
    """API.md: runs of another customer answer 404, their existence is not revealed; the
    decision endpoint answers as resume does."""
    before = recorded(refund_waiting)

    response = endpoint.post(
        api("bob"), refund_waiting.run.pk, refund_waiting.interrupt_id, decision="approve"
    )

    assert response.status_code == 404, response.content
    assert response["Content-Type"].startswith(CONTENT_TYPE)
    assert response.json()["code"] in ("run_not_found", "not_found")
    assert recorded(refund_waiting) == before


def test_customer_may_not_decide_on_her_own_run_403(refund_waiting, api, endpoint):
    before = recorded(refund_waiting)

    response = endpoint.post(
        api("alice"), refund_waiting.run.pk, refund_waiting.interrupt_id, decision="approve"
    )

    assert_problem(response, 403, "permission_denied")
    assert recorded(refund_waiting) == before


def _sam_membership_revoked() -> None:
    assert membership_revoke(membership=Membership.objects.get(user__username="sam"))


def _sam_demoted_to_customer() -> None:
    Membership.objects.filter(user__username="sam").update(role=Role.CUSTOMER)


def _sam_deactivated() -> None:
    User.objects.filter(username="sam").update(is_active=False)


@pytest.mark.parametrize(
    "revoke",
    [
        pytest.param(_sam_membership_revoked, id="membership-revoked"),
        pytest.param(_sam_demoted_to_customer, id="demoted-to-customer"),
        pytest.param(_sam_deactivated, id="user-deactivated"),
    ],
)
def test_supervisor_revoked_after_the_pause_can_no_longer_decide(
    refund_waiting, api, endpoint, revoke
):
    # given: sam holds a key, then loses his role while the call waits
    sam = api("sam")
    before = recorded(refund_waiting)
    revoke()

    # when
    response = endpoint.post(
        sam, refund_waiting.run.pk, refund_waiting.interrupt_id, decision="approve"
    )

    # then: refused, and nothing moved
    assert response.status_code in (401, 403, 404), response.content
    assert response["Content-Type"].startswith(CONTENT_TYPE)
    assert recorded(refund_waiting) == before
    assert (
        Approval.objects.get(pk=refund_waiting.approval.pk).status
        == ApprovalStatus.PENDING_APPROVAL
    )
    assert sam.get(APPROVALS).status_code in (401, 403)


# --- 400 -----------------------------------------------------------------------------------

BAD_BODIES = [
    pytest.param({"decision": "maybe"}, "decision", id="unknown-decision"),
    pytest.param({}, "decision", id="decision-missing"),
    pytest.param({"decision": "reject"}, "reason", id="reject-without-reason"),
    pytest.param({"decision": "reject", "reason": "   "}, "reason", id="reject-blank-reason"),
    pytest.param({"decision": "reject", "reason": 7}, "reason", id="reason-number"),
    pytest.param({"decision": "revise"}, "tool_args", id="revise-without-tool-args"),
    pytest.param({"decision": "revise", "tool_args": "amount=5"}, "tool_args", id="args-string"),
    pytest.param(
        {"decision": "revise", "tool_args": {**PROPOSED, "amount": "-5"}},
        "tool_args.amount",
        id="revise-negative-amount",
    ),
    pytest.param(
        {"decision": "revise", "tool_args": {**PROPOSED, "amount": "lots"}},
        "tool_args.amount",
        id="revise-amount-not-a-number",
    ),
    pytest.param(
        {"decision": "revise", "tool_args": {**PROPOSED, "amount": "1.234"}},
        "tool_args.amount",
        id="revise-amount-three-decimals",
    ),
    pytest.param(
        {"decision": "revise", "tool_args": {**PROPOSED, "coupon": "FREE"}},
        "tool_args.coupon",
        id="revise-unknown-arg",
    ),
    pytest.param(
        {"decision": "revise", "tool_args": {"amount": "5.00", "reason": "x"}},
        "tool_args.order_id",
        id="revise-missing-arg",
    ),
    pytest.param(
        {"decision": "revise", "tool_args": {**PROPOSED, "order_id": "1003"}},
        "tool_args.order_id",
        id="revise-bad-order-id",
    ),
    pytest.param(
        {"decision": "approve", "tool_args": PROPOSED}, "tool_args", id="approve-with-tool-args"
    ),
    pytest.param(
        {"decision": "approve", "decided_by": "sue"}, "decided_by", id="unknown-field-decided-by"
    ),
]


@pytest.mark.parametrize(("body", "field"), BAD_BODIES)
def test_bad_body_is_400_validation_error_naming_the_field(
    refund_waiting, api, endpoint, body, field
):
    # given
    before = recorded(refund_waiting)

    # when
    response = endpoint.post(api("sam"), refund_waiting.run.pk, refund_waiting.interrupt_id, **body)

    # then
    problem = assert_problem(response, 400, "validation_error")
    assert field in error_fields(problem), problem
    assert recorded(refund_waiting) == before


@pytest.mark.parametrize(
    "raw",
    ['{"decision": "approve"', "", "[1, 2]", '"approve"'],
    ids=["cut", "empty", "list", "str"],
)
def test_malformed_json_is_400_validation_error(refund_waiting, api, endpoint, raw):
    before = recorded(refund_waiting)

    response = endpoint.post_raw(
        api("sam"), refund_waiting.run.pk, refund_waiting.interrupt_id, raw
    )

    assert_problem(response, 400, "validation_error")
    assert recorded(refund_waiting) == before


def test_resume_without_interrupt_id_is_400(refund_waiting, api):
    response = api("sam").post(
        RESUME.url(refund_waiting.run.pk, ""), {"decision": "approve"}, format="json"
    )
    assert "interrupt_id" in error_fields(assert_problem(response, 400, "validation_error"))


# --- 422 -----------------------------------------------------------------------------------


def _set(path: str, value: Any):
    def tamper(snapshot: dict) -> dict:
        *parents, last = path.split(".")
        node = snapshot
        for name in parents:
            node = node[name]
        node[last] = value
        return snapshot

    return tamper


def _drop(path: str):
    def tamper(snapshot: dict) -> dict:
        *parents, last = path.split(".")
        node = snapshot
        for name in parents:
            node = node[name]
        del node[last]
        return snapshot

    return tamper


TAMPERED = [
    pytest.param(_set("version", 1), "snapshot_version_unsupported", id="version-1"),
    pytest.param(_set("version", 4), "snapshot_version_unsupported", id="version-4"),
    # version 3 holds several calls (pending_tool_calls): a v2 body under it is invalid
    pytest.param(_set("version", 3), "snapshot_invalid", id="version-3-with-one-call"),
    pytest.param(_set("version", "2"), "snapshot_version_unsupported", id="version-string"),
    pytest.param(_drop("version"), "snapshot_version_unsupported", id="version-missing"),
    pytest.param(_drop("pending_tool_call.expires_at"), "snapshot_invalid", id="no-expires-at"),
    pytest.param(_drop("run_context"), "snapshot_invalid", id="no-run-context"),
    pytest.param(_drop("pending_tool_call"), "snapshot_invalid", id="no-pending-call"),
    pytest.param(
        _set("pending_tool_call.tool_args", '{"amount": "20.00"}'),
        "snapshot_invalid",
        id="tool-args-string",
    ),
    pytest.param(
        _set("pending_tool_call.expires_at", "next tuesday"), "snapshot_invalid", id="bad-date"
    ),
    # v2 times are UTC ("...Z"): a time without a zone cannot be compared with now
    pytest.param(
        _set("pending_tool_call.expires_at", "2026-03-03T12:00:00"),
        "snapshot_invalid",
        id="naive-expires-at",
    ),
    pytest.param(_set("pending_tool_call.status", "WAITING"), "snapshot_invalid", id="bad-status"),
    pytest.param(_set("pending_tool_call.decision", "maybe"), "snapshot_invalid", id="bad-dec"),
    pytest.param(_set("pending_tool_call.interrupt_id", 7), "snapshot_invalid", id="id-number"),
    pytest.param(_set("run_context.run_id", None), "snapshot_invalid", id="run-id-null"),
    pytest.param(_set("extra", {"x": 1}), "snapshot_invalid", id="extra-field"),
    pytest.param(lambda snapshot: ["not", "an", "object"], "snapshot_invalid", id="a-list"),
]


def tamper_snapshot(run: AgentRun, tamper) -> None:
    snapshot = json.loads(json.dumps(AgentRun.objects.get(pk=run.pk).state_snapshot))
    AgentRun.objects.filter(pk=run.pk).update(state_snapshot=tamper(snapshot))


@pytest.mark.parametrize(("tamper", "code"), TAMPERED)
def test_tampered_snapshot_is_422_and_nothing_changes(refund_waiting, api, endpoint, tamper, code):
    # given: the stored snapshot is not an exact v2 snapshot any more
    tamper_snapshot(refund_waiting.run, tamper)
    before = recorded(refund_waiting)

    # when
    response = endpoint.post(
        api("sam"), refund_waiting.run.pk, refund_waiting.interrupt_id, decision="approve"
    )

    # then
    assert_problem(response, 422, code)
    assert recorded(refund_waiting) == before


# --- the order of the checks (API.md resume: 404, 403, 400, 422, 409, 410, 409) -----------


def test_customer_of_another_shop_with_a_bad_body_gets_404_first(refund_waiting, api):
    response = RESUME.post(
        api("olga", merchant="other-shop"),
        refund_waiting.run.pk,
        refund_waiting.interrupt_id,
        decision="x",
    )
    assert_problem(response, 404, "run_not_found")


def test_customer_with_a_bad_body_gets_403_before_400(refund_waiting, api, endpoint):
    response = endpoint.post(
        api("alice"), refund_waiting.run.pk, refund_waiting.interrupt_id, decision="x"
    )
    assert_problem(response, 403, "permission_denied")


def test_bad_body_is_refused_400_before_the_snapshot_is_read(refund_waiting, api):
    tamper_snapshot(refund_waiting.run, _set("version", 1))

    response = RESUME.post(
        api("sam"), refund_waiting.run.pk, refund_waiting.interrupt_id, decision="reject"
    )

    assert_problem(response, 400, "validation_error")


def test_invalid_snapshot_is_422_before_interrupt_mismatch(refund_waiting, api):
    tamper_snapshot(refund_waiting.run, _set("pending_tool_call.expires_at", "soon"))

    response = RESUME.post(
        api("sam"), refund_waiting.run.pk, "int-0000000000000000", decision="approve"
    )

    assert_problem(response, 422, "snapshot_invalid")


def test_interrupt_mismatch_on_a_due_call_is_409_and_does_not_expire_it(refund_waiting, api):
    before = recorded(refund_waiting)
    sam = api("sam")

    with time_machine.travel(refund_waiting.approval.expires_at + timedelta(seconds=1)):
        response = RESUME.post(
            sam, refund_waiting.run.pk, "int-0000000000000000", decision="approve"
        )

    assert_problem(response, 409, "interrupt_mismatch")
    assert recorded(refund_waiting) == before


@pytest.mark.parametrize(
    "authorization",
    [None, "Bearer ap_nope_nope", "Basic c2FtOmRlbW8="],
    ids=["none", "unknown-key", "not-bearer"],
)
def test_missing_or_bad_credentials_are_401_with_bearer_challenge(
    refund_waiting, endpoint, authorization
):
    client = APIClient()
    if authorization:
        client.credentials(HTTP_AUTHORIZATION=authorization)
    before = recorded(refund_waiting)

    response = endpoint.post(
        client, refund_waiting.run.pk, refund_waiting.interrupt_id, decision="approve"
    )

    assert_problem(response, 401, "not_authenticated")
    assert response["WWW-Authenticate"].startswith("Bearer")
    assert recorded(refund_waiting) == before


@pytest.mark.parametrize(
    "tamper",
    [
        pytest.param(_set("pending_tool_call.tool_args", "x"), id="tool-args-string"),
        pytest.param(_set("version", 1), id="version-1"),
        pytest.param(
            _set("pending_tool_call.expires_at", "2026-03-03T12:00:00"), id="naive-expires-at"
        ),
    ],
)
def test_sweeper_and_worker_leave_run_with_invalid_snapshot_to_an_operator(refund_waiting, tamper):
    # given: a tampered snapshot on a call that is due, and another run's call, due and sound
    sound = refund_run_waiting("I want a refund for ORD-1001 amount 10")
    tamper_snapshot(refund_waiting.run, tamper)
    before = recorded(refund_waiting)

    # when
    with time_machine.travel(refund_waiting.approval.expires_at + timedelta(minutes=1)):
        expired = approvals_expire_due()
        worker.tick()

    # then: the tampered one is neither expired nor failed behind anyone's back, and it does
    # not keep the sweep from expiring the sound one
    assert expired == 1
    assert recorded(refund_waiting) == before
    assert Approval.objects.get(pk=sound.approval.pk).status == ApprovalStatus.EXPIRED
    assert AgentRun.objects.get(pk=sound.run.pk).status == RunStatus.COMPLETED


# --- 409 / 410 -----------------------------------------------------------------------------


def test_decision_for_another_interrupt_is_409_interrupt_mismatch(refund_waiting, api, endpoint):
    before = recorded(refund_waiting)
    sam = api("sam")

    if endpoint is RESUME:
        response = RESUME.post(
            sam, refund_waiting.run.pk, "int-0000000000000000", decision="approve"
        )
    else:
        response = sam.post(
            DECISION.url(refund_waiting.run.pk, refund_waiting.interrupt_id),
            {"interrupt_id": "int-0000000000000000", "decision": "approve"},
            format="json",
        )

    assert_problem(response, 409, "interrupt_mismatch")
    assert recorded(refund_waiting) == before


def test_decision_past_expiry_is_410_and_expires_the_call_anyway(refund_waiting, api, endpoint):
    # given: nobody swept the call, but it is due
    sam = api("sam")
    with time_machine.travel(refund_waiting.approval.expires_at + timedelta(seconds=1)):
        # when
        response = endpoint.post(
            sam, refund_waiting.run.pk, refund_waiting.interrupt_id, decision="approve"
        )

        # then: refused, yet the expiry was committed
        assert_problem(response, 410, "interrupt_expired")
        approval = Approval.objects.get(pk=refund_waiting.approval.pk)
        assert approval.status == ApprovalStatus.EXPIRED
        assert approval.decided_by_id is None and approval.decision == ""
        run = AgentRun.objects.get(pk=refund_waiting.run.pk)
        assert run.status == RunStatus.QUEUED
        assert snapshot_status(run.pk) == ApprovalStatus.EXPIRED
        types = event_types(run.pk)
        assert types.count("approval.expired") == 1
        assert "approval.decided" not in types
        assert sam.get(f"/api/v1/runs/{run.pk}").json()["pending"] == []

        # and a second try is 410 again
        again = endpoint.post(
            sam, refund_waiting.run.pk, refund_waiting.interrupt_id, decision="approve"
        )
        assert_problem(again, 410, "interrupt_expired")

        # and the model tells the customer nothing was refunded
        run = finish(refund_waiting)
    assert run.status == RunStatus.COMPLETED, (run.status, run.error_code, run.error_detail)
    assert "in time" in run.result
    assert Refund.objects.count() == 0
    assert refund_executions(refund_waiting).get().status == ToolStatus.FAILED


def test_decision_on_call_the_sweeper_expired_is_410(refund_waiting, api, endpoint):
    with time_machine.travel(refund_waiting.approval.expires_at + timedelta(seconds=1)):
        assert approvals_expire_due() == 1

    response = endpoint.post(
        api("sue"), refund_waiting.run.pk, refund_waiting.interrupt_id, decision="approve"
    )

    assert_problem(response, 410, "interrupt_expired")
    assert Approval.objects.get(pk=refund_waiting.approval.pk).status == ApprovalStatus.EXPIRED
    assert event_types(refund_waiting.run.pk).count("approval.expired") == 1


def test_second_decision_is_409_already_decided_naming_the_first(refund_waiting, api, endpoint):
    # given: sam approved
    first = endpoint.post(
        api("sam"), refund_waiting.run.pk, refund_waiting.interrupt_id, decision="approve"
    )
    assert first.status_code == 200, first.content
    before = recorded(refund_waiting)

    # when: sue rejects afterwards
    response = endpoint.post(
        api("sue"),
        refund_waiting.run.pk,
        refund_waiting.interrupt_id,
        decision="reject",
        reason="too much",
    )

    # then
    problem = assert_problem(response, 409, "already_decided")
    approval = Approval.objects.get(pk=refund_waiting.approval.pk)
    assert problem["decided_by"] == "sam"
    assert problem["decision"] == "approve"
    assert parse_datetime(problem["decided_at"]) == approval.decided_at
    assert recorded(refund_waiting) == before

    # and after the worker executed it, still already_decided
    assert finish(refund_waiting).status == RunStatus.COMPLETED
    late = endpoint.post(
        api("sue"), refund_waiting.run.pk, refund_waiting.interrupt_id, decision="approve"
    )
    assert assert_problem(late, 409, "already_decided")["decided_by"] == "sam"


def test_already_decided_problem_gives_decided_at_in_utc_with_z(refund_waiting, api):
    """API.md conventions: times are ISO 8601 UTC with Z, extension members included."""
    first = RESUME.post(
        api("sam"), refund_waiting.run.pk, refund_waiting.interrupt_id, decision="approve"
    )
    assert first.status_code == 200

    problem = assert_problem(
        RESUME.post(
            api("sue"), refund_waiting.run.pk, refund_waiting.interrupt_id, decision="approve"
        ),
        409,
        "already_decided",
    )

    assert problem["decided_at"] == first.json()["approval"]["decided_at"]
    assert problem["decided_at"].endswith("Z")


def test_decided_call_past_its_expiry_is_already_decided_not_expired(refund_waiting, api):
    assert (
        RESUME.post(
            api("sam"), refund_waiting.run.pk, refund_waiting.interrupt_id, decision="approve"
        ).status_code
        == 200
    )

    with time_machine.travel(refund_waiting.approval.expires_at + timedelta(minutes=5)):
        response = RESUME.post(
            api("sue"), refund_waiting.run.pk, refund_waiting.interrupt_id, decision="approve"
        )
        assert approvals_expire_due() == 0

    assert_problem(response, 409, "already_decided")
    assert (
        Approval.objects.get(pk=refund_waiting.approval.pk).status
        == ApprovalStatus.APPROVED_EXECUTING
    )


def test_decision_after_cancel_is_409_run_finished(refund_waiting, api, endpoint):
    # given: sam cancels the waiting run
    sam = api("sam")
    cancelled = sam.post(f"/api/v1/runs/{refund_waiting.run.pk}/cancel")
    assert cancelled.status_code == 200, cancelled.content
    assert cancelled.json()["status"] == "CANCELLED"
    assert cancelled.json()["pending"] == []

    # then: the call is closed with its run
    assert Approval.objects.get(pk=refund_waiting.approval.pk).status == ApprovalStatus.CANCELLED
    assert snapshot_status(refund_waiting.run.pk) == ApprovalStatus.CANCELLED
    before = recorded(refund_waiting)

    # when
    response = endpoint.post(
        sam, refund_waiting.run.pk, refund_waiting.interrupt_id, decision="approve"
    )

    # then
    assert_problem(response, 409, "run_finished")
    assert recorded(refund_waiting) == before
    assert_problem(sam.post(f"/api/v1/runs/{refund_waiting.run.pk}/cancel"), 409, "run_finished")
    listed = sam.get(APPROVALS, {"status": "PENDING_APPROVAL"}).json()["results"]
    assert refund_waiting.interrupt_id not in [a["interrupt_id"] for a in listed]
    assert worker.tick() == 0
    assert Refund.objects.count() == 0


# --- decisions that succeed ----------------------------------------------------------------


def test_approve_requeues_run_and_worker_refunds_once(refund_waiting, api, endpoint):
    # when
    response = endpoint.post(
        api("sam"), refund_waiting.run.pk, refund_waiting.interrupt_id, decision="approve"
    )

    # then: the answer
    assert response.status_code == 200, response.content
    body = response.json()
    assert set(body) == {"run", "approval"}
    assert body["run"]["id"] == str(refund_waiting.run.pk)
    assert body["run"]["status"] == "QUEUED"
    assert body["run"]["pending"] == []
    approval = body["approval"]
    assert set(approval) == APPROVAL_FIELDS
    assert approval["status"] == "APPROVED_EXECUTING"
    assert approval["decision"] == "approve"
    assert approval["decided_by"] == "sam"
    assert approval["proposed_args"] == approval["approved_args"] == PROPOSED
    assert len(approval["args_digest"]) == 64
    assert approval["executed_args"] is None

    # when: a worker continues the run
    run = finish(refund_waiting)

    # then
    assert run.status == RunStatus.COMPLETED, (run.status, run.error_code, run.error_detail)
    assert "Done: a refund of 20.00" in run.result
    refund = Refund.objects.get()
    assert refund.amount == Decimal("20.00")
    assert refund.idempotency_key == refund_waiting.approval.tool_execution_key
    assert Order.objects.get(number="ORD-1003").refunded == Decimal("20.00")
    approval = Approval.objects.get(pk=refund_waiting.approval.pk)
    assert approval.status == ApprovalStatus.EXECUTED
    assert approval.executed_args == approval.approved_args == approval.proposed_args
    assert snapshot_status(run.pk) == ApprovalStatus.EXECUTED
    execution = refund_executions(refund_waiting).get()
    assert execution.status == ToolStatus.SUCCEEDED
    assert execution.args == approval.approved_args
    assert event_types(run.pk).count("approval.decided") == 1
    assert worker.tick() == 0
    assert Refund.objects.count() == 1


def test_service_key_decision_is_recorded_as_the_service(refund_waiting, api):
    response = RESUME.post(
        api(), refund_waiting.run.pk, refund_waiting.interrupt_id, decision="approve"
    )

    assert response.status_code == 200, response.content
    assert response.json()["approval"]["decided_by"] == "service:demo-shop"
    approval = Approval.objects.get(pk=refund_waiting.approval.pk)
    assert approval.decided_by_id is None and approval.decided_by_key_id is not None
    assert finish(refund_waiting).status == RunStatus.COMPLETED
    assert Refund.objects.count() == 1


def test_revise_executes_exactly_the_revised_arguments(refund_waiting, api, endpoint):
    revised = {"order_id": "ORD-1003", "amount": "15.00", "reason": "partial refund"}

    response = endpoint.post(
        api("sue"),
        refund_waiting.run.pk,
        refund_waiting.interrupt_id,
        decision="revise",
        tool_args=revised,
    )
    assert response.status_code == 200, response.content
    assert response.json()["approval"]["approved_args"] == revised
    assert response.json()["approval"]["proposed_args"] == PROPOSED
    run = finish(refund_waiting)

    assert run.status == RunStatus.COMPLETED, (run.status, run.error_code, run.error_detail)
    assert "15.00" in run.result
    approval = Approval.objects.get(pk=refund_waiting.approval.pk)
    assert approval.status == ApprovalStatus.EXECUTED
    assert approval.decision == "revise"
    assert approval.executed_args == approval.approved_args == revised
    assert approval.approved_args != approval.proposed_args
    assert approval.proposed_args == PROPOSED
    refund = Refund.objects.get()
    assert (refund.amount, refund.reason) == (Decimal("15.00"), "partial refund")
    assert refund_executions(refund_waiting).get().args == revised
    decided = RunEvent.objects.get(run=run, type="approval.decided").data
    assert decided["decision"] == "revise" and decided["tool_args"] == revised


def test_revise_to_another_customers_order_is_refused_before_anything_is_recorded(
    refund_waiting, api
):
    # given: a supervisor edits the order to one of bob's
    revised = {"order_id": "ORD-2001", "amount": "20.00", "reason": "customer request"}
    response = RESUME.post(
        api("sam"),
        refund_waiting.run.pk,
        refund_waiting.interrupt_id,
        decision="revise",
        tool_args=revised,
    )

    # then: 400 beside the order; the call still waits and nothing moves
    assert response.status_code == 400, response.content
    assert [error["field"] for error in response.json()["errors"]] == ["tool_args.order_id"]
    assert (
        Approval.objects.get(pk=refund_waiting.approval.pk).status
        == ApprovalStatus.PENDING_APPROVAL
    )
    assert Refund.objects.count() == 0
    assert Order.objects.get(number="ORD-2001").refunded == Decimal("0.00")


def test_reject_reason_reaches_the_customer(refund_waiting, api, endpoint):
    reason = "Refunds of T-shirts need the receipt"

    response = endpoint.post(
        api("sam"),
        refund_waiting.run.pk,
        refund_waiting.interrupt_id,
        decision="reject",
        reason=reason,
    )
    assert response.status_code == 200, response.content
    assert response.json()["approval"]["status"] == "REJECTED"
    assert response.json()["approval"]["reason"] == reason
    assert response.json()["approval"]["approved_args"] is None
    run = finish(refund_waiting)

    assert run.status == RunStatus.COMPLETED
    assert reason in run.result
    assert Refund.objects.count() == 0
    assert Approval.objects.get(pk=refund_waiting.approval.pk).status == ApprovalStatus.REJECTED
    assert snapshot_status(run.pk) == ApprovalStatus.REJECTED
    execution = refund_executions(refund_waiting).get()
    assert execution.status == ToolStatus.FAILED
    assert execution.result["reason"] == reason


def test_run_shows_its_pending_approval_while_waiting_and_none_after(refund_waiting, api):
    # given
    sam, alice = api("sam"), api("alice")
    url = f"/api/v1/runs/{refund_waiting.run.pk}"

    # then: supervisor and customer see what the run waits for
    for client in (sam, alice):
        body = client.get(url).json()
        assert body["status"] == "WAITING_APPROVAL"
        [pending] = body["pending"]
        assert pending["interrupt_id"] == refund_waiting.interrupt_id
        assert pending["kind"] == "approval"
        assert pending["tool_name"] == "issue_refund"
        assert pending["tool_args"] == PROPOSED
        assert parse_datetime(pending["expires_at"]) == refund_waiting.approval.expires_at
        assert pending["expires_at"].endswith("Z")
        assert pending["ticket_id"] is None and pending["question"] is None

    # when / then: decided, then finished
    decided = RESUME.post(
        sam, refund_waiting.run.pk, refund_waiting.interrupt_id, decision="approve"
    )
    assert decided.status_code == 200
    assert sam.get(url).json()["pending"] == []
    finish(refund_waiting)
    body = alice.get(url).json()
    assert body["status"] == "COMPLETED" and body["pending"] == []


# --- what the worker re-checks after the decision ------------------------------------------


def _revoke_membership(approval: Approval) -> None:
    assert membership_revoke(membership=Membership.objects.get(user=approval.decided_by))


def _deactivate_user(approval: Approval) -> None:
    User.objects.filter(pk=approval.decided_by_id).update(is_active=False)


def _demote(approval: Approval) -> None:
    Membership.objects.filter(user=approval.decided_by).update(role=Role.CUSTOMER)


def _revoke_key(approval: Approval) -> None:
    api_key_revoke(api_key=ApiKey.objects.get(pk=approval.decided_by_key_id))


@pytest.mark.parametrize(
    ("who", "revoke"),
    [
        pytest.param("sam", _revoke_membership, id="membership-revoked"),
        pytest.param("sam", _deactivate_user, id="user-deactivated"),
        pytest.param("sam", _demote, id="demoted-to-customer"),
        pytest.param(None, _revoke_key, id="service-key-revoked"),
    ],
)
def test_approver_revoked_before_execution_fails_run_with_approver_revoked(
    refund_waiting, api, who, revoke
):
    # given: approved, then the approver loses the role before a worker executes it
    response = RESUME.post(
        api(who), refund_waiting.run.pk, refund_waiting.interrupt_id, decision="approve"
    )
    assert response.status_code == 200, response.content
    revoke(Approval.objects.get(pk=refund_waiting.approval.pk))

    # when
    run = finish(refund_waiting)

    # then
    assert run.status == RunStatus.FAILED
    assert run.error_code == ErrorCode.APPROVER_REVOKED
    assert Refund.objects.count() == 0
    assert Order.objects.get(number="ORD-1003").refunded == Decimal("0.00")
    assert not refund_executions(refund_waiting).exists()
    assert Approval.objects.get(pk=refund_waiting.approval.pk).status != ApprovalStatus.EXECUTED
    assert event_types(run.pk)[-1] == "run.failed"


def _approved_args_changed(waiting: Waiting) -> None:
    Approval.objects.filter(pk=waiting.approval.pk).update(
        approved_args={**PROPOSED, "amount": "59.00"}
    )


def _digest_changed(waiting: Waiting) -> None:
    Approval.objects.filter(pk=waiting.approval.pk).update(args_digest="0" * 64)


def _snapshot_args_changed(waiting: Waiting) -> None:
    tamper_snapshot(waiting.run, _set("pending_tool_call.tool_args.amount", "59.00"))


@pytest.mark.parametrize(
    "change",
    [
        pytest.param(_approved_args_changed, id="approved-args"),
        pytest.param(_digest_changed, id="digest"),
        pytest.param(_snapshot_args_changed, id="snapshot-args"),
    ],
)
def test_arguments_changed_behind_the_service_fail_run_with_approval_mismatch(
    refund_waiting, api, change
):
    # given: approved, then the arguments are edited in the database behind the service
    response = RESUME.post(
        api("sam"), refund_waiting.run.pk, refund_waiting.interrupt_id, decision="approve"
    )
    assert response.status_code == 200
    change(refund_waiting)

    # when
    run = finish(refund_waiting)

    # then
    assert run.status == RunStatus.FAILED
    assert run.error_code == ErrorCode.APPROVAL_MISMATCH
    assert Refund.objects.count() == 0
    assert Order.objects.get(number="ORD-1003").refunded == Decimal("0.00")
    assert not refund_executions(refund_waiting).exists()


def test_refund_over_what_is_left_after_approval_completes_without_refund(refund_waiting, api):
    # given: approved; then the order is mostly refunded elsewhere (59.00 total, 50.00 gone)
    response = RESUME.post(
        api("sam"), refund_waiting.run.pk, refund_waiting.interrupt_id, decision="approve"
    )
    assert response.status_code == 200
    Order.objects.filter(number="ORD-1003").update(refunded=Decimal("50.00"))

    # when
    run = finish(refund_waiting)

    # then: the customer is told it did not go through; nothing was paid
    assert run.status == RunStatus.COMPLETED, (run.status, run.error_code, run.error_detail)
    assert "could not be made" in run.result
    assert Refund.objects.count() == 0
    assert Order.objects.get(number="ORD-1003").refunded == Decimal("50.00")
    assert refund_executions(refund_waiting).get().status == ToolStatus.FAILED


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
