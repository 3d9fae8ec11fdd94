"""Shared by the tests of tool-call decisions over REST (API.md: resume, approvals, problem
codes; DESIGN 6.1): the two doors to a decision, what a refused decision must leave as it was,
the run's timeline and snapshot, and a tampered snapshot.

Every run here is the scripted refund: the agent looks ORD-1003 up, proposes issue_refund
(policy: approval) and waits WAITING_APPROVAL; runs.worker.tick() drives it in-process.
"""

import json
from dataclasses import dataclass
from typing import Any

from approvals.models import Approval, Refund
from runs import worker
from runs.models import AgentRun, RunEvent, ToolExecution
from runs.snapshot import snapshot_parse
from tests.approvals.refund_helpers import Waiting

APPROVALS = "/api/v1/approvals"
APPROVAL_FIELDS = {
    "required_approvals",
    # whose approvals count: the policy's band's group (README, "Approval policies")
    "required_group",
    "approvals_given",
    "policy",
    "escalated_at",
    # who is on the call (README, "Who is on a call"), added to API.md's representation
    "assigned_to",
    "interrupt_id",
    "run_id",
    "tool_name",
    "proposed_args",
    "approved_args",
    "executed_args",
    "args_digest",
    "status",
    "decision",
    "reason",
    "decided_by",
    "decided_at",
    "expires_at",
    "cancel_cause",
    "result",
    "created_at",
}
PROPOSED = {"order_id": "ORD-1003", "amount": "20.00", "reason": "customer request"}


@dataclass(frozen=True)
class Endpoint:
    """The two doors to one decision: /runs/{id}/resume and /approvals/{id}/decision."""

    name: str

    def url(self, run_id, interrupt_id: str) -> str:
        if self.name == "resume":
            return f"/api/v1/runs/{run_id}/resume"
        return f"/api/v1/approvals/{interrupt_id}/decision"

    def body(self, interrupt_id: str, fields: dict[str, Any]) -> dict[str, Any]:
        return {"interrupt_id": interrupt_id, **fields} if self.name == "resume" else dict(fields)

    def post(self, client, run_id, interrupt_id: str, **fields):
        return client.post(
            self.url(run_id, interrupt_id), self.body(interrupt_id, fields), format="json"
        )

    def post_raw(self, client, run_id, interrupt_id: str, raw: str):
        return client.post(
            self.url(run_id, interrupt_id), data=raw, content_type="application/json"
        )

    @property
    def not_found_code(self) -> str:
        return "run_not_found" if self.name == "resume" else "not_found"


RESUME, DECISION = Endpoint("resume"), Endpoint("decision")


def event_types(run_id) -> list[str]:
    return list(
        RunEvent.objects.filter(run_id=run_id).order_by("seq").values_list("type", flat=True)
    )


def recorded(waiting: Waiting) -> dict[str, Any]:
    """Everything a refused decision must leave as it was."""
    run = AgentRun.objects.get(pk=waiting.run.pk)
    approval = Approval.objects.get(pk=waiting.approval.pk)
    return {
        "run": (
            run.status,
            run.version,
            run.step,
            run.next_node,
            run.state_snapshot,
            run.last_event_seq,
            run.deadline_at,
            run.updated_at,
        ),
        "approval": (
            approval.status,
            approval.decision,
            approval.reason,
            approval.approved_args,
            approval.args_digest,
            approval.decided_by_id,
            approval.decided_by_key_id,
            approval.decided_at,
            approval.updated_at,
        ),
        "events": list(
            RunEvent.objects.filter(run_id=run.pk)
            .order_by("seq")
            .values_list("seq", "type", "data")
        ),
        "refunds": Refund.objects.count(),
        "executions": ToolExecution.objects.filter(run_id=run.pk).count(),
    }


def snapshot_status(run_id) -> str:
    return snapshot_parse(AgentRun.objects.get(pk=run_id).state_snapshot).pending_tool_call.status


def refund_executions(waiting: Waiting):
    return ToolExecution.objects.filter(idempotency_key=waiting.approval.tool_execution_key)


def finish(waiting: Waiting) -> AgentRun:
    worker.tick()
    return AgentRun.objects.get(pk=waiting.run.pk)


def _set(path: str, value: Any):
    def tamper(snapshot: dict) -> dict:
        *parents, last = path.split(".")
        node = snapshot
        for name in parents:
            node = node[name]
        node[last] = value
        return snapshot

    return tamper


def tamper_snapshot(run: AgentRun, tamper) -> None:
    snapshot = json.loads(json.dumps(AgentRun.objects.get(pk=run.pk).state_snapshot))
    AgentRun.objects.filter(pk=run.pk).update(state_snapshot=tamper(snapshot))
