"""Racing inputs for one wait, with real threads on real connections (DESIGN 6.2)."""

import pytest
from django.contrib.auth.models import User
from rest_framework.test import APIClient

from agentportal.models import Merchant
from runs import worker
from runs.models import RunEvent, RunInput, RunStatus
from tests import factories
from tests.threads import in_threads

pytestmark = pytest.mark.django_db(transaction=True)


def test_resume_same_run_atomic_idempotency_and_event(demo):
    # given: a run waiting for the customer's answer, and eight clients of hers
    alice = User.objects.get(username="alice")
    run = factories.run_queue(
        customer=alice, merchant=demo, message="I want to exchange my shoes for size 43"
    )
    worker.tick()
    run.refresh_from_db()
    assert run.status == RunStatus.WAITING_USER
    key = factories.api_key_for(alice, Merchant.objects.get(slug="demo-shop"))
    body = {
        "interrupt_id": run.wait_state["interrupt_id"],
        "run_version": run.version,
        "text": "It is ORD-1002",
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


def test_racing_inputs_with_different_keys_resume_once(demo):
    alice = User.objects.get(username="alice")
    run = factories.run_queue(customer=alice, merchant=demo, message="exchange size 43 please")
    worker.tick()
    run.refresh_from_db()
    key = factories.api_key_for(alice, Merchant.objects.get(slug="demo-shop"))

    def send(index: int):
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
        return client.post(
            f"/api/v1/runs/{run.pk}/inputs",
            {
                "interrupt_id": run.wait_state["interrupt_id"],
                "run_version": run.version,
                "text": f"ORD-100{index % 5 + 1}",
            },
            format="json",
            HTTP_IDEMPOTENCY_KEY=f"key-{index}",
        ).status_code

    statuses = in_threads([lambda i=i: send(i) for i in range(6)])

    assert sorted(statuses) == [202] + [409] * 5
    assert RunInput.objects.filter(run=run).count() == 1
    assert RunEvent.objects.filter(run=run, type="input.received").count() == 1
