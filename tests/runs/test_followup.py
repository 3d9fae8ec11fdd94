"""A follow-up tool runs alone, in the followup node, once (DESIGN 5, 8): the test extension's
`ask_courier`, idempotent by the call's key as a real one is."""

import json
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.utils import timezone

from agentportal.models import Merchant
from runs import worker
from runs.models import AgentRun, Node, RunEvent, RunStatus, ToolExecution
from runs.services import LostRun
from tests import factories
from tests.extension_app import parcels
from tests.runs import helpers

COURIER = parcels.COURIER


@pytest.fixture
def courier_desk() -> dict[str, dict[str, Any]]:
    """The colleagues' follow-up requests, by the key of the call that asked: empty before and
    after the test."""
    parcels.COURIER_DESK.clear()
    yield parcels.COURIER_DESK
    parcels.COURIER_DESK.clear()


@pytest.fixture
def shop(db, courier_desk) -> Merchant:
    """A shop whose agent tracks parcels and may ask the courier to follow up; its customer
    pat has parcel PCL-1 on its way."""
    shop = factories.merchant_create()
    factories.release_publish(
        merchant=shop, model=f"scripted:{parcels.SCRIPT}", tools=[*parcels.TOOLS, COURIER]
    )
    helpers.customer_with_parcel(shop, "PCL-1", username="pat")
    return shop


def _queue(shop: Merchant, message: str) -> AgentRun:
    return factories.run_queue(
        customer=User.objects.get(username="pat"), merchant=shop, message=message
    )


def test_a_follow_up_is_registered_once(shop, courier_desk):
    run = _queue(shop, "Please follow up on PCL-1 with the courier")

    worker.tick()

    run.refresh_from_db()
    assert run.status == RunStatus.COMPLETED
    [(key, request)] = courier_desk.items()
    assert request["parcel_id"] == "PCL-1"
    assert request["run_id"] == run.pk
    assert run.result == "A colleague will follow up on parcel PCL-1 with the courier."
    [execution] = ToolExecution.objects.filter(run=run)
    assert execution.tool == COURIER
    assert execution.result["request"] == key


def test_a_follow_up_beside_other_calls_is_refused_and_nothing_is_registered(shop, courier_desk):
    # given: a model turn that asked for a follow-up together with another tool
    run = _queue(shop, "Please follow up on PCL-1")
    calls = [
        (parcels.TRACK, {"parcel_id": "PCL-1"}),
        (COURIER, {"parcel_id": "PCL-1", "note": "courier"}),
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

    # then: the tracking ran, the follow-up was refused with a reason the model reads
    run.refresh_from_db()
    refused = ToolExecution.objects.get(run=run, tool=COURIER)
    assert refused.status == "FAILED"
    assert "only tool call" in refused.result["error"]
    assert ToolExecution.objects.get(run=run, tool=parcels.TRACK).status == "SUCCEEDED"
    assert courier_desk == {}
    assert run.status == RunStatus.COMPLETED


def test_a_replayed_followup_node_registers_one_follow_up(shop, courier_desk):
    # given: worker A lost its lease in the followup node after executing the tool
    run = _queue(shop, "Please follow up on PCL-1")
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
    assert len(courier_desk) == 1
    assert RunEvent.objects.filter(run=run, type="tool.result").count() == 1
