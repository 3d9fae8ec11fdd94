"""What the end of a run does to the after-sales items it owns (DESIGN 6.1's run-end rule):
every end but completion closes its calls that have not executed and its plans not yet carried
out, each with its cause and an event in plain words. The runtime calls these, holding the
run's lock, in the transaction that ends the run (the interrupts' on_run_end)."""

from typing import Any

from django.db.models import Exists, OuterRef
from django.utils import timezone

from approvals.audit.record import record_append
from approvals.customer_words import call_name
from approvals.gate.calls import call_moved, calls_snapshot
from approvals.models import (
    TICKET_OPEN_STATUSES,
    Approval,
    ApprovalStatus,
    BusinessEvent,
    BusinessEventKind,
    CancelCause,
    RecordKind,
    Ticket,
    TicketStatus,
)
from runs import services as run_services
from runs.models import AgentRun, ErrorCode, RunEvent, RunStatus, ToolExecution
from runs.snapshot import CallStatus, SnapshotError, snapshot_parse

OPEN_APPROVAL_STATUSES = (ApprovalStatus.PENDING_APPROVAL, ApprovalStatus.APPROVED_EXECUTING)
# Final once carried out: executed, or refused by the tool.
CARRIED_OUT_STATUSES = (ApprovalStatus.EXECUTED, ApprovalStatus.FAILED)


def run_end_cause(run: AgentRun) -> str:
    """Why a run that ended without completing closed what it owned."""
    if run.status == RunStatus.CANCELLED:
        return CancelCause.RUN_CANCELLED
    return {
        ErrorCode.APPROVER_REVOKED: CancelCause.APPROVER_REVOKED,
        ErrorCode.APPROVAL_MISMATCH: CancelCause.APPROVAL_MISMATCH,
    }.get(run.error_code, CancelCause.RUN_FAILED)


def approvals_on_run_end(run: AgentRun, previous_status: str) -> list[tuple[str, dict]]:
    """A run that ends without completing closes every call of its own that has not executed,
    pending or approved: CANCELLED with the cause, an event each, in the transaction that ends
    the run. So no dead item stays in an inbox, and an approved call whose run was stopped is
    never executed (approval_execute proves the run is still held). A damaged snapshot does
    not keep a call open: it is closed with the cause `snapshot_invalid`.

    Called by the runtime holding the run's lock.
    """
    if run.status == RunStatus.COMPLETED:
        return []
    calls = list(
        Approval.objects.filter(
            run_id=run.pk, status__in=[*OPEN_APPROVAL_STATUSES, *CARRIED_OUT_STATUSES]
        ).order_by("pk")
    )
    open_calls = [call for call in calls if call.status in OPEN_APPROVAL_STATUSES]
    carried_out = [call for call in calls if call.status in CARRIED_OUT_STATUSES]
    events = _carried_out_unreported(run, carried_out)
    if not open_calls:
        return events
    cause = run_end_cause(run)
    snapshot = None
    if run.state_snapshot:
        try:
            snapshot = snapshot_parse(run.state_snapshot)
        except SnapshotError:
            cause = CancelCause.SNAPSHOT_INVALID
    now = timezone.now()
    for approval in open_calls:
        moved = Approval.objects.filter(pk=approval.pk, status=approval.status).update(
            status=ApprovalStatus.CANCELLED, cancel_cause=cause, updated_at=now
        )
        if moved:
            events.append(("approval.cancelled", _cancelled_event(approval, cause)))
            record_append(approval=approval, kind=RecordKind.CANCELLED, justification=cause)
    if snapshot is not None:
        open_statuses = (CallStatus.PENDING_APPROVAL, CallStatus.APPROVED_EXECUTING)
        calls = [
            call_moved(call, CallStatus.CANCELLED) if call.status in open_statuses else call
            for call in snapshot.calls
        ]
        if calls != snapshot.calls:
            run_services.run_snapshot_save_locked(run, state_snapshot=calls_snapshot(run, calls))
    return events


def _carried_out_unreported(run: AgentRun, calls: list[Approval]) -> list[tuple[str, dict]]:
    """Calls carried out before the run ended but whose result never reached the run's
    timeline (the run was stopped between the two commits): say what came of them."""
    if not calls:
        return []
    reported = set(
        RunEvent.objects.filter(run_id=run.pk, type="tool.result").values_list(
            "data__key", flat=True
        )
    )
    return [
        _carried_out_event(approval)
        for approval in calls
        if approval.tool_execution_key not in reported
    ]


def _carried_out_event(approval: Approval) -> tuple[str, dict]:
    data = {
        "interrupt_id": approval.interrupt_id,
        "tool_name": approval.tool_name,
        "result": approval.result,
    }
    if approval.status == ApprovalStatus.FAILED:
        # No notice: the customer hears of the refusal from the call's own account
        # (customer_words.decision_told), once.
        return ("approval.failed", data)
    notice = f"The {call_name(approval.tool_name)} was carried out before the request ended."
    return ("approval.executed", {**data, "notice": notice})


def _cancelled_event(approval: Approval, cause: str) -> dict[str, Any]:
    what = call_name(approval.tool_name)
    why = {
        CancelCause.RUN_CANCELLED: "the request was stopped",
        CancelCause.APPROVER_REVOKED: "the person who approved it may no longer decide",
        CancelCause.APPROVAL_MISMATCH: "what was about to run was not what was approved",
        CancelCause.SNAPSHOT_INVALID: "the request's stored state is damaged",
    }.get(cause, "the request failed")
    return {
        "interrupt_id": approval.interrupt_id,
        "tool_name": approval.tool_name,
        "was": approval.status,
        "cause": cause,
        "notice": f"Nothing was done: the {what} did not go ahead because {why}.",
    }


def plans_on_run_end(run: AgentRun, previous_status: str) -> list[tuple[str, dict]]:
    """A run that ends without completing cancels its plans not yet carried out (waiting,
    needing a revision, or approved while the run had not yet taken the approval in): each
    becomes CANCELLED with a `cancelled` BusinessEvent naming the cause and a `plan.cancelled`
    run event, in the transaction that ends the run.

    Called by the runtime holding the run's lock (Tickets come after it in the lock order).
    """
    if run.status == RunStatus.COMPLETED:
        return []
    tickets = list(
        Ticket.objects.filter(
            run_id=run.pk, status__in=[*TICKET_OPEN_STATUSES, TicketStatus.APPROVED]
        )
        .exclude(
            Exists(ToolExecution.objects.filter(idempotency_key=OuterRef("tool_execution_key")))
        )
        .order_by("pk")
    )
    if not tickets:
        return []
    cause = run_end_cause(run)
    now = timezone.now()
    events = []
    for ticket in tickets:
        moved = Ticket.objects.filter(pk=ticket.pk, status=ticket.status).update(
            status=TicketStatus.CANCELLED, updated_at=now
        )
        if not moved:
            continue
        BusinessEvent.objects.create(
            merchant_id=ticket.merchant_id,
            ticket=ticket,
            run_id=run.pk,
            kind=BusinessEventKind.CANCELLED,
            proposal_version=ticket.version,
            actor="agent",
            data={"cause": cause, "was": ticket.status},
        )
        events.append(
            (
                "plan.cancelled",
                {
                    "ticket_id": str(ticket.pk),
                    "was": ticket.status,
                    "cause": cause,
                    "notice": "The exchange plan was cancelled with the request; nothing will "
                    "change.",
                },
            )
        )
    return events
