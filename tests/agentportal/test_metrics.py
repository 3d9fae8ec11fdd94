"""/metrics: refused without its token; with it, the figures move when runs run."""

from datetime import timedelta

import pytest
import time_machine
from django.test import Client
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from runs import worker
from runs.models import AgentRun
from runs.services import heartbeat_record
from tests import factories
from tests.approvals.policy_helpers import approval_of, policy_set, refund_run
from tests.approvals.refund_helpers import refund_run_waiting
from tests.pages import signed_in

TOKEN = "scrape-token-for-tests"
STATUS = "What is the status of order ORD-1001?"
REFUND = "I want a refund for order ORD-1001, amount 5"


@pytest.fixture
def metrics_on(settings):
    settings.AGENTPORTAL = {**settings.AGENTPORTAL, "METRICS_TOKEN": TOKEN}


def _scrape() -> dict[tuple[str, tuple], float]:
    response = Client().get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain")
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(response.content.decode())
        for sample in family.samples
    }


@pytest.mark.django_db
def test_metrics_are_off_without_a_token_setting():
    assert Client().get("/metrics").status_code == 404


@pytest.mark.django_db
@pytest.mark.usefixtures("metrics_on")
@pytest.mark.parametrize("authorization", [None, "Bearer wrong", f"Basic {TOKEN}", TOKEN + "x"])
def test_metrics_are_refused_without_the_token(authorization):
    headers = {"HTTP_AUTHORIZATION": authorization} if authorization else {}

    response = Client().get("/metrics", **headers)

    assert response.status_code == 401
    assert response["WWW-Authenticate"].startswith("Bearer")
    assert b"agentportal_" not in response.content


@pytest.mark.django_db
@pytest.mark.usefixtures("metrics_on")
def test_the_metrics_move_when_runs_run(demo):
    # given two queued runs of alice's, one of them a refund that will wait for a decision
    alice = demo.memberships.get(user__username="alice").user
    before = _scrape()
    for message in (STATUS, REFUND):
        factories.run_queue(customer=alice, merchant=demo, message=message)
    queued = _scrape()

    # when a worker executes them
    worker.tick()
    after = _scrape()

    # then the queue emptied, one run waits for approval, and the model calls were counted
    shop = ("shop", demo.slug)
    assert queued[("agentportal_runs", (shop, ("status", "QUEUED")))] == 2
    assert ("agentportal_runs", (shop, ("status", "QUEUED"))) not in after
    assert after[("agentportal_runs", (shop, ("status", "WAITING_APPROVAL")))] == 1
    assert after[("agentportal_approvals_pending", (shop,))] == 1
    responded = ("agentportal_model_attempts", (("outcome", "RESPONDED"),))
    assert after[responded] >= before.get(responded, 0) + 3
    first_step = ("agentportal_queue_to_first_step_seconds", (("quantile", "0.5"),))
    assert after[first_step] >= 0
    assert ("agentportal_model_step_seconds", (("quantile", "0.95"),)) in after
    assert after[("agentportal_webhook_backlog", ())] >= 0


@pytest.mark.django_db
@pytest.mark.usefixtures("metrics_on")
def test_the_details_healthz_keeps_from_anyone_are_in_the_metrics():
    # given a stalled shop and a worker process waiting on a model endpoint
    shop = factories.merchant_create(slug="stalled-shop")
    customer = factories.user_create(merchant=shop)
    run = factories.run_queue(customer=customer, merchant=shop, message=STATUS)
    AgentRun.objects.filter(pk=run.pk).update(updated_at=timezone.now() - timedelta(minutes=2))
    endpoint = {"in_flight": 4, "waiting": 2, "paused_seconds": 1.5}
    heartbeat_record(
        name="process:web-7:4242",
        report={"in_flight": 4, "free_slots": 252, "model_endpoints": {"m@http://llm": endpoint}},
    )

    # when scraped
    scraped = _scrape()

    # then the shop and the endpoint's queue are named there
    assert scraped[("agentportal_queue_stalled", (("shop", "stalled-shop"),))] == 1
    labels = (("endpoint", "m@http://llm"), ("process", "web-7:4242"))
    assert scraped[("agentportal_model_endpoint_calls", (*labels, ("state", "in_flight")))] == 4
    assert scraped[("agentportal_model_endpoint_calls", (*labels, ("state", "waiting")))] == 2
    assert scraped[("agentportal_model_endpoint_paused_seconds", labels)] == 1.5


def _decided_at(approval, clock, minutes: int, api, *, look_after: int | None = None) -> None:
    """sam looks at the call `look_after` minutes after its pause (or never) and approves it
    over the API `minutes` after."""
    if look_after is not None:
        clock.shift(timedelta(minutes=look_after))
        signed_in("sam").get(f"/portal/approvals/{approval.interrupt_id}/")
    clock.shift(timedelta(minutes=minutes - (look_after or 0)))
    response = api("sam").post(
        f"/api/v1/approvals/{approval.interrupt_id}/decision",
        {"decision": "approve", "args_digest": approval.digest_on_the_table},
        format="json",
    )
    assert response.status_code == 200, response.json()


@pytest.mark.django_db
@pytest.mark.usefixtures("metrics_on")
def test_time_to_first_look_and_to_decide_by_shop(demo, api):
    # given a refund sam opens after a minute and approves after five
    with time_machine.travel(timezone.now(), tick=False) as clock:
        approval = refund_run_waiting().approval
        _decided_at(approval, clock, 5, api, look_after=1)

    # when
    scraped = _scrape()

    # then
    shop = ("shop", demo.slug)
    assert scraped[("agentportal_decision_first_view_seconds", (("quantile", "0.5"), shop))] == 60
    assert scraped[("agentportal_decision_seconds", (("quantile", "0.5"), shop))] == 300


@pytest.mark.django_db
@pytest.mark.usefixtures("metrics_on")
def test_a_call_decided_unopened_was_first_seen_when_decided(demo, api):
    # given a refund approved over the API after three minutes, its page never opened
    with time_machine.travel(timezone.now(), tick=False) as clock:
        approval = refund_run_waiting().approval
        _decided_at(approval, clock, 3, api)

    # when
    scraped = _scrape()

    # then
    shop = ("shop", demo.slug)
    assert scraped[("agentportal_decision_first_view_seconds", (("quantile", "0.95"), shop))] == 180
    assert scraped[("agentportal_decision_seconds", (("quantile", "0.95"), shop))] == 180


@pytest.mark.django_db
@pytest.mark.usefixtures("metrics_on")
def test_calls_the_policy_approved_at_once_waited_for_nobody(demo):
    # given a refund the shop's policy approves by its rule
    policy_set(demo, auto_approve_up_to="50.00")
    assert approval_of(refund_run(demo, "20")).decided_by_policy

    # when
    scraped = _scrape()

    # then no time to decide is reported for the shop
    assert not [key for key in scraped if key[0].startswith("agentportal_decision_")]
