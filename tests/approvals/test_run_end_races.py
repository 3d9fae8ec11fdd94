"""/stop racing an approved refund's execution, with real threads on real connections: each
time the money moved and the call says EXECUTED, or it did not and the call says CANCELLED."""

import functools
import time
from decimal import Decimal

import pytest

from agentportal.errors import RunFinished
from approvals.models import Approval, ApprovalStatus, Order, Refund
from runs import services, worker
from runs.models import AgentRun, RunEvent, RunStatus, ToolExecution
from tests.approvals.refund_helpers import Waiting, refund_run_waiting
from tests.threads import in_threads

pytestmark = pytest.mark.django_db(transaction=True)

ROUNDS = 50
AMOUNT = Decimal("0.01")


def _stop(run_id, delay: float) -> bool:
    # The delay spreads the stop over the worker's claim, execution and commits: the race
    # itself, not a wait for something.
    time.sleep(delay)
    try:
        services.run_cancel(run=AgentRun.objects.get(pk=run_id), reason="/stop")
    except RunFinished:
        return False
    return True


def _assert_one_story(waiting: Waiting, *, stopped: bool, paid_before: Decimal) -> str:
    """Exactly one of the race's three endings holds, whole: in the call, the money, the
    tool's record, the order and the run's timeline. Returns the call's status."""
    approval = Approval.objects.get(pk=waiting.approval.pk)
    run = AgentRun.objects.get(pk=waiting.run.pk)
    key = approval.tool_execution_key
    refunds = list(Refund.objects.filter(idempotency_key=key).values_list("amount", flat=True))
    executions = ToolExecution.objects.filter(idempotency_key=key).count()
    refunded = Order.objects.get(number="ORD-1003").refunded
    timeline = list(RunEvent.objects.filter(run=run).order_by("seq").values_list("type", "data"))
    types = [event_type for event_type, _ in timeline]
    results = [data for event_type, data in timeline if event_type == "tool.result"]
    results = [data for data in results if data["key"] == key]
    story = (approval.status, run.status, stopped, types)

    if approval.status == ApprovalStatus.CANCELLED:
        # the stop came before the refund executed: the call is closed with its cause, nothing
        # was paid or recorded as done, and the run ended cancelled
        assert approval.cancel_cause == "run_cancelled", story
        assert (refunds, executions, results) == ([], 0, []), story
        assert refunded == paid_before, story
        assert (run.status, stopped) == (RunStatus.CANCELLED, True), story
        assert types.count("approval.cancelled") == 1, story
        assert "approval.executed" not in types, story
        assert types[-1] == "run.cancelled" and types.count("run.cancelled") == 1, story
        assert run.result is None, story
        return approval.status

    # otherwise the refund executed: paid once, recorded once, told once in the timeline
    # (by its result, or by the notice of a run stopped between the payment and its result)
    assert approval.status == ApprovalStatus.EXECUTED, story
    assert (refunds, executions) == ([AMOUNT], 1), story
    assert refunded == paid_before + AMOUNT, story
    assert "approval.cancelled" not in types, story
    assert len(results) + types.count("approval.executed") == 1, story
    if run.status == RunStatus.COMPLETED:
        # and the run completed before the stop came, which found it finished
        assert not stopped, story
        assert len(results) == 1, story
        assert types[-1] == "run.completed" and types.count("run.completed") == 1, story
        assert "has been issued" in run.result, story
    else:
        # and the stop ended the run after the payment, before its answer
        assert (run.status, stopped) == (RunStatus.CANCELLED, True), story
        assert types[-1] == "run.cancelled" and types.count("run.cancelled") == 1, story
        assert run.result is None, story
    return approval.status


def _race(api, delay: float) -> str:
    """One round: an approved refund waiting for a worker, which executes it while the
    customer stops the run `delay` seconds later; returns how the call ended."""
    waiting = refund_run_waiting(f"I want a refund for ORD-1003 amount {AMOUNT}")
    decided = api("sam").post(
        f"/api/v1/approvals/{waiting.interrupt_id}/decision",
        {"decision": "approve"},
        format="json",
    )
    assert decided.status_code == 200
    paid_before = Order.objects.get(number="ORD-1003").refunded
    _, stopped = in_threads([worker.tick, functools.partial(_stop, waiting.run.pk, delay)])
    return _assert_one_story(waiting, stopped=stopped, paid_before=paid_before)


def test_stop_racing_an_approved_refund_either_pays_once_or_not_at_all(demo, api):
    # when the stop lands from at once to 50 ms after the worker starts, so that it meets
    # every moment of the worker's claim, execution and commits
    # then exactly one story holds each time, in the database and in the run's timeline
    endings = {_race(api, round_ * 0.001) for round_ in range(ROUNDS)}

    # and the race was run, not only one side of it: both endings happened (on a slow machine
    # a worker may need longer than 50 ms to pay, so later stops are tried until one finds it
    # paid)
    for delay in (0.1, 0.2, 0.4, 0.8, 1.6):
        if ApprovalStatus.EXECUTED in endings:
            break
        endings.add(_race(api, delay))
    assert endings == {ApprovalStatus.CANCELLED, ApprovalStatus.EXECUTED}
    assert Refund.objects.count() == Approval.objects.filter(status=ApprovalStatus.EXECUTED).count()
