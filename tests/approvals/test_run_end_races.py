"""/stop racing an approved refund's execution, with real threads on real connections: each
time the money moved and the call says EXECUTED, or it did not and the call says CANCELLED."""

import functools
import time

import pytest

from agentportal.errors import RunFinished
from approvals.models import Approval, ApprovalStatus, Refund
from runs import services, worker
from runs.models import AgentRun, RunEvent, RunStatus
from tests.approvals.refund_helpers import refund_run_waiting
from tests.threads import in_threads

pytestmark = pytest.mark.django_db(transaction=True)

ROUNDS = 50


def _stop(run_id, delay: float) -> bool:
    time.sleep(delay)
    try:
        services.run_cancel(run=AgentRun.objects.get(pk=run_id), reason="/stop")
    except RunFinished:
        return False
    return True


def test_stop_racing_an_approved_refund_either_pays_once_or_not_at_all(demo, api):
    outcomes = set()
    for round_ in range(ROUNDS):
        # given an approved refund waiting for a worker
        waiting = refund_run_waiting("I want a refund for ORD-1003 amount 0.01")
        decided = api("sam").post(
            f"/api/v1/approvals/{waiting.interrupt_id}/decision",
            {"decision": "approve"},
            format="json",
        )
        assert decided.status_code == 200
        run_id = waiting.run.pk

        # when a worker executes it while the customer stops the run
        # (the stop lands from at once to 50 ms later, so that it meets every moment of the
        # worker's claim, execution and commits)
        delay = round_ * 0.001
        _, stopped = in_threads([worker.tick, functools.partial(_stop, run_id, delay)])

        # then exactly one story holds, in the database and in the run's timeline
        approval = Approval.objects.get(pk=waiting.approval.pk)
        refunds = Refund.objects.filter(idempotency_key=approval.tool_execution_key).count()
        run = AgentRun.objects.get(pk=run_id)
        types = set(RunEvent.objects.filter(run=run).values_list("type", flat=True))
        if approval.status == ApprovalStatus.EXECUTED:
            assert refunds == 1, (approval.result, run.status)
            assert "tool.result" in types or "approval.executed" in types
        else:
            assert (approval.status, approval.cancel_cause) == (
                ApprovalStatus.CANCELLED,
                "run_cancelled",
            )
            assert refunds == 0
            assert run.status == RunStatus.CANCELLED
        assert stopped == (run.status == RunStatus.CANCELLED)
        outcomes.add((approval.status, run.status))
    assert Refund.objects.count() == sum(
        1 for a in Approval.objects.all() if a.status == ApprovalStatus.EXECUTED
    )
    print(f"outcomes over {ROUNDS} rounds: {sorted(outcomes)}")
