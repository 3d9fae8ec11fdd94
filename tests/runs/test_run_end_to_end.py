"""A customer's run through the real django-q2 cluster, from the REST API to the answer."""

import pytest

from runs.models import AgentRun, AttemptStatus, ModelAttempt, RunEvent, RunStatus, ToolExecution
from tests.conftest import wait_for

pytestmark = pytest.mark.cluster


def test_order_status_run_completes_through_cluster(demo, api, cluster):
    # given: a running cluster and alice's key
    cluster(workers=2)
    alice = api("alice")

    # when
    response = alice.post(
        "/api/v1/runs",
        {"message": "What is the status of order ORD-1001?"},
        format="json",
        HTTP_IDEMPOTENCY_KEY="status-1001",
    )

    # then: accepted as QUEUED, and finished by a worker
    assert response.status_code == 201
    assert response.json()["status"] == "QUEUED"
    run_id = response.json()["id"]
    wait_for(lambda: AgentRun.objects.get(pk=run_id).is_finished)
    run = AgentRun.objects.get(pk=run_id)
    assert run.status == RunStatus.COMPLETED
    assert "ORD-1001" in run.result
    body = alice.get(f"/api/v1/runs/{run_id}").json()
    assert body["status"] == "COMPLETED"
    assert body["result"] == run.result

    types = list(RunEvent.objects.filter(run=run).values_list("type", flat=True))
    assert types[0] == "run.queued"
    assert "run.started" in types
    assert types.count("run.completed") == 1
    assert types[-1] == "run.completed"

    attempts = ModelAttempt.objects.filter(run=run)
    assert attempts.count() == types.count("model.requested") == 2
    assert all(a.status == AttemptStatus.RESPONDED for a in attempts)
    assert all(a.usage["total_tokens"] > 0 for a in attempts)

    executions = ToolExecution.objects.filter(run=run)
    assert [e.tool for e in executions] == ["lookup_order"]
    assert executions.get().result["order_id"] == "ORD-1001"
