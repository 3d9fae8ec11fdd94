"""Racing inputs for one wait, with real threads on real connections (DESIGN 6.2)."""

import pytest
from django.contrib.auth.models import User
from rest_framework.test import APIClient

from agentportal.models import Merchant
from runs import worker
from runs.models import AgentRun, RunEvent, RunInput, RunStatus
from tests import factories
from tests.runs.conversation_helpers import asking_agent
from tests.threads import in_threads

pytestmark = pytest.mark.django_db(transaction=True)


def _asking(shop: Merchant) -> tuple[AgentRun, str]:
    """pat's run waiting for the answer to the agent's question (which parcel?), and a key of
    pat's."""
    asking_agent(shop)
    pat = User.objects.get(username="pat")
    run = factories.run_queue(customer=pat, merchant=shop, message="Where is my parcel?")
    worker.tick()
    run.refresh_from_db()
    assert run.status == RunStatus.WAITING_USER
    assert run.wait_state["kind"] == "clarification"
    return run, factories.api_key_for(pat, shop)


def test_resume_same_run_atomic_idempotency_and_event(parcel_shop):
    # given: a run waiting for the customer's answer, and eight clients of theirs
    run, key = _asking(parcel_shop)
    body = {
        "interrupt_id": run.wait_state["interrupt_id"],
        "run_version": run.version,
        "text": "It is PCL-1",
    }

    def send():
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
        response = client.post(
            f"/api/v1/runs/{run.pk}/inputs", body, format="json", HTTP_IDEMPOTENCY_KEY="same"
        )
        return response.status_code, response.json()

    # when: all of them send the same input with the same key at once
    results = in_threads([send] * 8)

    # then: one receipt, one input.received, one resume; every answer names that receipt
    statuses = sorted(status for status, _ in results)
    assert statuses.count(202) == 1, results
    assert set(statuses) <= {200, 202}, results
    receipt = RunInput.objects.get(run=run)
    assert {body["receipt"]["id"] for _, body in results} == {receipt.pk}
    assert RunEvent.objects.filter(run=run, type="input.received").count() == 1
    run.refresh_from_db()
    assert run.status == RunStatus.QUEUED
    assert run.version == body["run_version"] + 1


def test_racing_inputs_with_different_keys_resume_once(parcel_shop):
    run, key = _asking(parcel_shop)

    def send(index: int):
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
        return client.post(
            f"/api/v1/runs/{run.pk}/inputs",
            {
                "interrupt_id": run.wait_state["interrupt_id"],
                "run_version": run.version,
                "text": f"PCL-{index % 5 + 1}",
            },
            format="json",
            HTTP_IDEMPOTENCY_KEY=f"key-{index}",
        ).status_code

    statuses = in_threads([lambda i=i: send(i) for i in range(6)])

    assert sorted(statuses) == [202] + [409] * 5
    assert RunInput.objects.filter(run=run).count() == 1
    assert RunEvent.objects.filter(run=run, type="input.received").count() == 1
