"""Four eyes under concurrency, with real threads on real connections, on both databases:
concurrent first approvals, the same person twice at once, a second approval racing a reject,
and the run ends and revocations that must still win over an approval given."""

from datetime import timedelta

import pytest
import time_machine
from django.contrib.auth.models import User

from agentportal.models import Membership, Role
from approvals.gate.services import approvals_expire_due
from approvals.models import ApprovalStatus, ApprovalVote, CancelCause, Refund
from runs import worker
from runs.models import AgentRun, ErrorCode, RunEvent, RunStatus
from runs.services import run_cancel
from tests import factories
from tests.approvals.policy_helpers import approval_of, big_order, policy_set, refund_run, seen
from tests.threads import in_threads

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def four_eyes(demo):
    policy_set(demo, two_approvers_from="200.00")
    big_order(demo, total="100000.00")
    return demo


def waiting_large_refund(merchant):
    run = refund_run(merchant, "300", order="ORD-9001")
    assert run.status == RunStatus.WAITING_APPROVAL, (run.status, run.error_detail)
    return run, approval_of(run)


def decide(client, approval, decision="approve", **body):
    return client.post(
        f"/api/v1/approvals/{approval.interrupt_id}/decision",
        {"decision": decision, **seen(approval, decision, body)},
        format="json",
    )


def supervisors(merchant, count: int) -> list[str]:
    names = [f"supervisor-{index}" for index in range(count)]
    for name in names:
        factories.user_create(name, merchant=merchant, role=Role.SUPERVISOR)
    return names


def test_sixteen_concurrent_approvals_by_different_people_need_exactly_two(four_eyes, api):
    # given: a call needing two, and 16 supervisors with their own clients
    run, approval = waiting_large_refund(four_eyes)
    clients = [api(name) for name in supervisors(four_eyes, 16)]

    # when: all approve at once
    responses = in_threads([lambda c=client: decide(c, approval) for client in clients])

    # then: one recorded first, one completed it, the other 14 found it decided
    statuses = sorted(response.status_code for response in responses)
    assert statuses == [200, 200] + [409] * 14, statuses
    states = sorted(r.json()["approval"]["status"] for r in responses if r.status_code == 200)
    assert states == ["APPROVED_EXECUTING", "PENDING_APPROVAL"]
    assert {r.json()["code"] for r in responses if r.status_code == 409} == {"already_decided"}
    assert ApprovalVote.objects.filter(approval=approval).count() == 2
    assert RunEvent.objects.filter(run=run, type="approval.approval_given").count() == 1
    assert RunEvent.objects.filter(run=run, type="approval.decided").count() == 1

    # when: a worker continues
    worker.tick()

    # then: one refund
    assert Refund.objects.count() == 1
    assert approval_of(run).status == ApprovalStatus.EXECUTED


def test_sixteen_concurrent_approvals_by_one_person_count_once(four_eyes, api):
    # given: a call needing two; sam has 16 clients (tabs, retries)
    run, approval = waiting_large_refund(four_eyes)
    clients = [api("sam") for _ in range(16)]

    # when: all approve at once
    responses = in_threads([lambda c=client: decide(c, approval) for client in clients])

    # then: exactly one recorded; the call needs exactly one more
    statuses = sorted(response.status_code for response in responses)
    assert statuses == [200] + [409] * 15, statuses
    assert {r.json()["code"] for r in responses if r.status_code == 409} == {"same_approver"}
    assert ApprovalVote.objects.filter(approval=approval).count() == 1
    assert approval_of(run).status == ApprovalStatus.PENDING_APPROVAL

    # when: sue approves
    response = decide(api("sue"), approval)
    worker.tick()

    # then: it executes once
    assert response.json()["approval"]["status"] == "APPROVED_EXECUTING"
    assert Refund.objects.count() == 1


def test_a_second_approval_racing_a_reject_fifty_times(four_eyes, api):
    supervisors(four_eyes, 1)
    sam, sue, rejecter = api("sam"), api("sue"), api("supervisor-0")
    outcomes = []
    for _ in range(50):
        # given: a call with sam's first approval
        run, approval = waiting_large_refund(four_eyes)
        assert decide(sam, approval).status_code == 200
        refunds_before = Refund.objects.count()

        # when: sue approves while another supervisor rejects
        approve, reject = in_threads(
            [
                lambda call=approval: decide(sue, call),
                lambda call=approval: decide(rejecter, call, "reject", reason="no"),
            ]
        )
        worker.tick()

        # then: exactly one of them won, and the call ended the way the winner said
        assert sorted([approve.status_code, reject.status_code]) == [200, 409]
        approval.refresh_from_db()
        refunds = Refund.objects.count() - refunds_before
        if approve.status_code == 200:
            assert approval.status == ApprovalStatus.EXECUTED and refunds == 1
            outcomes.append("executed")
        else:
            assert approval.status == ApprovalStatus.REJECTED and refunds == 0
            outcomes.append("rejected")
        assert RunEvent.objects.filter(run=run, type="approval.decided").count() == 1
        assert AgentRun.objects.get(pk=run.pk).status == RunStatus.COMPLETED
    assert len(outcomes) == 50


def test_a_cancel_after_the_first_approval_closes_the_call(four_eyes, api):
    run, approval = waiting_large_refund(four_eyes)
    decide(api("sam"), approval)

    run_cancel(run=run)
    late = decide(api("sue"), approval)

    assert late.status_code == 409 and late.json()["code"] == "run_finished"
    approval.refresh_from_db()
    assert approval.status == ApprovalStatus.CANCELLED
    assert approval.cancel_cause == CancelCause.RUN_CANCELLED
    assert not Refund.objects.exists()


@pytest.mark.parametrize("revoked", ["sam", "sue"])
def test_either_approver_revoked_before_execution_fails_the_run(four_eyes, api, revoked):
    # given: sam and sue approved
    run, approval = waiting_large_refund(four_eyes)
    decide(api("sam"), approval)
    decide(api("sue"), approval)

    # when: one of them loses the supervisor role before a worker executes the call
    Membership.objects.filter(user=User.objects.get(username=revoked), merchant=four_eyes).update(
        active=False
    )
    worker.tick()

    # then: nothing is paid, the run fails with APPROVER_REVOKED
    run.refresh_from_db()
    assert run.status == RunStatus.FAILED
    assert run.error_code == ErrorCode.APPROVER_REVOKED
    assert not Refund.objects.exists()
    assert approval_of(run).status == ApprovalStatus.CANCELLED


def test_a_call_with_one_approval_expires_like_any_other(four_eyes, api):
    run, approval = waiting_large_refund(four_eyes)
    decide(api("sam"), approval)

    with time_machine.travel(approval.expires_at + timedelta(seconds=1)):
        expired = approvals_expire_due()
    worker.tick()

    assert expired == 1
    assert approval_of(run).status == ApprovalStatus.EXPIRED
    assert AgentRun.objects.get(pk=run.pk).status == RunStatus.COMPLETED
    assert not Refund.objects.exists()
