"""Racing ticket commands and reconcile deliveries, with real threads on real connections."""

import pytest
from django.contrib.auth.models import User
from rest_framework.test import APIClient

from agentportal.models import Merchant
from approvals import plans
from approvals.models import BusinessEvent, PlanReview, Ticket
from runs import worker
from runs.models import RunEvent, RunInput, RunStatus
from tests import factories
from tests.approvals.plan_helpers import EXCHANGE
from tests.threads import in_threads

pytestmark = pytest.mark.django_db(transaction=True)


def _client(username: str) -> APIClient:
    key = factories.api_key_for(
        User.objects.get(username=username), Merchant.objects.get(slug="demo-shop")
    )
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    return client


def test_racing_decisions_and_reconciles_resume_the_run_once(demo):
    # given: a confirmed plan waiting for review
    run = factories.run_queue(
        customer=User.objects.get(username="alice"), merchant=demo, message=EXCHANGE
    )
    worker.tick()
    ticket = Ticket.objects.get(run=run)
    assert (
        _client("alice")
        .post(f"/api/v1/tickets/{ticket.pk}/confirm", {"proposal_version": 1}, format="json")
        .status_code
        == 200
    )
    plans.plan_reconcile(run_id=run.pk)
    reviewers = [_client("sam"), _client("sue")] * 3

    def decide(client: APIClient):
        return client.post(
            f"/api/v1/tickets/{ticket.pk}/decide",
            {"proposal_version": 1, "decision": "approve"},
            format="json",
        ).status_code

    # when: six decisions race, then six reconcile deliveries race
    statuses = in_threads([lambda c=c: decide(c) for c in reviewers])
    applied = in_threads([lambda: plans.plan_reconcile(run_id=run.pk)] * 6)

    # then: one decision, one event, one receipt, one resume
    assert sorted(statuses) == [200] + [409] * 5
    assert PlanReview.objects.filter(ticket=ticket).count() == 1
    assert BusinessEvent.objects.filter(ticket=ticket, kind="approved").count() == 1
    assert sum(applied) == 1
    assert RunEvent.objects.filter(run=run, type="plan.approved").count() == 1
    assert RunInput.objects.filter(run=run, kind="plan_review").count() == 1
    run.refresh_from_db()
    assert run.status == RunStatus.QUEUED


def test_a_cancel_racing_confirmations_leaves_the_plan_cancelled_and_no_error(demo):
    # given: a plan waiting for alice, who confirms from several tabs while the run is cancelled
    run = factories.run_queue(
        customer=User.objects.get(username="alice"), merchant=demo, message=EXCHANGE
    )
    worker.tick()
    ticket = Ticket.objects.get(run=run)
    clients = [_client("alice") for _ in range(4)]

    def confirm(client: APIClient) -> int:
        return client.post(
            f"/api/v1/tickets/{ticket.pk}/confirm", {"proposal_version": 1}, format="json"
        ).status_code

    def cancel() -> int:
        return clients[0].post(f"/api/v1/runs/{run.pk}/cancel").status_code

    # when
    statuses = in_threads([cancel, *(lambda c=c: confirm(c) for c in clients)])

    # then: whichever came first, the run and its plan end cancelled; nobody got a 500
    assert statuses[0] == 200
    assert set(statuses[1:]) <= {200, 409}
    assert statuses[1:].count(200) <= 1
    run.refresh_from_db()
    assert run.status == RunStatus.CANCELLED
    assert Ticket.objects.get().status == "CANCELLED"
    plans.plan_reconcile(run_id=run.pk)
    run.refresh_from_db()
    assert run.status == RunStatus.CANCELLED
