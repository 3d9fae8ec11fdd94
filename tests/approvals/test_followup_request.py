"""The after-sales agent's follow-up: create_followup_request registers one request for the
order, due within a day (the runtime's followup node is tested in tests/runs)."""

from datetime import timedelta

from django.contrib.auth.models import User
from django.utils import timezone

from approvals.models import FollowupRequest
from runs import worker
from runs.models import RunStatus, ToolExecution
from tests import factories


def test_a_follow_up_is_registered_once_with_a_due_time(demo):
    # given
    run = factories.run_queue(
        customer=User.objects.get(username="alice"),
        merchant=demo,
        message="Please follow up on ORD-1001 with the courier",
    )

    # when
    worker.tick()

    # then
    run.refresh_from_db()
    assert run.status == RunStatus.COMPLETED
    followup = FollowupRequest.objects.get()
    assert followup.order.number == "ORD-1001"
    assert followup.run_id == run.pk
    assert timedelta(hours=23) < followup.due_at - timezone.now() <= timedelta(hours=24)
    assert "follow up on order ORD-1001" in run.result
    [execution] = ToolExecution.objects.filter(run=run)
    assert execution.tool == "create_followup_request"
    assert execution.result["followup_id"] == followup.pk
