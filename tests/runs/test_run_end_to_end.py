"""A customer's run through the real django-q2 cluster, from the REST API to the answer."""

import pytest

from runs.models import AgentRun, AttemptStatus, ModelAttempt, RunEvent, RunStatus, ToolExecution
from tests.conftest import wait_for

pytestmark = pytest.mark.cluster


def test_a_run_completes_through_the_cluster(parcel_shop, api, cluster):
    # given: a running cluster and pat's key
    cluster(workers=2)
    pat = api("pat", merchant="parcel-shop")

    # when
    response = pat.post(
        "/api/v1/runs",
        {"message": "Where is my parcel PCL-1?"},
        format="json",
        HTTP_IDEMPOTENCY_KEY="track-1",
    )

    # then: accepted as QUEUED, and finished by a worker
    assert response.status_code == 201
    assert response.json()["status"] == "QUEUED"
    run_id = response.json()["id"]
    wait_for(lambda: AgentRun.objects.get(pk=run_id).is_finished)
    run = AgentRun.objects.get(pk=run_id)
    assert run.status == RunStatus.COMPLETED
    assert run.result == "Parcel PCL-1 is in transit."
    body = pat.get(f"/api/v1/runs/{run_id}").json()
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
    assert [e.tool for e in executions] == ["track_parcel"]
    assert executions.get().result["parcel_id"] == "PCL-1"
