"""A call at or under the policy's auto-approval limit is decided by the rule, at once."""

from decimal import Decimal

import pytest

from approvals.models import ApprovalStatus, Refund
from runs.models import RunEvent, RunStatus
from tests.approvals.policy_helpers import approval_of, policy_set, refund_run

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_small_refund_completes_without_any_person(demo, api, mailoutbox):
    # given: refunds up to 10.00 need nobody
    policy = policy_set(demo, auto_approve_up_to="10.00")

    # when: alice asks for 5.00
    run = refund_run(demo, "5")

    # then: the run completed with one refund, decided by the policy's version 1
    assert run.status == RunStatus.COMPLETED, (run.status, run.error_code, run.error_detail)
    assert Refund.objects.filter(order__number="ORD-1003").get().amount == Decimal("5.00")
    approval = approval_of(run)
    assert approval.status == ApprovalStatus.EXECUTED
    assert approval.decided_by is None and approval.decided_by_policy
    assert approval.policy_version.version == 1
    assert approval.executed_args == approval.approved_args == approval.proposed_args
    body = api("sam").get(f"/api/v1/approvals/{approval.interrupt_id}").json()
    assert body["decided_by"] == f"policy:{policy.pk}@1"
    assert body["decision"] == "approve"
    assert body["policy"] == {"id": policy.pk, "version": 1}
    assert body["required_approvals"] == 1 and body["approvals_given"] == []
    decided = RunEvent.objects.get(run=run, type="approval.decided").data
    assert decided["by_policy"] is True and decided["decided_by"] == f"policy:{policy.pk}@1"
    assert RunEvent.objects.filter(run=run, type="approval.requested").count() == 1
    # nothing reached a person: no inbox item, no email to the supervisors
    assert not api("sam").get("/api/v1/approvals?status=PENDING_APPROVAL").json()["results"]
    assert not [m for m in mailoutbox if "Approval needed" in m.subject]


def test_a_refund_over_the_limit_waits_for_a_person(demo):
    # given: the same policy
    policy_set(demo, auto_approve_up_to="10.00")

    # when: alice asks for 10.01
    run = refund_run(demo, "10.01")

    # then: it waits, for one person
    assert run.status == RunStatus.WAITING_APPROVAL
    approval = approval_of(run)
    assert approval.status == ApprovalStatus.PENDING_APPROVAL
    assert approval.required_approvals == 1 and not approval.decided_by_policy


def test_the_limit_itself_is_approved_by_the_rule(demo):
    policy_set(demo, auto_approve_up_to="10.00")

    run = refund_run(demo, "10")

    assert run.status == RunStatus.COMPLETED
    assert Refund.objects.get().amount == Decimal("10.00")
