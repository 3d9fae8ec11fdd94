"""create_followup_request runs alone, in the followup node, once (DESIGN 5, 8)."""

import json
from datetime import timedelta

from django.contrib.auth.models import User
from django.utils import timezone

from approvals.models import FollowupRequest
from runs import worker
from runs.models import AgentRun, Node, RunEvent, RunStatus, ToolExecution
from runs.services import LostRun
from tests import factories
from tests.runs import helpers


def _queue(demo, message: str) -> AgentRun:
    return factories.run_queue(
        customer=User.objects.get(username="alice"), merchant=demo, message=message
    )


def test_a_follow_up_is_registered_once_with_a_due_time(demo):
    run = _queue(demo, "Please follow up on ORD-1001 with the courier")

    worker.tick()

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


def test_a_follow_up_beside_other_calls_is_refused_and_nothing_is_registered(demo):
    # given: a model turn that asked for a follow-up together with another tool
    run = _queue(demo, "Please follow up on ORD-1001")
    calls = [
        ("lookup_order", {"order_id": "ORD-1001"}),
        ("create_followup_request", {"order_id": "ORD-1001", "note": "courier"}),
    ]
    AgentRun.objects.filter(pk=run.pk).update(
        next_node=Node.TOOLS,
        step=1,
        messages=[
            *run.messages,
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": f"call_{index}",
                        "type": "function",
                        "function": {"name": name, "arguments": json.dumps(arguments)},
                    }
                    for index, (name, arguments) in enumerate(calls)
                ],
            },
        ],
    )

    # when: a worker executes the turn
    worker.tick()

    # then: the lookup ran, the follow-up was refused with a reason the model reads
    run.refresh_from_db()
    refused = ToolExecution.objects.get(run=run, tool="create_followup_request")
    assert refused.status == "FAILED"
    assert "only tool call" in refused.result["error"]
    assert ToolExecution.objects.get(run=run, tool="lookup_order").status == "SUCCEEDED"
    assert not FollowupRequest.objects.exists()
    assert run.status == RunStatus.COMPLETED


def test_a_replayed_followup_node_registers_one_follow_up(demo):
    # given: worker A lost its lease in the followup node after executing the tool
    run = _queue(demo, "Please follow up on ORD-1001")
    stale = helpers.run_claim()
    while stale.run.next_node != Node.FOLLOWUP:
        helpers.run_step(stale)
    AgentRun.objects.filter(pk=run.pk).update(
        lease_expires_at=timezone.now() - timedelta(seconds=1)
    )
    fresh = helpers.run_claim()
    try:
        helpers.run_step(stale)
        raise AssertionError("the stale worker committed")
    except LostRun:
        pass

    # when: the new lease holder runs the node again
    worker.run_slices([fresh])

    # then: one follow-up, one result, a completed run
    run.refresh_from_db()
    assert run.status == RunStatus.COMPLETED
    assert FollowupRequest.objects.count() == 1
    assert RunEvent.objects.filter(run=run, type="tool.result").count() == 1
