"""An undecided call is escalated once, when its policy's time has passed."""

import hashlib
import hmac
import json
from datetime import timedelta

import pytest
import time_machine
from django_q.models import Schedule

from agentportal.models import Role
from approvals import tasks
from approvals.gate import escalation
from approvals.models import Approval, Delivery, DeliveryStatus, Transport
from approvals.notify import outbox
from runs.models import RunEvent, RunStatus
from tests import factories
from tests.approvals.policy_helpers import approval_of, policy_set, refund_run
from tests.approvals.webhook_helpers import SECRET

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def hook(receiver):
    return receiver()


@pytest.fixture
def waiting(demo, hook):
    """A 20.00 refund waiting under a policy that escalates after 10 minutes, to the shop's
    operator and the policy's address."""
    operator = factories.user_create("olivia", merchant=demo, role=Role.OPERATOR)
    operator.email = "olivia@example.com"
    operator.save()
    policy_set(demo, escalate_after_seconds=600, escalate_to_email="duty@example.com")
    run = refund_run(demo, "20")
    assert run.status == RunStatus.WAITING_APPROVAL
    Delivery.objects.all().delete()  # the approval.requested announcements
    return run, approval_of(run)


def escalations(run) -> int:
    return RunEvent.objects.filter(run=run, type="approval.escalated").count()


def test_the_escalation_is_scheduled_when_the_call_is_created(waiting):
    _, approval = waiting

    schedule = Schedule.objects.get(name=f"escalate:{approval.interrupt_id}")

    assert schedule.func == "approvals.tasks.escalate"
    assert schedule.schedule_type == Schedule.ONCE
    assert schedule.next_run == approval.escalate_at
    # ten minutes after the call was made, which expires after the default 30
    assert approval.expires_at - approval.escalate_at == timedelta(seconds=1800 - 600)


def test_an_undecided_call_is_escalated_once_after_the_configured_time(waiting, hook, mailoutbox):
    run, approval = waiting
    mailoutbox.clear()

    # when: the schedule fires a second early
    with time_machine.travel(approval.created_at + timedelta(seconds=599)):
        early = tasks.escalate(approval.interrupt_id)

    # then: nothing happens
    assert early is False
    assert escalations(run) == 0

    # when: the schedule fires on time, and the sweep and the task run again after it
    with time_machine.travel(approval.created_at + timedelta(seconds=601)):
        fired = tasks.escalate(approval.interrupt_id)
        swept = escalation.approvals_escalate_due()
        again = tasks.escalate(approval.interrupt_id)
        outbox.deliveries_deliver_due()

    # then: escalated exactly once: one event, one email, one signed webhook
    assert (fired, swept, again) == (True, 0, False)
    assert escalations(run) == 1
    approval.refresh_from_db()
    assert approval.escalated_at is not None
    emails = [m for m in mailoutbox if m.subject.startswith("Escalated")]
    assert sorted(email.to for email in emails) == [["duty@example.com"], ["olivia@example.com"]]
    assert all(approval.interrupt_id in email.body for email in emails)
    [delivery] = Delivery.objects.filter(transport=Transport.WEBHOOK)
    assert (delivery.event, delivery.status) == ("approval.escalated", DeliveryStatus.DELIVERED)
    [(headers, body)] = hook.requests
    assert headers["X-AgentPortal-Event"] == "approval.escalated"
    expected = "sha256=" + hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()
    assert headers["X-AgentPortal-Signature"] == expected
    assert json.loads(body)["interrupt_id"] == approval.interrupt_id


def test_maintain_escalates_a_call_whose_schedule_was_lost(waiting):
    run, approval = waiting
    Schedule.objects.all().delete()

    with time_machine.travel(approval.created_at + timedelta(seconds=660)):
        swept = escalation.approvals_escalate_due()

    assert swept == 1
    assert escalations(run) == 1


def test_a_call_decided_in_time_is_never_escalated(waiting, api, mailoutbox):
    run, approval = waiting

    # given: sam approves after five minutes
    with time_machine.travel(approval.created_at + timedelta(seconds=300)):
        response = api("sam").post(
            f"/api/v1/approvals/{approval.interrupt_id}/decision",
            {"decision": "approve"},
            format="json",
        )
    assert response.status_code == 200

    # when: the schedule fires and the sweep runs after the escalation time
    with time_machine.travel(approval.created_at + timedelta(seconds=700)):
        fired = tasks.escalate(approval.interrupt_id)
        swept = escalation.approvals_escalate_due()

    # then: nothing escalated
    assert (fired, swept) == (False, 0)
    assert escalations(run) == 0
    assert Approval.objects.get(pk=approval.pk).escalated_at is None
    assert not Delivery.objects.filter(event="approval.escalated").exists()
    assert not [m for m in mailoutbox if m.subject.startswith("Escalated")]


def test_the_api_shows_when_a_call_was_escalated(waiting, api):
    _, approval = waiting
    with time_machine.travel(approval.created_at + timedelta(seconds=601)):
        escalation.approvals_escalate_due()

    body = api("sam").get(f"/api/v1/approvals/{approval.interrupt_id}").json()

    assert body["escalated_at"] is not None
    assert body["status"] == "PENDING_APPROVAL"


def test_no_escalation_without_a_policy_time(demo):
    policy_set(demo, two_approvers_from="200.00")
    run = refund_run(demo, "20")

    assert approval_of(run).escalate_at is None
    assert not Schedule.objects.filter(name__startswith="escalate:").exists()
