"""A shop's history of gated calls for the dashboard's tests, spread over three days by
setting each row's times after the calls were asked for and decided for real."""

from datetime import UTC, datetime, timedelta

from approvals.models import Approval, ApprovalVote, Refund
from runs import worker
from runs.models import AgentRun, RunStatus
from tests import factories
from tests.approvals.policy_helpers import policy_set, seen
from tests.approvals.refund_helpers import refund_run_waiting

# The dashboard's tests read it at noon on Monday 2026-12-07 (UTC).
NOW = datetime(2026, 12, 7, 12, 0, tzinfo=UTC)


def _decide(api, who: str, approval: Approval, decision: str, **body) -> None:
    response = api(who).post(
        f"/api/v1/approvals/{approval.interrupt_id}/decision",
        seen(approval, decision, {"decision": decision, **body}),
        format="json",
    )
    assert response.status_code == 200, response.json()


def _backdate(approval: Approval, *, asked: datetime, seen_after=None, decided_after=None):
    """Move the call's times: asked for at `asked`, first opened and decided that many seconds
    later (its votes and its refund with the decision)."""
    seen_at = asked + timedelta(seconds=seen_after) if seen_after is not None else None
    decided_at = asked + timedelta(seconds=decided_after) if decided_after is not None else None
    Approval.objects.filter(pk=approval.pk).update(
        created_at=asked, first_seen_at=seen_at, decided_at=decided_at
    )
    if decided_at is not None:
        ApprovalVote.objects.filter(approval=approval).update(created_at=decided_at)
        Refund.objects.filter(idempotency_key=approval.tool_execution_key).update(
            created_at=decided_at
        )


def _run_to_the_end(run: AgentRun) -> None:
    for _ in range(5):
        worker.tick()
        run.refresh_from_db()
        if run.status == RunStatus.COMPLETED:
            return
    raise AssertionError(f"the run stopped at {run.status}")


def seeded_history(demo, api, *, now: datetime = NOW) -> dict[str, Approval]:
    """Two days before `now` (Saturday for NOW): 5.00 approved by sam 2 s after he first saw
    it (4 s after it was asked), 8.00 rejected by sue (seen after 60 s, decided after 600 s).
    The day before: 9.00 revised by sam to 4.00 (seen after 30 s, decided after 120 s), 20.00
    still waiting, escalated on `now`'s day. That day: 3.00 approved by the policy. Three
    refunds paid: 5.00, 4.00 and 3.00 EUR."""
    calls = {
        "5": refund_run_waiting("refund ORD-1003 amount 5"),
        "8": refund_run_waiting("refund ORD-2001 amount 8", customer="bob"),
        "9": refund_run_waiting("refund ORD-1004 amount 9"),
        "20": refund_run_waiting("refund ORD-1003 amount 20"),
    }
    _decide(api, "sam", calls["5"].approval, "approve")
    _decide(api, "sue", calls["8"].approval, "reject", reason="no such parcel")
    _decide(
        api,
        "sam",
        calls["9"].approval,
        "revise",
        tool_args={"order_id": "ORD-1004", "amount": "4.00", "reason": "customer request"},
    )
    for key in ("5", "9"):
        _run_to_the_end(calls[key].run)
    policy_set(demo, auto_approve_up_to="3.00")
    auto = factories.run_queue(
        customer=calls["5"].run.account, merchant=demo, message="refund ORD-1003 amount 3"
    )
    _run_to_the_end(auto)
    approvals = {
        key: Approval.objects.get(pk=waiting.approval.pk) for key, waiting in calls.items()
    }
    approvals["3"] = Approval.objects.get(run=auto)
    mon = now.replace(hour=0, minute=0, second=0, microsecond=0)
    sat, sun = mon - timedelta(days=2), mon - timedelta(days=1)
    _backdate(approvals["5"], asked=sat.replace(hour=10), seen_after=2, decided_after=4)
    _backdate(approvals["8"], asked=sat.replace(hour=11), seen_after=60, decided_after=600)
    _backdate(approvals["9"], asked=sun.replace(hour=9), seen_after=30, decided_after=120)
    _backdate(approvals["20"], asked=sun.replace(hour=15))
    Approval.objects.filter(pk=approvals["20"].pk).update(escalated_at=mon.replace(hour=8))
    _backdate(approvals["3"], asked=mon.replace(hour=9), decided_after=0)
    return approvals
