"""Human decisions on sensitive tool calls (DESIGN 6.1). Every change of an approval goes
through here: the API, the admin, the portal pages, the worker and `maintain` call it.

Lock order: Membership -> AgentRun -> Approval. The run's state snapshot and the Approval row
change in the same transaction and never disagree.
"""

import hashlib
import json
import logging
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.db import transaction
from django.utils import timezone
from pydantic import BaseModel, ValidationError

from agentportal import errors
from agentportal.models import ApiKey
from agentportal.principals import Principal
from agentportal.problems import iso_z, pydantic_errors
from agentportal.selectors import principal_for_user, supervisor_memberships
from approvals import locks, notifications
from approvals.models import Approval, ApprovalStatus, Decision
from runs import services as run_services
from runs.locks import run_lock
from runs.models import AgentRun, ErrorCode, Node, RunStatus, ToolExecution, ToolStatus
from runs.services import Lease, LostRun, StepCommit
from runs.snapshot import (
    CallStatus,
    PendingToolCall,
    RunContext,
    SnapshotError,
    StateSnapshot,
    interrupt_id_for,
    snapshot_parse,
    transition_check,
)
from runs.tools import TOOLS, CancellationToken, Tool, ToolContext, ToolError
from runs.worker import ToolOutcome

logger = logging.getLogger(__name__)


