"""Concurrent decisions on one pending tool call, with real threads on real connections.

DESIGN 6.1: of any number of concurrent decisions for one interrupt exactly one succeeds; a
decision racing the expiry sweeper either decides or finds the call expired, never both. Each
thread works on its own database connection and closes it at its end; the same tests run on
SQLite (IMMEDIATE transactions, no row locks) and on PostgreSQL (row locks).
"""

import time
from collections.abc import Callable
from datetime import timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from agentportal.problems import CONTENT_TYPE
from approvals.gate.services import approvals_expire_due
from approvals.models import Approval, ApprovalStatus, Refund
from runs import worker
from runs.models import AgentRun, RunEvent, RunStatus, ToolExecution
from runs.snapshot import snapshot_parse
from tests.threads import in_threads

pytestmark = pytest.mark.django_db(transaction=True)


# --- helpers -------------------------------------------------------------------------------


def decision_body(index: int, decision: str, interrupt_id: str) -> dict[str, Any]:
    """A body per thread, each recognisable: its own reason and its own revised amount."""
    body: dict[str, Any] = {"interrupt_id": interrupt_id, "decision": decision}
    if decision == "reject":
        body["reason"] = f"declined by racer {index}"
    if decision == "revise":
        body["tool_args"] = {
            "order_id": "ORD-1003",
            "amount": f"{index + 1}.00",
            "reason": f"revised by racer {index}",
        }
    return body


def event_count(run_id, event_type: str) -> int:
    return RunEvent.objects.filter(run_id=run_id, type=event_type).count()


def snapshot_status(run_id) -> str:
    return snapshot_parse(AgentRun.objects.get(pk=run_id).state_snapshot).pending_tool_call.status


def set_expiry(run: AgentRun, approval: Approval, expires_at) -> None:
    """Move the call's expiry in both records, consistently, as if it had been made so."""
    Approval.objects.filter(pk=approval.pk).update(expires_at=expires_at)
    snapshot = AgentRun.objects.get(pk=run.pk).state_snapshot
    snapshot["pending_tool_call"]["expires_at"] = expires_at.isoformat()
    AgentRun.objects.filter(pk=run.pk).update(state_snapshot=snapshot)
    snapshot_parse(AgentRun.objects.get(pk=run.pk).state_snapshot)


# --- many deciders -------------------------------------------------------------------------

MIXED = ["approve", "reject", "revise", "approve"]


@pytest.mark.parametrize(
    "decisions",
    [pytest.param(MIXED, id="mixed"), pytest.param(["approve"], id="approve-only")],
)
def test_sixteen_concurrent_decisions_have_exactly_one_winner(refund_waiting, api, decisions):
    # given: a waiting refund and 16 deciders (sam, sue and a service key), each with a client
    run, approval = refund_waiting
    who = ["sam", "sue", None]
    racers = []
    for index in range(16):
        decision = decisions[index % len(decisions)]
        racers.append((api(who[index % 3]), decision_body(index, decision, approval.interrupt_id)))
    url = f"/api/v1/runs/{run.pk}/resume"

    # when: all decide at once
    responses = in_threads(
        [lambda c=client, b=body: c.post(url, b, format="json") for client, body in racers]
    )

    # then: one 200, fifteen 409 already_decided naming the winner
    statuses = sorted(r.status_code for r in responses)
    assert statuses == [200] + [409] * 15, statuses
    [winner_index] = [i for i, r in enumerate(responses) if r.status_code == 200]
    winner = responses[winner_index].json()["approval"]
    winning_body = racers[winner_index][1]
    assert winner["decision"] == winning_body["decision"]
    approval.refresh_from_db()
    assert approval.decision == winning_body["decision"]
    for response in responses:
        if response.status_code == 200:
            continue
        assert response["Content-Type"].startswith(CONTENT_TYPE)
        problem = response.json()
        assert problem["code"] == "already_decided", problem
        assert problem["decided_by"] == winner["decided_by"]
        assert problem["decision"] == winner["decision"]
        assert parse_datetime(problem["decided_at"]) == approval.decided_at
    assert event_count(run.pk, "approval.decided") == 1
    assert (
        RunEvent.objects.get(run=run, type="approval.decided").data["decision"]
        == (winning_body["decision"])
    )
    assert AgentRun.objects.get(pk=run.pk).status == RunStatus.QUEUED

    # when: a worker continues the run
    worker.tick()

    # then: the winner's decision, carried out once
    run.refresh_from_db()
    assert run.status == RunStatus.COMPLETED, (run.status, run.error_code, run.error_detail)
    executions = ToolExecution.objects.filter(idempotency_key=approval.tool_execution_key)
    assert executions.count() == 1
    refunds = Refund.objects.all()
    if winning_body["decision"] == "reject":
        assert refunds.count() == 0
        assert winning_body["reason"] in run.result
        assert Approval.objects.get(pk=approval.pk).status == ApprovalStatus.REJECTED
    else:
        assert refunds.count() == 1
        expected = winning_body.get("tool_args", {}).get("amount", "20.00")
        assert refunds.get().amount == Decimal(expected)
        approval.refresh_from_db()
        assert approval.status == ApprovalStatus.EXECUTED
        assert approval.executed_args == approval.approved_args
    assert event_count(run.pk, "approval.decided") == 1
    assert event_count(run.pk, "run.completed") == 1


