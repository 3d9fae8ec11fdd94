"""An operator is a role in a shop: it repairs that shop's parked runs and sees that shop, never
the others. Seeing every shop is for superusers, the platform's own staff."""

import pytest

from agentportal.models import Membership, Role
from approvals.models import Approval
from runs import worker
from runs.models import AgentRun, RunStatus
from tests import factories
from tests.approvals.refund_helpers import approved_refund_with_a_broken_snapshot
from tests.pages import signed_in

pytestmark = pytest.mark.django_db

REFUND = "I want a refund for ORD-1003 amount 20"


@pytest.fixture
def other_shop_operator():
    """Opal, an operator of another shop only."""
    shop = factories.merchant_create("other-shop-2")
    return factories.user_create(username="opal", merchant=shop, role=Role.OPERATOR)


def test_an_operator_of_one_shop_sees_nothing_of_another(demo, api, other_shop_operator):
    # given a demo-shop run waiting for a refund decision
    api("alice").post("/api/v1/runs", {"message": REFUND}, format="json", HTTP_IDEMPOTENCY_KEY="r")
    worker.tick()
    approval = Approval.objects.get(merchant=demo)
    opal = signed_in(other_shop_operator)

    # when opal looks at the admin's runs and approvals, the inbox and the approval page
    runs = opal.get("/admin/runs/agentrun/")
    approvals = opal.get("/admin/approvals/approval/")
    inbox = opal.get("/portal/")
    page = opal.get(f"/portal/approvals/{approval.interrupt_id}/")

    # then demo-shop's run and call appear nowhere
    assert runs.status_code == 200 and str(approval.run_id) not in runs.text
    assert approvals.status_code == 200 and approval.interrupt_id not in approvals.text
    assert approval.interrupt_id not in inbox.text
    assert page.status_code == 404


def test_a_superuser_sees_every_shop(demo, api, other_shop_operator):
    api("alice").post("/api/v1/runs", {"message": REFUND}, format="json", HTTP_IDEMPOTENCY_KEY="r")
    worker.tick()
    approval = Approval.objects.get(merchant=demo)
    admin = signed_in("admin")

    page = admin.get(f"/portal/approvals/{approval.interrupt_id}/")
    runs = admin.get("/admin/runs/agentrun/")

    assert page.status_code == 200
    assert str(approval.run_id) in runs.text


def test_only_the_shops_own_operator_hands_back_its_parked_run(demo, api, other_shop_operator):
    # given a parked demo-shop run; opal is also a supervisor there, but not its operator
    run, good = approved_refund_with_a_broken_snapshot(api)
    worker.tick()
    AgentRun.objects.filter(pk=run.pk).update(state_snapshot=good)
    Membership.objects.create(user=other_shop_operator, merchant=demo, role=Role.SUPERVISOR)
    demo_operator = factories.user_create(username="otto", merchant=demo, role=Role.OPERATOR)
    action = {"action": "unpark_selected", "_selected_action": [run.pk]}

    # when opal tries to hand it back, then demo-shop's own operator does
    refused = signed_in(other_shop_operator).post("/admin/runs/agentrun/", action, follow=True)
    still_parked = AgentRun.objects.get(pk=run.pk).status
    signed_in(demo_operator).post("/admin/runs/agentrun/", action, follow=True)

    # then opal was told it is not hers to repair, and only otto's hand counted
    assert still_parked == RunStatus.PARKED
    assert "only its shop&#x27;s operators repair it" in refused.text
    assert AgentRun.objects.get(pk=run.pk).status == RunStatus.QUEUED