def args_digest(arguments: dict[str, Any]) -> str:
    canonical = json.dumps(arguments, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def tool_args_validate(tool: Tool, arguments: Any) -> dict[str, Any]:
    """Validate arguments with the tool's schema; a 400 with field errors otherwise."""
    try:
        return tool.args_model.model_validate(arguments).model_dump(mode="json")
    except ValidationError as error:
        raise errors.InvalidInput(
            f"The arguments do not fit {tool.name}.",
            errors=pydantic_errors(error, "tool_args"),
        ) from error


def call_snapshot(run: AgentRun, call: PendingToolCall) -> dict[str, Any]:
    thread = getattr(run, "conversation_id", None) or run.pk
    return StateSnapshot(
        version=2,
        pending_tool_call=call,
        run_context=RunContext(thread_id=str(thread), run_id=str(run.pk)),
    ).dump()


def call_moved(call: PendingToolCall, status: str, **changes: Any) -> PendingToolCall:
    transition_check(call.status, status)
    return call.model_copy(update={"status": status, "updated_at": timezone.now(), **changes})


# --- the worker's side ----------------------------------------------------------------------


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
        if snapshot.pending_tool_call.interrupt_id == interrupt_id:
            call = snapshot.pending_tool_call
    if call is None:
        return _pause(run=run, tool=tool, args=args, key=key, interrupt_id=interrupt_id)
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


def _pause(*, run: AgentRun, tool: Tool, args: BaseModel, key: str, interrupt_id: str):
    now = timezone.now()
    ttl = run.release_snapshot["manifest"]["limits"]["approval_ttl_seconds"]
    proposed = args.model_dump(mode="json")
    call = PendingToolCall(
        interrupt_id=interrupt_id,
        tool_name=tool.name,
        tool_args=proposed,
        status=CallStatus.PENDING_APPROVAL,
        expires_at=now + timedelta(seconds=ttl),
        decision=None,
        result=None,
        updated_at=now,
    )

    def record(locked_run: AgentRun) -> None:
        approval = Approval.objects.create(
            interrupt_id=interrupt_id,
            run_id=locked_run.pk,
            merchant_id=locked_run.merchant_id,
            tool_name=tool.name,
            tool_execution_key=key,
            proposed_args=proposed,
            expires_at=call.expires_at,
        )
        notifications.approval_requested_notify(approval=approval)

    return StepCommit(
        next_node=Node.TOOLS,
        advance_step=False,
        run_fields={
            "status": RunStatus.WAITING_APPROVAL,
            "state_snapshot": call_snapshot(run, call),
            "lease_expires_at": None,
        },
        events=[
            (
                "approval.requested",
                {
                    "interrupt_id": interrupt_id,
                    "tool_name": tool.name,
                    "tool_args": proposed,
                    "expires_at": call.expires_at.isoformat(),
                },
            )
        ],
        on_locked=record,
    )


def decider_still_allowed(*, merchant, user, api_key_id: int | None) -> bool:
    """Whoever decided must still hold a deciding role now, not only when they decided."""
    if user is not None:
        return user.is_active and (
            user.is_superuser
            or supervisor_memberships(merchant=merchant).filter(user=user).exists()
        )
    if api_key_id is not None:
        return ApiKey.objects.filter(
            pk=api_key_id, revoked_at__isnull=True, merchant__active=True
        ).exists()
    return False


def approver_still_allowed(approval: Approval) -> bool:
    return decider_still_allowed(
        merchant=approval.merchant,
        user=approval.decided_by if approval.decided_by_id else None,
        api_key_id=approval.decided_by_key_id,
    )


def _execute_approved(*, run: AgentRun, lease: Lease, tool: Tool, call: PendingToolCall, key: str):
    approval = Approval.objects.select_related("decided_by", "merchant").get(
        interrupt_id=call.interrupt_id
    )
    if not approver_still_allowed(approval):
        return StepCommit(
            next_node=Node.TOOLS,
            advance_step=False,
            fail_with=(
                ErrorCode.APPROVER_REVOKED,
                "Whoever approved the call no longer holds a deciding role.",
            ),
        )
    validated = tool.args_model.model_validate(call.tool_args)
    about_to_run = validated.model_dump(mode="json")
    if (
        args_digest(about_to_run) != approval.args_digest
        or about_to_run != approval.approved_args
        or call.tool_args != approval.approved_args
    ):
        return StepCommit(
            next_node=Node.TOOLS,
            advance_step=False,
            fail_with=(
                ErrorCode.APPROVAL_MISMATCH,
                "The arguments about to run are not the ones approved.",
            ),
        )
    context = ToolContext(
        run_id=run.pk,
        merchant_id=run.merchant_id,
        account_id=run.account_id,
        idempotency_key=key,
        cancel=CancellationToken(),
    )
    status, result = approval_execute(
        approval=approval, lease=lease, tool=tool, args=validated, context=context, step=run.step
    )
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
    """Run an approved call: the side effect, EXECUTED and the ToolExecution commit together,
    in a transaction that first proves, under the run's lock, that the worker still holds the
    run. Once a cancel, /stop or takeover has committed, its run-end closed the call and this
    raises LostRun: no side effect happens for that run, ever. Safe to call twice: the second
    call changes nothing.
    """
    with transaction.atomic():
        run = run_lock(approval.run_id)
        if not run_services.lease_holds(run, lease):
            raise LostRun(f"run {run.pk} is no longer held: its approved call is not executed")
        approval = locks.approval_lock(pk=approval.pk)
        done = ToolExecution.objects.filter(idempotency_key=context.idempotency_key).first()
        if done is not None:
            return done.status, done.result
        transition_check(approval.status, ApprovalStatus.EXECUTED)
        try:
            result = tool.executor(args, context)
            status = ToolStatus.SUCCEEDED
        except ToolError as error:
            result, status = {"status": "failed", "error": str(error)}, ToolStatus.FAILED
        executed_args = args.model_dump(mode="json")
        moved = Approval.objects.filter(
            pk=approval.pk, status=ApprovalStatus.APPROVED_EXECUTING
        ).update(status=ApprovalStatus.EXECUTED, executed_args=executed_args, result=result)
        if moved != 1:
            raise transaction.TransactionManagementError("approval changed under its lock")
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
        if snapshot.pending_tool_call.interrupt_id == approval.interrupt_id:
            call = call_moved(snapshot.pending_tool_call, CallStatus.EXECUTED, result=result)
            run_services.run_snapshot_save_locked(run, state_snapshot=call_snapshot(run, call))
    return status, result


def approval_pending(run: AgentRun) -> list[dict[str, Any]]:
    """What a run waiting for approval shows in its `pending` list."""
    if run.status != RunStatus.WAITING_APPROVAL or not run.state_snapshot:
        return []
    try:
        call = snapshot_parse(run.state_snapshot).pending_tool_call
    except SnapshotError:
        return []
    if call.status != CallStatus.PENDING_APPROVAL:
        return []
    return [
        {
            "interrupt_id": call.interrupt_id,
            "kind": "approval",
            "tool_name": call.tool_name,
            "tool_args": call.tool_args,
            "expires_at": call.expires_at,
        }
    ]


# --- decisions ------------------------------------------------------------------------------


@dataclass(frozen=True)
class DecisionRequest:
    interrupt_id: str
    decision: str
    tool_args: dict[str, Any] | None = None
    reason: str = ""


def decision_validate(*, approval: Approval | None, request: DecisionRequest) -> dict | None:
    """The body checks (400) that come before the lock: a reason to reject, revised arguments
    that fit the tool. Returns the normalised revised arguments."""
    if request.decision not in Decision.values:
        raise errors.InvalidInput(
            "Unknown decision.",
            errors=[{"field": "decision", "message": "approve, reject or revise"}],
        )
    if request.decision == Decision.REJECT and not request.reason.strip():
        raise errors.InvalidInput(
            "A rejection needs a reason; the agent tells the customer.",
            errors=[{"field": "reason", "message": "required to reject"}],
        )
    if request.decision != Decision.REVISE:
        if request.tool_args is not None:
            raise errors.InvalidInput(
                "tool_args go with revise only.",
                errors=[{"field": "tool_args", "message": "only with decision revise"}],
            )
        return None
    if not isinstance(request.tool_args, dict):
        raise errors.InvalidInput(
            "A revision needs the edited tool_args.",
            errors=[{"field": "tool_args", "message": "an object of the tool's arguments"}],
        )
    tool = TOOLS.get(approval.tool_name) if approval else None
    if tool is None:
        return request.tool_args
    return tool_args_validate(tool, request.tool_args)


def approval_decide(
    *, run: AgentRun, principal: Principal, request: DecisionRequest
) -> tuple[AgentRun, Approval]:
    """Decide a pending call: approve, revise (approve edited arguments) or reject.

    The checks come in the order of DESIGN 6.1. The caller has checked that the run is
    visible (404) and that the principal may decide (403). Of any number of concurrent
    decisions on one interrupt exactly one succeeds.
    """
    if not principal.can_supervise and not principal.is_service:
        raise errors.NotAllowed("Only supervisors decide tool calls.")
    approval = Approval.objects.filter(interrupt_id=request.interrupt_id, run=run).first()
    revised = decision_validate(approval=approval, request=request)
    expired = False
    with transaction.atomic():
        locked = run_lock(run.pk)
        if locked.state_snapshot is None:
            # The run never paused for a person: there is no call to decide.
            if locked.is_finished:
                raise errors.RunFinished("The run has ended; nothing waits.")
            raise errors.InterruptMismatch("This run is not waiting on that call.")
        try:
            snapshot = snapshot_parse(locked.state_snapshot)
        except SnapshotError as error:
            raise type(error)(f"The run's state snapshot is unusable: {error}") from None
        call = snapshot.pending_tool_call
        if call.interrupt_id != request.interrupt_id:
            raise errors.InterruptMismatch("That is not the call this run is waiting on.")
        approval = locks.approval_lock(interrupt_id=call.interrupt_id)
        _refuse_unless_pending(locked, call, approval)
        if timezone.now() >= call.expires_at:
            _expire_locked(locked, snapshot, approval)
            expired = True
        else:
            _decide_locked(locked, snapshot, approval, principal, request, revised)
    if expired:
        # Committed above: the call is EXPIRED and the run resumed; only now refuse.
        raise errors.InterruptExpired("The call expired before this decision.")
    approval.refresh_from_db()
    return locked, approval


def approval_decide_as_user(
    *, approval: Approval, user, decision: str, tool_args=None, reason: str = ""
) -> tuple[AgentRun, Approval]:
    """approval_decide for a signed-in user (the admin and the portal), by their current
    role in the call's shop."""
    principal = principal_for_user(user=user, merchant=approval.merchant)
    if principal is None:
        raise errors.NotAllowed("You no longer belong to this shop.")
    return approval_decide(
        run=approval.run,
        principal=principal,
        request=DecisionRequest(
            interrupt_id=approval.interrupt_id,
            decision=decision,
            tool_args=tool_args,
            reason=reason,
        ),
    )


def _refuse_unless_pending(run: AgentRun, call: PendingToolCall, approval: Approval) -> None:
    if call.status == CallStatus.EXPIRED:
        raise errors.InterruptExpired("The call expired; nothing was done.")
    if call.status in CallStatus.DECIDED:
        raise errors.AlreadyDecided(
            f"{approval.decided_by_name or 'Someone'} decided this call already.",
            decided_by=approval.decided_by_name,
            decided_at=iso_z(approval.decided_at),
            decision=approval.decision or None,
        )
    if call.status == CallStatus.CANCELLED or run.is_finished:
        raise errors.RunFinished("The run was cancelled or has ended.")
    if run.status != RunStatus.WAITING_APPROVAL:
        raise errors.NotWaiting("The run is not waiting for this decision.")


def _decide_locked(run, snapshot, approval, principal, request, revised) -> None:
    """Call holding the run's and the approval's locks."""
    now = timezone.now()
    if request.decision == Decision.REJECT:
        status, approved = ApprovalStatus.REJECTED, None
    else:
        status = ApprovalStatus.APPROVED_EXECUTING
        approved = revised if request.decision == Decision.REVISE else approval.proposed_args
    moved = Approval.objects.filter(pk=approval.pk, status=ApprovalStatus.PENDING_APPROVAL).update(
        status=status,
        decision=request.decision,
        reason=request.reason,
        approved_args=approved,
        args_digest=args_digest(approved) if approved is not None else "",
        decided_by=principal.user,
        decided_by_key=principal.api_key if principal.user is None else None,
        decided_at=now,
        updated_at=now,
    )
    if moved != 1:
        raise transaction.TransactionManagementError("approval changed under its lock")
    notifications.approval_decided_notify(approval_id=approval.pk)
    changes: dict[str, Any] = {"decision": request.decision}
    if approved is not None:
        changes["tool_args"] = approved
    call = call_moved(snapshot.pending_tool_call, status, **changes)
    run_services.run_resume_locked(
        run,
        state_snapshot=call_snapshot(run, call),
        events=[
            (
                "approval.decided",
                {
                    "interrupt_id": approval.interrupt_id,
                    "decision": request.decision,
                    "decided_by": principal.public_name,
                    "reason": request.reason or None,
                    "tool_args": approved,
                },
            )
        ],
    )


def _expire_locked(run: AgentRun, snapshot: StateSnapshot, approval: Approval) -> None:
    """Call holding the run's and the approval's locks; the call is pending and due."""
    moved = Approval.objects.filter(pk=approval.pk, status=ApprovalStatus.PENDING_APPROVAL).update(
        status=ApprovalStatus.EXPIRED, updated_at=timezone.now()
    )
    if moved != 1:
        raise transaction.TransactionManagementError("approval changed under its lock")
    notifications.approval_decided_notify(approval_id=approval.pk)
    call = call_moved(snapshot.pending_tool_call, CallStatus.EXPIRED)
    run_services.run_resume_locked(
        run,
        state_snapshot=call_snapshot(run, call),
        events=[("approval.expired", {"interrupt_id": approval.interrupt_id})],
    )


def approval_expire(*, approval: Approval) -> bool:
    """Expire one due call and resume its run with an "expired" result. False if it was
    decided, cancelled or not yet due by the time its lock was taken."""
    with transaction.atomic():
        run = run_lock(approval.run_id)
        try:
            snapshot = snapshot_parse(run.state_snapshot)
        except SnapshotError:
            logger.error("run %s has an invalid state snapshot; left for an operator", run.pk)
            return False
        call = snapshot.pending_tool_call
        if (
            call.interrupt_id != approval.interrupt_id
            or call.status != CallStatus.PENDING_APPROVAL
            or run.status != RunStatus.WAITING_APPROVAL
            or timezone.now() < call.expires_at
        ):
            return False
        locked = locks.approval_lock(pk=approval.pk)
        _expire_locked(run, snapshot, locked)
        return True


def approvals_expire_due() -> int:
    """`maintain`'s sweep: every pending call past its expiry."""
    due = Approval.objects.filter(
        status=ApprovalStatus.PENDING_APPROVAL, expires_at__lte=timezone.now()
    )
    return sum(approval_expire(approval=approval) for approval in due[:500])
