"""Tool-call decisions over REST that succeed (API.md: resume, approvals; DESIGN 6.1), and
what the worker re-checks after the decision, before it executes the call.

Every run here is the scripted refund: the agent looks ORD-1003 up, proposes issue_refund
(policy: approval) and waits WAITING_APPROVAL; runs.worker.tick() drives it in-process.
"""

from decimal import Decimal

import pytest
from django.contrib.auth.models import User
from django.utils.dateparse import parse_datetime

from agentportal.models import ApiKey, Membership, Role
from agentportal.services import api_key_revoke, membership_revoke
from approvals.models import Approval, ApprovalStatus, Order, Refund
from runs import worker
from runs.models import ErrorCode, RunEvent, RunStatus, ToolStatus
from tests.approvals.approval_api_helpers import (
    APPROVAL_FIELDS,
    PROPOSED,
    RESUME,
    _set,
    event_types,
    finish,
    refund_executions,
    snapshot_status,
    tamper_snapshot,
)
from tests.approvals.refund_helpers import Waiting

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
