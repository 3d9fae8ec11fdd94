"""Several calls of one model turn waiting at once, each decided by its own target (seed 004's
composite interrupt), with real threads on both databases."""

from datetime import timedelta

import pytest
import time_machine
from django.contrib.auth.models import User

from approvals.gate.services import approvals_expire_due
from approvals.models import Approval, ApprovalStatus, Refund
from runs import worker
from runs.models import AgentRun, RunEvent, RunStatus
from runs.services import run_cancel
from runs.snapshot import snapshot_parse
from tests import factories
from tests.approvals.policy_helpers import big_order
from tests.pages import signed_in
from tests.threads import in_threads

pytestmark = pytest.mark.django_db(transaction=True)

TWO_REFUNDS = "I want a refund for ORD-9001 amount 5 and for ORD-9002 amount 6"


@pytest.fixture
def orders(demo):
    big_order(demo, "ORD-9001", total="100000.00")
    big_order(demo, "ORD-9002", total="100000.00")
    return demo


def two_refunds_waiting(merchant) -> tuple[AgentRun, list[Approval]]:
    run = factories.run_queue(
        customer=User.objects.get(username="alice"), merchant=merchant, message=TWO_REFUNDS
    )
    worker.tick()
    run.refresh_from_db()
    assert run.status == RunStatus.WAITING_APPROVAL, (run.status, run.error_detail)
    approvals = list(Approval.objects.filter(run=run).order_by("tool_execution_key"))
    return run, approvals


def decide(client, interrupt_id, decision="approve", **body):
    return client.post(
        f"/api/v1/approvals/{interrupt_id}/decision", {"decision": decision, **body}, format="json"
    )


def test_both_calls_wait_at_once_in_the_models_order(orders, api):
    run, approvals = two_refunds_waiting(orders)

    # then: one pause, two pending calls, a v3 snapshot, both in the inbox
    snapshot = run.state_snapshot
    assert snapshot["version"] == 3
    assert [call["tool_args"]["order_id"] for call in snapshot["pending_tool_calls"]] == [
        "ORD-9001",
        "ORD-9002",
    ]
    assert set(snapshot) == {"version", "pending_tool_calls", "run_context"}
    body = api("alice").get(f"/api/v1/runs/{run.pk}").json()
    assert [p["interrupt_id"] for p in body["pending"]] == [a.interrupt_id for a in approvals]
    inbox = api("sam").get("/api/v1/approvals?status=PENDING_APPROVAL").json()["results"]
    assert {a["interrupt_id"] for a in inbox} == {a.interrupt_id for a in approvals}
    assert RunEvent.objects.filter(run=run, type="approval.requested").count() == 2


def test_a_run_with_one_pending_call_keeps_snapshot_v2(orders):
    run = factories.run_queue(
        customer=User.objects.get(username="alice"),
        merchant=orders,
        message="I want a refund for ORD-9001 amount 5",
    )
    worker.tick()
    run.refresh_from_db()

    assert run.state_snapshot["version"] == 2
    assert set(run.state_snapshot) == {"version", "pending_tool_call", "run_context"}


def test_deciding_one_leaves_the_other_pending_and_the_run_waiting(orders, api):
    run, (first, second) = two_refunds_waiting(orders)

    response = decide(api("sam"), first.interrupt_id)

    assert response.status_code == 200
    run.refresh_from_db()
    assert run.status == RunStatus.WAITING_APPROVAL
    assert [p["interrupt_id"] for p in response.json()["run"]["pending"]] == [second.interrupt_id]
    statuses = [call.status for call in snapshot_parse(run.state_snapshot).calls]
    assert statuses == ["APPROVED_EXECUTING", "PENDING_APPROVAL"]
    assert not Refund.objects.exists()


def test_two_supervisors_decide_the_two_calls_at_once_fifty_times(orders, api):
    sam, sue = api("sam"), api("sue")
    for _ in range(50):
        # given: two refunds waiting in one run
        run, (first, second) = two_refunds_waiting(orders)
        refunds_before = Refund.objects.count()

        # when: sam approves one while sue rejects the other
        approve, reject = in_threads(
            [
                lambda call=first: decide(sam, call.interrupt_id),
                lambda call=second: decide(sue, call.interrupt_id, "reject", reason="not this"),
            ]
        )

        # then: both succeed, the run resumed once and finishes with one refund; the model
        # heard about the rejected one
        assert (approve.status_code, reject.status_code) == (200, 200), (
            approve.json(),
            reject.json(),
        )
        assert AgentRun.objects.get(pk=run.pk).status == RunStatus.QUEUED
        worker.tick()
        run.refresh_from_db()
        assert run.status == RunStatus.COMPLETED, (run.status, run.error_detail)
        assert Refund.objects.count() - refunds_before == 1
        assert Approval.objects.get(pk=first.pk).status == ApprovalStatus.EXECUTED
        assert Approval.objects.get(pk=second.pk).status == ApprovalStatus.REJECTED
        assert "not this" in run.result
        assert RunEvent.objects.filter(run=run, type="run.started").count() == 2


