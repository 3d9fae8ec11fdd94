"""Shared set-up of the refund tests: the scripted refund, taken by a worker to its approval
(the agent looks ORD-1003 up, proposes issue_refund and waits WAITING_APPROVAL)."""

import json
from typing import NamedTuple

from django.contrib.auth.models import User

from agentportal.models import Merchant
from approvals.models import Approval
from runs import extensions, nodes, worker
from runs.models import AgentRun, Node, RunStatus
from runs.services import Lease
from runs.snapshot import CallStatus, snapshot_parse
from runs.step_protocol import ToolOutcome
from runs.tools import TOOLS
from tests import factories

REFUND = "I want a refund for ORD-1003 amount 20"


class Waiting(NamedTuple):
    """A run waiting for a person's decision on its refund."""

    run: AgentRun
    approval: Approval

    @property
    def interrupt_id(self) -> str:
        return self.approval.interrupt_id


def refund_run_waiting(message: str = REFUND, customer: str = "alice") -> Waiting:
    """Queue the customer's refund in the demo shop and let a worker take it to its
    approval."""
    user = User.objects.get(username=customer)
    shop = Merchant.objects.get(slug="demo-shop")
    run = factories.run_queue(customer=user, merchant=shop, message=message)
    worker.tick()
    run.refresh_from_db()
    assert run.status == RunStatus.WAITING_APPROVAL, (run.status, run.error_code, run.error_detail)
    return Waiting(run, Approval.objects.get(run=run))


def approved_refund_with_a_broken_snapshot(api) -> tuple[AgentRun, dict]:
    """A refund approved by sam, whose snapshot is then tampered with (version 1) before a
    worker runs it; returns the run and its good snapshot."""
    run, approval = refund_run_waiting()
    api("sam").post(
        f"/api/v1/approvals/{approval.interrupt_id}/decision",
        {"decision": "approve"},
        format="json",
    )
    good = AgentRun.objects.get(pk=run.pk).state_snapshot
    AgentRun.objects.filter(pk=run.pk).update(state_snapshot={**good, "version": 1})
    return run, good


def execute_approved_refund(lease: Lease) -> None:
    """What the tools node does for an approved refund, without the step commit after it."""
    run = lease.run
    if run.next_node != Node.TOOLS or not run.state_snapshot:
        return
    if snapshot_parse(run.state_snapshot).pending_tool_call.status != CallStatus.APPROVED_EXECUTING:
        return
    for index, call in enumerate(run.messages[-1].get("tool_calls") or []):
        if call["function"]["name"] != "issue_refund":
            continue
        tool = TOOLS["issue_refund"]
        arguments = tool.args_model.model_validate(json.loads(call["function"]["arguments"]))
        outcome = extensions.interrupt_for(tool.policy).pause(
            run=run, lease=lease, tool=tool, args=arguments, key=nodes.tool_key(run, index)
        )
        assert isinstance(outcome, ToolOutcome) and outcome.recorded
