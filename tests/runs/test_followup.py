"""A follow-up tool runs alone, in the followup node, once (DESIGN 5, 8).

The test extension's parcels have no follow-up tool: this module registers one for its own
tests, asking the courier about a parcel, idempotent by the call's key as a real one is."""

import json
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.utils import timezone
from pydantic import BaseModel, ConfigDict, Field

from agentportal.models import Merchant
from runs import extensions, worker
from runs.models import AgentRun, Node, RunEvent, RunStatus, ToolExecution
from runs.scripted import Transcript
from runs.services import LostRun
from runs.tools import TOOLS, Policy, Tool, ToolContext, ToolError
from tests import factories
from tests.extension_app import parcels
from tests.extension_app.models import Parcel
from tests.runs import helpers

SCRIPT = "parcels-followup"
COURIER = "ask_courier"


class CourierArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    parcel_id: str = Field(pattern=r"^PCL-\d{1,12}$")
    note: str = Field(max_length=500)


def followup_script(turn: Transcript, declared: set[str]) -> str | tuple[str, dict[str, Any]]:
    """The parcels script, except that asked to follow up, the agent asks the courier."""
    found = next(filter(None, (parcels.PARCEL_NUMBER.search(text) for text in turn.said)), None)
    if found is None or "follow up" not in turn.text.lower():
        return parcels.parcels_script(turn, declared)
    number = found.group(0).upper()
    if COURIER not in turn.results:
        return (COURIER, {"parcel_id": number, "note": turn.text[:500]})
    asked = turn.results[COURIER]
    if "error" in asked:
        return f"I could not ask the courier about parcel {number}: {asked['error']}"
    return f"A colleague will follow up on parcel {number} with the courier."


@pytest.fixture
def courier_desk(monkeypatch) -> dict[str, dict[str, Any]]:
    """The follow-up tool and its script, registered for one test; returns the courier's
    desk: each request it registered, by the key of the call that asked."""
    desk: dict[str, dict[str, Any]] = {}

    def ask_courier(args: CourierArgs, context: ToolContext) -> dict[str, Any]:
        parcel = Parcel.objects.filter(
            merchant_id=context.merchant_id, customer_id=context.account_id, number=args.parcel_id
        ).first()
        if parcel is None:
            raise ToolError(f"there is no parcel {args.parcel_id} for this customer")
        desk.setdefault(
            context.idempotency_key,
            {"run_id": context.run_id, "parcel_id": parcel.number, "note": args.note},
        )
        return {"status": "registered", "request": context.idempotency_key}

    tool = Tool(
        name=COURIER,
        description="Ask a colleague to follow up with the courier about a parcel. "
        "Call it alone, with no other tool in the same turn.",
        args_model=CourierArgs,
        policy=Policy.FOLLOWUP,
        executor=ask_courier,
    )
    monkeypatch.setitem(TOOLS, COURIER, tool)
    monkeypatch.setitem(extensions._registry.scripts, SCRIPT, followup_script)
    return desk


@pytest.fixture
def shop(db, courier_desk) -> Merchant:
    """A shop whose agent tracks parcels and may ask the courier to follow up; its customer
    pat has parcel PCL-1 on its way."""
    shop = factories.merchant_create()
    factories.release_publish(
        merchant=shop, model=f"scripted:{SCRIPT}", tools=[*parcels.TOOLS, COURIER]
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
