"""A sensitive tool call as the worker meets it (DESIGN 6.1): paused for a person's decision,
or decided at once by the shop's policy, then executed exactly once with the approved
arguments. Decisions themselves are approvals.gate.services.

Lock order: AgentRun -> Approval.
"""

import json
import logging
from datetime import timedelta
from typing import Any

from django.db import transaction
from django.utils import timezone
from pydantic import BaseModel, ValidationError

from agentportal import errors
from agentportal.problems import pydantic_errors
from approvals import locks
from approvals.audit.record import AGENT, policy_actor, record_append, record_entry
from approvals.gate import escalation, policies
from approvals.gate.quorum import quorum_holds
from approvals.models import (
    Approval,
    ApprovalStatus,
    Decision,
    DecisionRecord,
    RecordKind,
    args_digest,
)
from approvals.notify import notifications
from runs import services as run_services
from runs.locks import run_lock
from runs.models import AgentRun, ErrorCode, Node, RunStatus, ToolExecution, ToolStatus
from runs.nodes import tool_key
from runs.releases import tools_declared
from runs.services import Lease, LostRun, StepCommit
from runs.snapshot import (
    CallStatus,
    CompositeSnapshot,
    PendingToolCall,
    RunContext,
    SnapshotError,
    StateSnapshot,
    interrupt_id_for,
    snapshot_call,
    snapshot_of,
    snapshot_parse,
    transition_check,
)
from runs.step_protocol import ToolOutcome
from runs.tools import CancellationToken, Tool, ToolContext, ToolError

logger = logging.getLogger(__name__)

Snapshot = StateSnapshot | CompositeSnapshot


def tool_args_validate(tool: Tool, arguments: Any) -> dict[str, Any]:
    """Validate arguments with the tool's schema; a 400 with field errors otherwise."""
    try:
        return tool.args_model.model_validate(arguments).model_dump(mode="json")
    except ValidationError as error:
        raise errors.InvalidInput(
            f"The arguments do not fit {tool.name}.",
            errors=pydantic_errors(error, "tool_args"),
        ) from error


def calls_snapshot(run: AgentRun, calls: list[PendingToolCall]) -> dict[str, Any]:
    """The run's snapshot of these calls: v2 for one, v3 for several paused together."""
    thread = getattr(run, "conversation_id", None) or run.pk
    return snapshot_of(calls, RunContext(thread_id=str(thread), run_id=str(run.pk)))


def call_replaced(run: AgentRun, snapshot: Snapshot, call: PendingToolCall) -> dict[str, Any]:
    """The snapshot with `call` in the place of the call with its interrupt id."""
    return calls_snapshot(
        run, [call if c.interrupt_id == call.interrupt_id else c for c in snapshot.calls]
    )


def call_moved(call: PendingToolCall, status: str, **changes: Any) -> PendingToolCall:
    transition_check(call.status, status)
    return call.model_copy(update={"status": status, "updated_at": timezone.now(), **changes})


def approval_interrupt(
    *, run: AgentRun, lease: Lease, tool: Tool, args: BaseModel, key: str
) -> StepCommit | ToolOutcome:
    """The tools node met a call that needs approval: pause for it, or act on its decision.

    The pause of APPROVAL_INTERRUPT (the `approval` policy).
    """
    interrupt_id = interrupt_id_for(key)
    call = None
    if run.state_snapshot:
        try:
            snapshot = snapshot_parse(run.state_snapshot)
        except SnapshotError:
            logger.error("run %s has an invalid state snapshot; left for an operator", run.pk)
            raise
        call = snapshot_call(snapshot, interrupt_id)
    if call is None:
        return _pause(run=run, tool=tool, args=args, key=key)
    if call.status == CallStatus.APPROVED_EXECUTING:
        return _execute_approved(run=run, lease=lease, tool=tool, call=call, key=key)
    approval = Approval.objects.get(interrupt_id=interrupt_id)
    outcome = {
        CallStatus.REJECTED: {"status": "rejected", "reason": approval.reason},
        CallStatus.EXPIRED: {"status": "expired", "reason": "nobody decided in time"},
        CallStatus.CANCELLED: {"status": "cancelled"},
    }.get(call.status)
    if outcome is None:
        raise SnapshotError(f"run {run.pk} is executing a call still {call.status}")
    return ToolOutcome(ToolStatus.FAILED, approval.proposed_args, outcome)


def _turn_calls(run: AgentRun, tool: Tool, args: BaseModel, key: str):
    """The calls of the run's current turn that need approval, from the one met (`key`) on,
    in the model's order: they pause together (a composite interrupt when several). A later
    call whose arguments do not fit its tool is left to fail on its own when reached."""
    found = [(tool, args, key)]
    calls = run.messages[-1].get("tool_calls") or []
    limit = run.release_snapshot["manifest"]["limits"]["max_tool_calls_per_turn"]
    keys = [tool_key(run, index) for index in range(min(len(calls), limit))]
    if key not in keys:
        return found
    declared = tools_declared(run.release_snapshot)
    for index in range(keys.index(key) + 1, len(keys)):
        later = declared.get(calls[index]["function"]["name"])
        if later is None or later.policy != tool.policy:
            continue
        try:
            arguments = json.loads(calls[index]["function"].get("arguments") or "{}")
            found.append((later, later.args_model.model_validate(arguments), keys[index]))
        except (ValueError, ValidationError):
            continue
    return found


