"""Human decisions on sensitive tool calls (DESIGN 6.1). Every change of an approval goes
through here or approvals.gate.calls (the worker's side): the API, the admin, the portal pages, the
worker and `maintain` call them.

A call may need several people (its policy's band, approvals.gate.quorum): each approval is an
ApprovalVote for the arguments on the table, and the call moves on when it has as many as it
needs. A revision starts the count again with the reviser's vote.

Lock order: Membership -> AgentRun -> Approval. The run's state snapshot and the Approval row
change in the same transaction and never disagree.
"""

import logging
from collections.abc import Callable
from typing import Any

from django.db import transaction
from django.utils import timezone

from agentportal import errors
from agentportal.principals import Principal
from agentportal.problems import iso_z
from agentportal.selectors import principal_for_user
from approvals import locks
from approvals.audit.record import record_append
from approvals.gate import policies
from approvals.gate.calls import call_moved, call_replaced
from approvals.gate.decision_request import DecisionRequest, decision_validate
from approvals.gate.quorum import approval_count_locked, voter_of
from approvals.models import (
    Approval,
    ApprovalStatus,
    ApprovalVote,
    Decision,
    RecordKind,
    args_digest,
)
from approvals.notify import notifications
from runs import services as run_services
from runs.locks import run_lock
from runs.models import AgentRun, RunStatus
from runs.snapshot import (
    CallStatus,
    CompositeSnapshot,
    PendingToolCall,
    SnapshotError,
    StateSnapshot,
    snapshot_call,
    snapshot_parse,
)

logger = logging.getLogger(__name__)

Snapshot = StateSnapshot | CompositeSnapshot


