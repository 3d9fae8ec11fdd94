"""Tool-call decisions over REST (API.md: resume, approvals, problem codes; DESIGN 6.1): the
order of the checks, and 409 and 410 for a call that is not waiting for the decision (another
interrupt, past its expiry, already decided, its run cancelled).

Every run here is the scripted refund: the agent looks ORD-1003 up, proposes issue_refund
(policy: approval) and waits WAITING_APPROVAL; runs.worker.tick() drives it in-process.
"""

from datetime import timedelta

import pytest
import time_machine
from django.utils.dateparse import parse_datetime
from rest_framework.test import APIClient

from approvals.gate.services import approvals_expire_due
from approvals.models import Approval, ApprovalStatus, Refund
from runs import worker
from runs.models import AgentRun, RunStatus, ToolStatus
from tests.approvals.approval_api_helpers import (
    APPROVALS,
    DECISION,
    RESUME,
    _set,
    event_types,
    finish,
    recorded,
    refund_executions,
    snapshot_status,
    tamper_snapshot,
)
from tests.approvals.refund_helpers import refund_run_waiting
from tests.problems import assert_problem

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