def _pause(*, run: AgentRun, tool: Tool, args: BaseModel, key: str):
    """Pause for people: this call and the turn's later calls that need approval, each with
    its own Approval, expiry and policy. A call the shop's policy approves on its own is
    recorded as approved at once; when every call is, nothing waits and the run goes on to
    execute them in this same slice."""
    now = timezone.now()
    ttl = run.release_snapshot["manifest"]["limits"]["approval_ttl_seconds"]
    expires_at = now + timedelta(seconds=ttl)
    calls, records, events = [], [], []
    for each_tool, each_args, each_key in _turn_calls(run, tool, args, key):
        call, fields, call_events = _call_paused(
            run, each_tool, each_args, each_key, now=now, expires_at=expires_at
        )
        calls.append(call)
        records.append(fields)
        events += call_events
    waiting = any(call.status == CallStatus.PENDING_APPROVAL for call in calls)

    def record(locked_run: AgentRun) -> None:
        entries = []
        for fields in records:
            approval = Approval.objects.create(
                run_id=locked_run.pk, merchant_id=locked_run.merchant_id, **fields
            )
            entries.append(record_entry(approval=approval, kind=RecordKind.REQUESTED, actor=AGENT))
            if approval.decided_by_policy:
                entries.append(
                    record_entry(
                        approval=approval,
                        kind=RecordKind.POLICY_APPROVED,
                        actor=policy_actor(approval),
                    )
                )
            if approval.status == ApprovalStatus.PENDING_APPROVAL:
                notifications.approval_requested_notify(approval=approval)
                if approval.escalate_at is not None:
                    escalation.approval_escalation_schedule(approval=approval)
        # The record of the turn's calls in one statement: this runs in the transaction that
        # pauses the run.
        DecisionRecord.objects.bulk_create(entries)

    run_fields: dict[str, Any] = {"state_snapshot": calls_snapshot(run, calls)}
    if waiting:
        run_fields.update(status=RunStatus.WAITING_APPROVAL, lease_expires_at=None)
    # Not waiting: the run stays RUNNING and its next step executes the approved calls.
    return StepCommit(
        next_node=Node.TOOLS,
        advance_step=False,
        run_fields=run_fields,
        events=events,
        on_locked=record,
    )


def _call_paused(run: AgentRun, tool: Tool, args: BaseModel, key: str, *, now, expires_at):
    """One call of a pause: its snapshot entry, its Approval's fields and its events."""
    interrupt_id = interrupt_id_for(key)
    proposed = args.model_dump(mode="json")
    policy = policies.policy_version_current(merchant_id=run.merchant_id, tool_name=tool.name)
    needs = policies.call_requirement(version=policy, arguments=proposed, now=now)
    call = PendingToolCall(
        interrupt_id=interrupt_id,
        tool_name=tool.name,
        tool_args=proposed,
        status=CallStatus.APPROVED_EXECUTING if needs.auto_approve else CallStatus.PENDING_APPROVAL,
        expires_at=expires_at,
        decision=Decision.APPROVE.value if needs.auto_approve else None,
        result=None,
        updated_at=now,
    )
    fields: dict[str, Any] = {
        "interrupt_id": interrupt_id,
        "tool_name": tool.name,
        "tool_execution_key": key,
        "proposed_args": proposed,
        "expires_at": expires_at,
        "policy_version": policy,
        "required_approvals": needs.required_approvals,
        "required_group": needs.group or "",
    }
    events = [
        (
            "approval.requested",
            {
                "interrupt_id": interrupt_id,
                "tool_name": tool.name,
                "tool_args": proposed,
                "expires_at": expires_at.isoformat(),
                "required_approvals": needs.required_approvals,
                "required_group": needs.group,
                "policy": {"id": policy.policy_id, "version": policy.version} if policy else None,
            },
        )
    ]
    if needs.auto_approve:
        fields.update(
            status=ApprovalStatus.APPROVED_EXECUTING,
            decision=Decision.APPROVE,
            approved_args=proposed,
            args_digest=args_digest(proposed),
            decided_by_policy=True,
            decided_at=now,
        )
        events.append(
            (
                "approval.decided",
                {
                    "interrupt_id": interrupt_id,
                    "decision": Decision.APPROVE.value,
                    "decided_by": policy.label,
                    "by_policy": True,
                    "reason": None,
                    "tool_args": proposed,
                },
            )
        )
    # An escalation after the call's expiry would only announce the expiry.
    elif needs.escalate_at is not None and needs.escalate_at < expires_at:
        fields["escalate_at"] = needs.escalate_at
    return call, fields, events