def approval_decide(
    *,
    run: AgentRun,
    principal: Principal,
    request: DecisionRequest,
    before_deciding: Callable[[Approval], None] | None = None,
) -> tuple[AgentRun, Approval]:
    """Decide a pending call: approve, revise (approve edited arguments) or reject.

    The checks come in the order of DESIGN 6.1. The caller has checked that the run is
    visible (404) and that the principal may decide (403). Of any number of concurrent
    decisions on one interrupt exactly one succeeds. `before_deciding` is the caller's last
    check (an email link's claim), made holding the locks on the pending, not yet due call.
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
        call = snapshot_call(snapshot, request.interrupt_id)
        if call is None:
            raise errors.InterruptMismatch("That is not a call this run is waiting on.")
        approval = locks.approval_lock(interrupt_id=call.interrupt_id)
        _refuse_unless_pending(locked, call, approval)
        if timezone.now() >= call.expires_at:
            _expire_locked(locked, snapshot, approval)
            expired = True
        else:
            if before_deciding is not None:
                before_deciding(approval)
            _decide_locked(locked, snapshot, approval, principal, request, revised)
    if expired:
        # Committed above: the call is EXPIRED and the run resumed; only now refuse.
        raise errors.InterruptExpired("The call expired before this decision.")
    approval.refresh_from_db()
    return locked, approval


def approval_decide_as_user(
    *,
    approval: Approval,
    user,
    decision: str,
    tool_args=None,
    reason: str = "",
    args_digest: str | None = None,
    via: str = "page",
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
            args_digest=args_digest,
            via=via,
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
    """Call holding the run's and the approval's locks; the call is pending and not due.

    An approval counts for the arguments on the table and only when the decider saw them; a
    revision puts new arguments on the table with the reviser's vote as their first. Either
    way the call then needs what its policy version asks of the arguments that would execute,
    never less than one person: a revision is never approved by the policy alone.
    """
    if request.decision == Decision.REJECT:
        record_append(
            approval=approval,
            kind=RecordKind.REJECTED,
            principal=principal,
            seen_digest=request.args_digest,
            via=request.via,
            justification=request.reason,
        )
        _settle_locked(run, snapshot, approval, principal, request, None)
        return
    _refuse_unless_seen(approval, request)
    arguments = revised if request.decision == Decision.REVISE else approval.arguments_on_the_table
    digest = args_digest(arguments)
    need = policies.call_requirement(
        version=approval.policy_version, arguments=arguments, now=timezone.now()
    )
    required = need.required_approvals
    given = approval_count_locked(
        approval=approval,
        requester_id=run.account_id,
        principal=principal,
        need=need,
        digest=digest,
    )
    record_append(
        approval=approval,
        kind=RecordKind.REVISED if request.decision == Decision.REVISE else RecordKind.APPROVED,
        arguments=arguments,
        principal=principal,
        seen_digest=request.args_digest,
        via=request.via,
        justification=request.reason,
    )
    ApprovalVote.objects.create(
        approval=approval,
        voter=voter_of(principal),
        user=principal.user,
        api_key=principal.api_key if principal.user is None else None,
        decision=request.decision,
        args_digest=digest,
    )
    if given >= required:
        _settle_locked(run, snapshot, approval, principal, request, arguments, need)
        return
    # Not enough yet: the call stays pending, now for these arguments.
    moved = Approval.objects.filter(pk=approval.pk, status=ApprovalStatus.PENDING_APPROVAL).update(
        approved_args=arguments,
        args_digest=digest,
        required_approvals=required,
        required_group=need.group or "",
        updated_at=timezone.now(),
    )
    if moved != 1:
        raise transaction.TransactionManagementError("approval changed under its lock")
    run_services.run_events_append_locked(
        run,
        events=[
            (
                "approval.approval_given",
                {
                    "interrupt_id": approval.interrupt_id,
                    "decision": request.decision,
                    "by": principal.public_name,
                    "approvals_given": given,
                    "required_approvals": required,
                    "required_group": need.group,
                    "tool_args": arguments if request.decision == Decision.REVISE else None,
                    "via": request.via,
                },
            )
        ],
    )


def _refuse_unless_seen(approval: Approval, request: DecisionRequest) -> None:
    """An approve or revise made on arguments that are no longer on the table is refused, and
    so is an approve that does not say what it saw once someone has acted on the call (a
    colleague's revision or approval): it would count for arguments the decider may never
    have seen."""
    current, digest = approval.arguments_on_the_table, approval.digest_on_the_table
    if request.args_digest is None:
        if request.decision == Decision.REVISE or not approval.votes.exists():
            return
        detail = (
            "Someone has acted on this call since it was asked for: name the args_digest of "
            "the arguments you approve."
        )
    elif request.args_digest != digest:
        detail = "The arguments changed since you saw them; look at them again before deciding."
    else:
        return
    raise errors.ArgumentsChanged(detail, tool_args=current, args_digest=digest)


def _settle_locked(run, snapshot, approval, principal, request, approved, need=None) -> None:
    """Decide the call for good: rejected (`approved` None), or approved with `approved`
    (the last of the approvals `need` asked for). Call holding the run's and the approval's
    locks."""
    now = timezone.now()
    if approved is None:
        status, decision = ApprovalStatus.REJECTED, request.decision
    else:
        status = ApprovalStatus.APPROVED_EXECUTING
        revised = request.decision == Decision.REVISE or approved != approval.proposed_args
        decision = Decision.REVISE if revised else Decision.APPROVE
    moved = Approval.objects.filter(pk=approval.pk, status=ApprovalStatus.PENDING_APPROVAL).update(
        status=status,
        decision=decision,
        reason=request.reason,
        approved_args=approved,
        args_digest=args_digest(approved) if approved is not None else "",
        decided_by=principal.user,
        decided_by_key=principal.api_key if principal.user is None else None,
        decided_at=now,
        updated_at=now,
        required_approvals=need.required_approvals if need else approval.required_approvals,
        required_group=(need.group or "") if need else approval.required_group,
    )
    if moved != 1:
        raise transaction.TransactionManagementError("approval changed under its lock")
    notifications.approval_decided_notify(approval_id=approval.pk)
    changes: dict[str, Any] = {"decision": decision}
    if approved is not None:
        changes["tool_args"] = approved
    call = call_moved(snapshot_call(snapshot, approval.interrupt_id), status, **changes)
    _call_final_locked(
        run,
        snapshot,
        call,
        (
            "approval.decided",
            {
                "interrupt_id": approval.interrupt_id,
                "decision": decision,
                "decided_by": principal.public_name,
                "reason": request.reason or None,
                "tool_args": approved,
                "via": request.via,
            },
        ),
    )


def _call_final_locked(run: AgentRun, snapshot: Snapshot, call, event) -> None:
    """Record a call's final state in the run's snapshot. The run resumes when it was the
    last call of its pause still undecided; until then it keeps waiting for the others. Call
    holding the run's lock."""
    state_snapshot = call_replaced(run, snapshot, call)
    still_open = [
        other
        for other in snapshot.calls
        if other.interrupt_id != call.interrupt_id and other.status == CallStatus.PENDING_APPROVAL
    ]
    if still_open:
        run_services.run_events_append_locked(run, events=[event], state_snapshot=state_snapshot)
    else:
        run_services.run_resume_locked(run, state_snapshot=state_snapshot, events=[event])


def _expire_locked(run: AgentRun, snapshot: Snapshot, approval: Approval) -> None:
    """Call holding the run's and the approval's locks; the call is pending and due."""
    moved = Approval.objects.filter(pk=approval.pk, status=ApprovalStatus.PENDING_APPROVAL).update(
        status=ApprovalStatus.EXPIRED, updated_at=timezone.now()
    )
    if moved != 1:
        raise transaction.TransactionManagementError("approval changed under its lock")
    notifications.approval_decided_notify(approval_id=approval.pk)
    record_append(approval=approval, kind=RecordKind.EXPIRED)
    call = call_moved(snapshot_call(snapshot, approval.interrupt_id), CallStatus.EXPIRED)
    _call_final_locked(
        run, snapshot, call, ("approval.expired", {"interrupt_id": approval.interrupt_id})
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
        call = snapshot_call(snapshot, approval.interrupt_id)
        if (
            call is None
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
