"""Reconciling a run with its plan: `plan_reconcile` applies the run's BusinessEvents after its
cursor, in order, under the run's lock, so that the same run resumes exactly once."""

import logging

from django.conf import settings
from django.db import transaction
from django.db.models import Exists, OuterRef

from approvals.gate.quorum import decider_still_allowed
from approvals.models import (
    BusinessEvent,
    BusinessEventKind,
    Confirmation,
    TicketStatus,
)
from approvals.notify import notifications
from approvals.plans.waits import plan_interrupt_id, plan_wait, proposal_summary
from runs import services as run_services
from runs.locks import run_lock
from runs.models import AgentRun, ErrorCode, RunInput
from runs.services import WAITING_STATUSES
from runs.snapshot import SnapshotError, WaitState, wait_parse

logger = logging.getLogger(__name__)


def plan_reconcile(*, run_id) -> int:
    """Apply the business events after the run's cursor, in order; return how many.

    Safe to run any number of times, at once too: the cursor and the receipts (one per event
    and one per wait) decide, under the run's lock. A run with nothing new costs two reads and
    takes no write lock.
    """
    cursor = (
        AgentRun.objects.filter(pk=run_id).values_list("domain_event_cursor", flat=True).first()
    )
    if cursor is None or not BusinessEvent.objects.filter(run_id=run_id, pk__gt=cursor).exists():
        return 0
    with transaction.atomic():
        return plan_events_apply_locked(run_lock(run_id))


def plan_events_apply_locked(run: AgentRun) -> int:
    """Apply the run's business events after its cursor, in order, and move the cursor past
    them; return how many. Call holding the run's lock.

    A run whose wait state is unusable keeps its cursor: once an operator repairs it, the
    events are applied then, not lost.
    """
    events = list(
        BusinessEvent.objects.filter(run_id=run.pk, pk__gt=run.domain_event_cursor)
        .select_related("actor_user", "ticket__order")
        .order_by("pk")
    )
    try:
        wait_parse(run.wait_state)
    except SnapshotError:
        logger.error("run %s has an invalid wait state; left for an operator", run.pk)
        return 0
    for event in events:
        _event_apply(run, event)
    if events:
        run_services.run_event_cursor_move_locked(run, event_id=events[-1].pk)
    return len(events)


def _event_apply(run: AgentRun, event: BusinessEvent) -> None:
    """Apply one event to the run, if the run still waits for it. Call holding the run's lock."""
    wait = wait_parse(run.wait_state)
    if (
        run.status not in WAITING_STATUSES
        or wait is None
        or wait.payload.ticket_id != str(event.ticket_id)
    ):
        return  # the run no longer waits on this plan (cancelled, expired, taken over)
    details = {
        "ticket_id": str(event.ticket_id),
        "proposal_version": event.proposal_version,
        "by": event.actor
        if event.actor_user_id == run.account_id
        else settings.AGENTPORTAL["STAFF_DISPLAY_NAME"],
        "business_event_id": event.pk,
    }
    if event.kind in (BusinessEventKind.CONFIRMED, BusinessEventKind.CHANGES_REQUESTED):
        waiting_for = plan_interrupt_id(
            wait.tool_key, event.proposal_version, TicketStatus.WAITING_CONFIRMATION
        )
        if wait.interrupt_id != waiting_for:
            return
        _receipt(run, wait, event)
        note = event.data.get("note", "")
        if event.kind == BusinessEventKind.CONFIRMED:
            ticket_status, name = TicketStatus.WAITING_REVIEW, "plan.confirmed"
        else:
            ticket_status, name = TicketStatus.NEEDS_REVISION, "plan.changes_requested"
            details["note"] = note
        _wait_move(run, wait, ticket_status, event.proposal_version, (name, details))
        notifications.plan_waits_for_supervisor_notify(
            merchant=run.merchant,
            ticket_id=event.ticket_id,
            run_id=run.pk,
            proposal_version=event.proposal_version,
            summary=proposal_summary(event.ticket.order, wait.tool_args["items"]),
            note=note if event.kind == BusinessEventKind.CHANGES_REQUESTED else "",
        )
    elif event.kind == BusinessEventKind.REVISED:
        if wait.payload.proposal_version != event.proposal_version - 1:
            return
        _receipt(run, wait, event)
        details["items"] = event.data.get("items", [])
        # What the run now waits on is the revised plan, not what the model first proposed.
        wait = wait.model_copy(update={"tool_args": {**wait.tool_args, "items": details["items"]}})
        _wait_move(
            run,
            wait,
            TicketStatus.WAITING_CONFIRMATION,
            event.proposal_version,
            ("plan.proposed", details),
        )
    elif event.kind in (BusinessEventKind.APPROVED, BusinessEventKind.REJECTED):
        waiting_for = plan_interrupt_id(
            wait.tool_key, event.proposal_version, TicketStatus.WAITING_REVIEW
        )
        if wait.interrupt_id == waiting_for:
            _review_apply(run, wait, event, details)


def _wait_move(
    run: AgentRun, wait: WaitState, ticket_status: str, version: int, event: tuple[str, dict]
) -> None:
    """The run now waits for the plan's next stage. Call holding the run's lock."""
    status, moved = plan_wait(
        key=wait.tool_key,
        ticket_id=wait.payload.ticket_id,
        version=version,
        ticket_status=ticket_status,
        tool_name=wait.tool_name,
        tool_args=wait.tool_args,
    )
    event[1]["interrupt_id"] = moved.interrupt_id
    run_services.run_wait_move_locked(run, status=status, wait=moved, events=[event])


def _review_apply(run: AgentRun, wait: WaitState, event: BusinessEvent, details: dict) -> None:
    confirmed = Confirmation.objects.filter(
        ticket_id=event.ticket_id, proposal_version=event.proposal_version
    ).exists()
    if not confirmed:
        logger.error("run %s: review of an unconfirmed plan version; ignored", run.pk)
        return
    if not decider_still_allowed(
        merchant=run.merchant, user=event.actor_user, api_key_id=event.actor_key_id
    ):
        run_services.run_fail_locked(
            run,
            code=ErrorCode.APPROVER_REVOKED,
            detail="Whoever approved the plan no longer holds a deciding role.",
        )
        return
    _receipt(run, wait, event)
    name = "plan.approved" if event.kind == BusinessEventKind.APPROVED else "plan.rejected"
    details["note"] = event.data.get("note", "")
    run_services.run_resume_locked(run, events=[(name, details)])


def _receipt(run: AgentRun, wait: WaitState, event: BusinessEvent) -> RunInput:
    """The receipt of the event that answered a wait. Call holding the run's lock."""
    return run_services.run_input_record_locked(
        run,
        interrupt_id=wait.interrupt_id,
        # A space: no client's Idempotency-Key can take this receipt's key.
        idempotency_key=f"business event {event.pk}",
        kind=wait.kind,
        payload={"event": event.kind, "proposal_version": event.proposal_version},
        source_event_id=event.pk,
        created_by=event.actor,
    )


def plans_reconcile_due() -> int:
    """`maintain`'s sweep: waiting runs with business events their reconcile task missed."""
    due = (
        AgentRun.objects.filter(status__in=WAITING_STATUSES)
        .filter(
            Exists(
                BusinessEvent.objects.filter(
                    run_id=OuterRef("pk"), pk__gt=OuterRef("domain_event_cursor")
                )
            )
        )
        .values_list("pk", flat=True)
    )
    return sum(plan_reconcile(run_id=run_id) for run_id in list(due[:500]))
