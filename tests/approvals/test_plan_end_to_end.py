"""An exchange through the real django-q2 cluster: the API's commands enqueue reconcile, the
cluster's workers apply them, and the same run answers once."""

import pytest

from approvals.models import Ticket
from runs.models import AgentRun, RunEvent, RunInput, RunStatus
from tests.conftest import wait_for

pytestmark = pytest.mark.cluster


def _status(run_id) -> str:
    return AgentRun.objects.get(pk=run_id).status


def test_exchange_confirmed_and_approved_through_the_cluster(demo, api, cluster):
    cluster(workers=2)
    alice, sam = api("alice"), api("sam")

    # a vague request first: the agent asks, alice answers through the inputs API
    created = alice.post(
        "/api/v1/runs",
        {"message": "I want to exchange my shoes for size 43"},
        format="json",
        HTTP_IDEMPOTENCY_KEY="exchange-1",
    ).json()
    run_id = created["id"]
    wait_for(lambda: _status(run_id) == RunStatus.WAITING_USER)
    [question] = alice.get(f"/api/v1/runs/{run_id}").json()["pending"]
    assert question["kind"] == "clarification"
    run = alice.get(f"/api/v1/runs/{run_id}").json()
    answered = alice.post(
        f"/api/v1/runs/{run_id}/inputs",
        {
            "interrupt_id": question["interrupt_id"],
            "run_version": run["version"],
            "text": "ORD-1002",
        },
        format="json",
        HTTP_IDEMPOTENCY_KEY="answer-1",
    )
    assert answered.status_code == 202

    # the plan waits for alice; she confirms, and reconcile moves the run to the review
    wait_for(lambda: Ticket.objects.filter(run_id=run_id).exists())
    wait_for(lambda: _status(run_id) == RunStatus.WAITING_USER)
    [ticket] = alice.get("/api/v1/tickets").json()["results"]
    assert ticket["status"] == "WAITING_CONFIRMATION"
    confirmed = alice.post(
        f"/api/v1/tickets/{ticket['id']}/confirm", {"proposal_version": 1}, format="json"
    )
    assert confirmed.status_code == 200
    wait_for(lambda: _status(run_id) == RunStatus.WAITING_APPROVAL)

    # sam approves; the same run resumes and completes
    decided = sam.post(
        f"/api/v1/tickets/{ticket['id']}/decide",
        {"proposal_version": 1, "decision": "approve", "note": "ok"},
        format="json",
    )
    assert decided.status_code == 200
    wait_for(lambda: AgentRun.objects.get(pk=run_id).is_finished)
    run = AgentRun.objects.get(pk=run_id)
    assert run.status == RunStatus.COMPLETED, (run.error_code, run.error_detail)
    assert "approved" in run.result
    types = list(RunEvent.objects.filter(run=run).values_list("type", flat=True))
    for once in ("input.received", "plan.proposed", "plan.confirmed", "plan.approved"):
        assert types.count(once) == 1, (once, types)
    assert types[-1] == "run.completed"
    assert RunInput.objects.filter(run=run).count() == 3
    receipt = api().get(f"/api/v1/runs/{run_id}/receipts/answer-1")
    assert receipt.json()["run"]["status"] == "COMPLETED"