# --- deciders against the sweeper ----------------------------------------------------------


def sleep_until(moment: float) -> None:
    time.sleep(max(0.0, moment - time.time()))


@pytest.mark.parametrize(
    ("expires_in_ms", "deciders_at_ms"),
    [
        # the call is overdue before anyone moves
        pytest.param(-1000, [0] * 8, id="already-due"),
        # the decisions arrive just before the call falls due, the sweeper just after
        pytest.param(800, [650 + i for i in range(8)], id="due-just-after-the-decisions"),
        # the call falls due while the decisions arrive, one every 5 ms (a decision takes
        # some 40 ms to reach the lock here): either side may win
        pytest.param(800, [770 + 5 * i for i in range(8)], id="due-mid-race"),
    ],
)
def test_approvals_racing_the_expiry_sweeper_either_decide_or_expire(
    refund_waiting, api, expires_in_ms, deciders_at_ms
):
    # given: a waiting refund, 8 supervisors' clients and a sweeper, with the call's expiry
    # set (in the Approval and the snapshot alike) to fall in the middle of the race
    run, approval = refund_waiting
    url = f"/api/v1/runs/{run.pk}/resume"
    clients = [api("sam" if i % 2 else "sue") for i in range(8)]
    sweeps: list[int] = []
    now = timezone.now()
    expires_at = now + timedelta(milliseconds=expires_in_ms)
    base = now.timestamp()

    def sweeper() -> int:
        sleep_until(expires_at.timestamp() - 0.01)
        ends = time.monotonic() + 1.0
        expired = 0
        while time.monotonic() < ends:
            expired += approvals_expire_due()
            if not Approval.objects.filter(
                pk=approval.pk, status=ApprovalStatus.PENDING_APPROVAL
            ).exists():
                break
            time.sleep(0.002)
        sweeps.append(expired)
        return expired

    def decider(index: int) -> Callable[[], Any]:
        def decide():
            # warm up: this thread's connection and the request stack, before the race
            assert clients[index].get(f"/api/v1/runs/{run.pk}").status_code == 200
            sleep_until(base + deciders_at_ms[index] / 1000)
            return clients[index].post(
                url, {"interrupt_id": approval.interrupt_id, "decision": "approve"}, format="json"
            )

        return decide

    set_expiry(run, approval, expires_at)

    # when
    results = in_threads([sweeper, *(decider(i) for i in range(8))])
    responses = results[1:]

    # then: exactly one of {a decision, an expiry} happened
    approval.refresh_from_db()
    decided = [r for r in responses if r.status_code == 200]
    expired = approval.status == ApprovalStatus.EXPIRED
    assert len(decided) + int(expired) == 1, ([r.status_code for r in responses], approval.status)
    assert sweeps[0] in (0, 1)
    for response in responses:
        if response.status_code == 200:
            continue
        assert response["Content-Type"].startswith(CONTENT_TYPE)
        assert (response.status_code, response.json()["code"]) in (
            (410, "interrupt_expired"),
            (409, "already_decided"),
        ), response.content
    assert snapshot_status(run.pk) == approval.status
    if expired:
        assert all(r.status_code == 410 for r in responses)
        assert event_count(run.pk, "approval.expired") == 1
        assert event_count(run.pk, "approval.decided") == 0
        assert approval.decided_at is None
    else:
        assert approval.status == ApprovalStatus.APPROVED_EXECUTING
        assert sweeps[0] == 0
        assert event_count(run.pk, "approval.expired") == 0
        assert event_count(run.pk, "approval.decided") == 1
    assert AgentRun.objects.get(pk=run.pk).status == RunStatus.QUEUED

    # when: the worker continues
    worker.tick()

    # then: at most one refund, and only after an approval
    run.refresh_from_db()
    approval.refresh_from_db()
    assert run.status == RunStatus.COMPLETED, (run.status, run.error_code, run.error_detail)
    assert Refund.objects.count() == len(decided) <= 1
    assert approval.status == (ApprovalStatus.EXPIRED if expired else ApprovalStatus.EXECUTED)
    assert snapshot_status(run.pk) == approval.status
    assert ToolExecution.objects.filter(idempotency_key=approval.tool_execution_key).count() == 1
    if expired:
        assert "in time" in run.result