@pytest.mark.parametrize("target", ["garbage", "other-run", "earlier-turn"])
def test_a_decision_naming_the_wrong_target_changes_nothing(orders, api, target):
    run, approvals = two_refunds_waiting(orders)
    _, other_approvals = two_refunds_waiting(orders)
    if target == "earlier-turn":
        # an earlier turn of this very run: a call decided and executed before
        earlier = Approval.objects.create(
            interrupt_id="int-earlier0000000",
            run=run,
            merchant=orders,
            tool_name="issue_refund",
            tool_execution_key=f"agent:{run.pk}:0:9",
            proposed_args={"order_id": "ORD-9001", "amount": "1.00", "reason": "x"},
            status=ApprovalStatus.PENDING_APPROVAL,
            expires_at=approvals[0].expires_at,
        )
        interrupt_id = earlier.interrupt_id
    else:
        interrupt_id = "int-0000000000000000"
        if target == "other-run":
            interrupt_id = other_approvals[0].interrupt_id
    before = AgentRun.objects.get(pk=run.pk).state_snapshot

    response = api("sam").post(
        f"/api/v1/runs/{run.pk}/resume",
        {"interrupt_id": interrupt_id, "decision": "approve"},
        format="json",
    )

    assert response.status_code == 409
    assert response.json()["code"] == "interrupt_mismatch"
    assert AgentRun.objects.get(pk=run.pk).state_snapshot == before
    assert all(
        a.status == ApprovalStatus.PENDING_APPROVAL
        for a in Approval.objects.filter(pk__in=[a.pk for a in approvals + other_approvals])
    )


def test_one_call_expires_while_the_other_is_approved(orders, api):
    run, (first, second) = two_refunds_waiting(orders)

    # when: sam approves the first, then the second expires
    decide(api("sam"), first.interrupt_id)
    assert AgentRun.objects.get(pk=run.pk).status == RunStatus.WAITING_APPROVAL
    with time_machine.travel(second.expires_at + timedelta(seconds=1)):
        expired = approvals_expire_due()
    worker.tick()

    # then: the run resumed with both final; the approved one ran, the expired one is told
    assert expired == 1
    run.refresh_from_db()
    assert run.status == RunStatus.COMPLETED
    assert Refund.objects.get().order.number == "ORD-9001"
    assert Approval.objects.get(pk=second.pk).status == ApprovalStatus.EXPIRED
    assert "in time" in run.result


def test_a_cancel_closes_every_call_of_the_pause(orders, api):
    run, approvals = two_refunds_waiting(orders)
    decide(api("sam"), approvals[0].interrupt_id)

    run_cancel(run=run)

    assert {a.status for a in Approval.objects.filter(run=run)} == {ApprovalStatus.CANCELLED}
    calls = snapshot_parse(AgentRun.objects.get(pk=run.pk).state_snapshot).calls
    assert [call.status for call in calls] == ["CANCELLED", "CANCELLED"]
    assert not Refund.objects.exists()


def test_a_composite_snapshot_with_an_extra_field_is_refused(orders, api):
    run, (first, _) = two_refunds_waiting(orders)
    snapshot = AgentRun.objects.get(pk=run.pk).state_snapshot
    snapshot["pending_tool_calls"][1]["note"] = "sneaked in"
    AgentRun.objects.filter(pk=run.pk).update(state_snapshot=snapshot)

    response = decide(api("sam"), first.interrupt_id)

    assert response.status_code == 422
    assert response.json()["code"] == "snapshot_invalid"
    assert Approval.objects.get(pk=first.pk).status == ApprovalStatus.PENDING_APPROVAL


# --- pages ---------------------------------------------------------------------------------


def test_the_call_page_shows_the_calls_asked_for_together_with_their_states(orders, api):
    _, (first, second) = two_refunds_waiting(orders)
    decide(api("sue"), second.interrupt_id, "reject", reason="not this")
    sam = signed_in("sam")

    page = sam.get(f"/portal/approvals/{first.interrupt_id}/").content.decode()

    assert "Asked for together" in page
    siblings = page.split('id="siblings"')[1].split("</ul>")[0]
    assert "ORD-9002" in siblings and "rejected" in siblings
    assert "ORD-9001" not in siblings


def test_the_inbox_keeps_calls_asked_for_together_next_to_each_other(orders):
    # given: two refunds asked together (5 and 6), and bob's 5.50, which sorts between them
    # by amount
    _, (first, second) = two_refunds_waiting(orders)
    factories.run_queue(
        customer=User.objects.get(username="bob"),
        merchant=orders,
        message="I want a refund for ORD-2001 amount 5.50",
    )
    worker.tick()
    sam = signed_in("sam")

    # when: sam sorts the inbox by amount
    page = sam.get("/portal/?sort=amount").content.decode()

    # then: the two asked together stay together, in the model's order

    rows = [part.split('"')[0] for part in page.split('data-interrupt="')[1:]]
    assert rows.index(second.interrupt_id) == rows.index(first.interrupt_id) + 1
    assert "1 of 2 asked for together" in page and "2 of 2 asked for together" in page
