"""Every way a run ends leaves what it owns final and honest (DESIGN 6.1's run-end rule): an
approved call whose run was stopped is never executed, and nothing stays open in an inbox."""

from decimal import Decimal

import pytest

from agentportal.models import Membership
from approvals.models import Approval, ApprovalStatus, Order, Refund
from runs import services, worker
from runs.models import AgentRun, ErrorCode, RunEvent, RunStatus
from runs.snapshot import snapshot_parse
from tests.problems import assert_problem

pytestmark = pytest.mark.django_db


def _approve(api, waiting) -> None:
    response = api("sam").post(
        f"/api/v1/approvals/{waiting.interrupt_id}/decision", {"decision": "approve"}, format="json"
    )
    assert response.status_code == 200, response.content


def _types(run) -> list[str]:
    return list(RunEvent.objects.filter(run=run).order_by("seq").values_list("type", flat=True))


def _nothing_paid() -> None:
    assert not Refund.objects.exists()
    assert Order.objects.get(number="ORD-1003").refunded == Decimal("0.00")


def test_an_approved_call_cancelled_before_a_worker_claims_it_is_closed_and_never_paid(
    refund_waiting, api
):
    # given an approved refund whose run is queued again
    _approve(api, refund_waiting)

    # when the customer cancels the run before any worker takes it, then workers look
    cancelled = api("alice").post(f"/api/v1/runs/{refund_waiting.run.pk}/cancel")
    worker.tick()

    # then the call is closed with its cause, nothing was paid, and a late decision is refused
    assert cancelled.status_code == 200
    approval = Approval.objects.get(pk=refund_waiting.approval.pk)
    assert (approval.status, approval.cancel_cause) == (ApprovalStatus.CANCELLED, "run_cancelled")
    _nothing_paid()
    assert _types(refund_waiting.run)[-2:] == ["approval.cancelled", "run.cancelled"]
    notice = RunEvent.objects.get(run=refund_waiting.run, type="approval.cancelled").data["notice"]
    assert notice.startswith("Nothing was done")
    call = snapshot_parse(AgentRun.objects.get(pk=refund_waiting.run.pk).state_snapshot)
    assert call.pending_tool_call.status == "CANCELLED"
    late = api("sue").post(
        f"/api/v1/approvals/{refund_waiting.interrupt_id}/decision",
        {"decision": "approve"},
        format="json",
    )
    assert_problem(late, 409, "run_finished")
    inbox = api("sam").get("/api/v1/approvals?status=APPROVED_EXECUTING").json()
    assert inbox["results"] == []


def test_an_approved_call_whose_run_is_cancelled_after_the_claim_is_never_paid(refund_waiting, api):
    # given an approved refund that a worker has claimed, about to execute it
    _approve(api, refund_waiting)
    [lease] = services.runs_claim(limit=1)

    # when the run is cancelled, and only then the worker goes on with its lease
    services.run_cancel(run=AgentRun.objects.get(pk=lease.run_id), reason="stop")
    worker.run_slices([lease])

    # then the worker committed nothing and moved no money
    _nothing_paid()
    approval = Approval.objects.get(pk=refund_waiting.approval.pk)
    assert (approval.status, approval.cancel_cause) == (ApprovalStatus.CANCELLED, "run_cancelled")
    run = AgentRun.objects.get(pk=refund_waiting.run.pk)
    assert run.status == RunStatus.CANCELLED
    assert _types(run)[-1] == "run.cancelled"


@pytest.mark.parametrize(
    ("tamper", "code", "cause"),
    [
        ("revoke", ErrorCode.APPROVER_REVOKED, "approver_revoked"),
        ("mismatch", ErrorCode.APPROVAL_MISMATCH, "approval_mismatch"),
    ],
)
def test_a_run_failing_before_its_approved_call_executes_closes_the_call(
    refund_waiting, api, tamper, code, cause
):
    # given an approved refund, and something that must stop it before it runs
    _approve(api, refund_waiting)
    if tamper == "revoke":
        Membership.objects.filter(user__username="sam").update(active=False)
    else:
        Approval.objects.filter(pk=refund_waiting.approval.pk).update(args_digest="0" * 64)

    # when a worker takes the run
    worker.tick()

    # then the run failed, the call is closed with that cause, and nothing was paid
    run = AgentRun.objects.get(pk=refund_waiting.run.pk)
    assert (run.status, run.error_code) == (RunStatus.FAILED, code)
    approval = Approval.objects.get(pk=refund_waiting.approval.pk)
    assert (approval.status, approval.cancel_cause) == (ApprovalStatus.CANCELLED, cause)
    _nothing_paid()
    assert _types(run)[-2:] == ["approval.cancelled", "run.failed"]


def test_a_damaged_snapshot_does_not_keep_a_call_open_when_its_run_is_cancelled(
    refund_waiting, api
):
    # given a pending call whose run's snapshot was damaged
    AgentRun.objects.filter(pk=refund_waiting.run.pk).update(state_snapshot={"version": 2})

    # when the run is cancelled, and maintain sweeps afterwards
    assert api("alice").post(f"/api/v1/runs/{refund_waiting.run.pk}/cancel").status_code == 200
    report = services.maintain()

    # then the call left the inbox, closed with the snapshot as its cause
    approval = Approval.objects.get(pk=refund_waiting.approval.pk)
    assert (approval.status, approval.cancel_cause) == (
        ApprovalStatus.CANCELLED,
        "snapshot_invalid",
    )
    assert report["approvals_expire_due"] == 0
    assert api("sam").get("/api/v1/approvals?status=PENDING_APPROVAL").json()["results"] == []


def test_a_completed_run_keeps_its_executed_call(refund_waiting, api):
    _approve(api, refund_waiting)
    worker.tick()

    run = AgentRun.objects.get(pk=refund_waiting.run.pk)
    assert run.status == RunStatus.COMPLETED
    assert Approval.objects.get(pk=refund_waiting.approval.pk).status == ApprovalStatus.EXECUTED
    assert Refund.objects.count() == 1
    assert "approval.cancelled" not in _types(run)
