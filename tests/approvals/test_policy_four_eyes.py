"""A call at or over the policy's four-eyes threshold needs two different supervisors."""

from decimal import Decimal

import pytest

from approvals.models import ApprovalStatus, ApprovalVote, Refund
from runs import worker
from runs.models import AgentRun, RunEvent, RunStatus
from tests.approvals.policy_helpers import approval_of, policy_set, refund_run, seen

pytestmark = pytest.mark.django_db(transaction=True)


def decide(client, run, approval, decision="approve", **body):
    return client.post(
        f"/api/v1/runs/{run.pk}/resume",
        {
            "interrupt_id": approval.interrupt_id,
            "decision": decision,
            **seen(approval, decision, body),
        },
        format="json",
    )


def test_two_different_supervisors_execute_it_once(large_refund, api):
    run, approval = large_refund.run, large_refund
    assert approval.required_approvals == 2

    # when: sam approves
    first = decide(api("sam"), run, approval)

    # then: 200, still pending with one approval given, the customer still waiting
    assert first.status_code == 200, first.json()
    body = first.json()["approval"]
    assert body["status"] == "PENDING_APPROVAL"
    assert body["required_approvals"] == 2
    assert [given["by"] for given in body["approvals_given"]] == ["sam"]
    assert body["approvals_given"][0]["decision"] == "approve"
    assert body["decided_by"] is None
    assert AgentRun.objects.get(pk=run.pk).status == RunStatus.WAITING_APPROVAL
    assert RunEvent.objects.filter(run=run, type="approval.approval_given").count() == 1

    # when: sam approves again
    again = decide(api("sam"), run, approval)

    # then: 409 same_approver, nothing changed
    assert again.status_code == 409
    assert again.json()["code"] == "same_approver"
    assert ApprovalVote.objects.filter(approval=approval).count() == 1

    # when: sue approves, and a worker continues
    second = decide(api("sue"), run, approval)
    assert second.status_code == 200, second.json()
    body = second.json()["approval"]
    assert body["status"] == "APPROVED_EXECUTING"
    assert body["decided_by"] == "sue"
    assert [given["by"] for given in body["approvals_given"]] == ["sam", "sue"]
    worker.tick()

    # then: executed once, for 500.00
    run.refresh_from_db()
    assert run.status == RunStatus.COMPLETED, (run.status, run.error_code, run.error_detail)
    assert Refund.objects.get().amount == Decimal("500.00")
    approval.refresh_from_db()
    assert approval.status == ApprovalStatus.EXECUTED


def test_a_revise_resets_the_count_and_the_second_person_approves_the_revision(large_refund, api):
    run, approval = large_refund.run, large_refund
    revised = {"order_id": "ORD-9001", "amount": "350.00", "reason": "partly used"}

    # when: sam revises, then approves his own revision
    first = decide(api("sam"), run, approval, "revise", tool_args=revised)
    own = decide(api("sam"), run, approval)

    # then: the revision counts as his approval; his second is refused
    assert first.status_code == 200, first.json()
    assert first.json()["approval"]["status"] == "PENDING_APPROVAL"
    assert first.json()["approval"]["approved_args"] == revised
    assert own.status_code == 409 and own.json()["code"] == "same_approver"

    # when: sue approves
    second = decide(api("sue"), run, approval)
    worker.tick()

    # then: the revised arguments ran, approved by both
    assert second.status_code == 200
    body = second.json()["approval"]
    assert body["decision"] == "revise" and body["decided_by"] == "sue"
    assert [(g["by"], g["decision"]) for g in body["approvals_given"]] == [
        ("sam", "revise"),
        ("sue", "approve"),
    ]
    assert Refund.objects.get().amount == Decimal("350.00")
    approval.refresh_from_db()
    assert approval.executed_args == revised


def test_a_revise_after_a_first_approval_needs_another_approval_of_the_revision(large_refund, api):
    run, approval = large_refund.run, large_refund
    revised = {"order_id": "ORD-9001", "amount": "300.00", "reason": "partly used"}

    # when: sam approves the model's arguments, then sue revises them
    decide(api("sam"), run, approval)
    revise = decide(api("sue"), run, approval, "revise", tool_args=revised)

    # then: still pending: sam's approval was for other arguments
    assert revise.status_code == 200
    body = revise.json()["approval"]
    assert body["status"] == "PENDING_APPROVAL"
    assert [g["by"] for g in body["approvals_given"]] == ["sue"]

    # when: sam approves the revision
    final = decide(api("sam"), run, approval)
    worker.tick()

    # then: the revision is executed
    assert final.json()["approval"]["status"] == "APPROVED_EXECUTING"
    assert Refund.objects.get().amount == Decimal("300.00")


def test_a_reject_by_the_second_person_ends_it(large_refund, api):
    run, approval = large_refund.run, large_refund

    decide(api("sam"), run, approval)
    rejected = decide(api("sue"), run, approval, "reject", reason="too much")
    worker.tick()

    assert rejected.status_code == 200
    assert rejected.json()["approval"]["status"] == "REJECTED"
    run.refresh_from_db()
    assert run.status == RunStatus.COMPLETED
    assert "too much" in run.result
    assert not Refund.objects.exists()


def test_a_refund_under_the_threshold_needs_one_person(demo, api):
    policy_set(demo, two_approvers_from="200.00")
    run = refund_run(demo, "20")
    approval = approval_of(run)

    response = decide(api("sam"), run, approval)

    assert approval.required_approvals == 1
    assert response.json()["approval"]["status"] == "APPROVED_EXECUTING"
    assert [g["by"] for g in response.json()["approval"]["approvals_given"]] == ["sam"]


def test_a_policy_change_does_not_change_what_a_pending_call_needs(large_refund, api, demo):
    run, approval = large_refund.run, large_refund

    # when: the shop raises the threshold above the pending amount
    policy = policy_set(demo, two_approvers_from="1000.00")

    # then: the pending call still needs two, under version 1
    assert policy.current.version == 2
    response = decide(api("sam"), run, approval)
    body = response.json()["approval"]
    assert body["status"] == "PENDING_APPROVAL"
    assert body["required_approvals"] == 2
    assert body["policy"]["version"] == 1