# Why a run fails rather than execute its approved call.
QUORUM_LOST = (
    ErrorCode.APPROVER_REVOKED,
    "The call no longer has the approvals it needs: someone who approved it no longer holds a "
    "deciding role or left the approver group its policy names.",
)
NOT_APPROVED = (
    ErrorCode.APPROVAL_MISMATCH,
    "The arguments about to run are not the ones approved.",
)


class QuorumLost(Exception):
    """An approved call no longer has the approvals its policy asks for: nothing ran."""


def _execute_approved(*, run: AgentRun, lease: Lease, tool: Tool, call: PendingToolCall, key: str):
    approval = Approval.objects.select_related("decided_by", "merchant", "policy_version").get(
        interrupt_id=call.interrupt_id
    )
    validated = tool.args_model.model_validate(call.tool_args)
    about_to_run = validated.model_dump(mode="json")
    if (
        args_digest(about_to_run) != approval.args_digest
        or about_to_run != approval.approved_args
        or call.tool_args != approval.approved_args
    ):
        return StepCommit(next_node=Node.TOOLS, advance_step=False, fail_with=NOT_APPROVED)
    context = ToolContext(
        run_id=run.pk,
        merchant_id=run.merchant_id,
        account_id=run.account_id,
        idempotency_key=key,
        cancel=CancellationToken(),
    )
    try:
        status, result = approval_execute(
            approval=approval,
            lease=lease,
            tool=tool,
            args=validated,
            context=context,
            step=run.step,
        )
    except QuorumLost:
        return StepCommit(next_node=Node.TOOLS, advance_step=False, fail_with=QUORUM_LOST)
    return ToolOutcome(status, call.tool_args, result, recorded=True)


def approval_execute(
    *,
    approval: Approval,
    lease: Lease,
    tool: Tool,
    args: BaseModel,
    context: ToolContext,
    step: int,
) -> tuple[str, dict[str, Any]]:
    """Run an approved call: the side effect, its outcome and the ToolExecution commit
    together, in a transaction that first proves, under the run's lock, that the worker still
    holds the run. Once a cancel, /stop or takeover has committed, its run-end closed the call
    and this raises LostRun: no side effect happens for that run, ever. A tool that refuses
    leaves the call FAILED with its reason, never EXECUTED, and a customer who was emailed
    the decision is emailed the refusal; one that lost its quorum raises QuorumLost. Safe to
    call twice: the second call changes nothing.
    """
    with transaction.atomic():
        run = run_lock(approval.run_id)
        if not run_services.lease_holds(run, lease):
            raise LostRun(f"run {run.pk} is no longer held: its approved call is not executed")
        approval = locks.approval_lock(pk=approval.pk)
        done = ToolExecution.objects.filter(idempotency_key=context.idempotency_key).first()
        if done is not None:
            return done.status, done.result
        # Counted under the call's lock: a role or group change committed first is seen.
        if not quorum_holds(approval, requester_id=run.account_id):
            raise QuorumLost(approval.interrupt_id)
        executed_args = args.model_dump(mode="json")
        try:
            result = tool.executor(args, context)
            status, outcome = ToolStatus.SUCCEEDED, ApprovalStatus.EXECUTED
        except ToolError as error:
            # The arguments tried go with the refusal: the model may not know of a revision.
            result = {"status": "failed", "error": str(error), "tool_args": executed_args}
            status, outcome = ToolStatus.FAILED, ApprovalStatus.FAILED
        transition_check(approval.status, outcome)
        moved = Approval.objects.filter(
            pk=approval.pk, status=ApprovalStatus.APPROVED_EXECUTING
        ).update(
            status=outcome, executed_args=executed_args, result=result, updated_at=timezone.now()
        )
        if moved != 1:
            raise transaction.TransactionManagementError("approval changed under its lock")
        if outcome == ApprovalStatus.FAILED and not approval.decided_by_policy:
            notifications.approval_decided_notify(approval_id=approval.pk)
        record_append(
            approval=approval,
            kind=RecordKind.EXECUTED if status == ToolStatus.SUCCEEDED else RecordKind.REFUSED,
            arguments=executed_args,
            via="worker",
            justification=result.get("error", "") if status == ToolStatus.FAILED else "",
        )
        run_services.tool_execution_record_locked(
            run,
            step=step,
            idempotency_key=context.idempotency_key,
            tool=tool.name,
            args=executed_args,
            status=status,
            result=result,
        )
        snapshot = snapshot_parse(run.state_snapshot)
        call = snapshot_call(snapshot, approval.interrupt_id)
        if call is not None:
            final = call_moved(call, outcome.value, result=result)
            run_services.run_snapshot_save_locked(
                run, state_snapshot=call_replaced(run, snapshot, final)
            )
    return status, result
