"""People's secrets and names: passwords are checked, and customers never see staff logins."""

import pytest
from django.contrib.auth.models import User

from approvals.models import Approval
from runs import worker
from tests import factories
from tests.pages import signed_in

pytestmark = pytest.mark.django_db


def test_a_supervisor_cannot_change_her_password_to_1(demo):
    # given sam signed in, changing his password on the admin's page
    client = signed_in("sam")

    # when he picks "1"
    response = client.post(
        "/admin/password_change/",
        {"old_password": "demo", "new_password1": "1", "new_password2": "1"},
    )

    # then the form refuses it and the old password still works
    assert response.status_code == 200
    assert "This password is too short" in response.text
    assert User.objects.get(username="sam").check_password("demo")


def test_customers_read_who_decided_by_the_shops_display_name(demo, api):
    # given alice's refund, approved by sam
    alice = User.objects.get(username="alice")
    run = factories.run_queue(
        customer=alice, merchant=demo, message="I want a refund for ORD-1003 amount 20"
    )
    worker.tick()
    approval = Approval.objects.get(run=run)
    api("sam").post(
        f"/api/v1/approvals/{approval.interrupt_id}/decision",
        {"decision": "approve"},
        format="json",
    )

    # when alice reads her run's events
    events = api("alice").get(f"/api/v1/runs/{run.pk}/events").json()["events"]

    # then the decision is by "a supervisor", and sam's login is nowhere
    [decided] = [event for event in events if event["type"] == "approval.decided"]
    assert decided["data"]["decided_by"] == "a supervisor"
    assert "sam" not in str(events)


def test_a_takeover_is_told_to_the_customer_without_the_supervisors_login(demo, api):
    alice = api("alice")
    conversation = alice.post("/api/v1/conversations", {}, format="json").json()["id"]
    said = alice.post(
        f"/api/v1/conversations/{conversation}/messages",
        {"text": "What is the status of order ORD-1001?"},
        format="json",
    )

    api("sam").post(
        f"/api/v1/conversations/{conversation}/messages", {"text": "/takeover"}, format="json"
    )

    events = alice.get(f"/api/v1/runs/{said.json()['run_id']}/events").json()["events"]
    assert events[-1]["data"]["reason"] == "/takeover by a supervisor"
    assert "sam" not in str(events)
