"""Exchange plans (DESIGN 6.3): the agent proposes, the customer confirms, a supervisor
reviews, and the same run resumes exactly once.

Two halves that meet only through BusinessEvent rows:
- the ticket commands (confirm, revise, decide) commit the business record and an event, one
  transaction each, and enqueue `reconcile(run_id)` on commit;
- `plan_reconcile` applies a run's events after its cursor, in order, under the run's lock.

Lock order: Conversation -> AgentRun -> Ticket.
"""

import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Exists, OuterRef
from django.utils import timezone
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError
from rest_framework import serializers

from agentportal import errors
from agentportal.principals import Principal
from agentportal.problems import pydantic_errors
from agentportal.selectors import principal_for_user
from approvals import locks, notifications, selectors
from approvals.calls import decider_still_allowed
from approvals.customer_words import plan_lines
from approvals.models import (
    TICKET_OPEN_STATUSES,
    BusinessEvent,
    BusinessEventKind,
    Confirmation,
    Order,
    PlanDecision,
    PlanReview,
    Proposal,
    Ticket,
    TicketStatus,
)
from approvals.tools import ExchangeItems, exchange_items_problem
from runs import services as run_services
from runs.extensions import WaitKind
from runs.inputs import wait_pause
from runs.locks import run_lock
from runs.models import AgentRun, ErrorCode, RunInput, RunStatus, ToolStatus
from runs.releases import GRAPH_RELEASES
from runs.services import WAITING_STATUSES, Lease, StepCommit
from runs.snapshot import SnapshotError, WaitState, interrupt_id_for, wait_parse
from runs.tools import Tool
from runs.worker import ToolOutcome

logger = logging.getLogger(__name__)

EXCHANGE_ITEMS = TypeAdapter(ExchangeItems)

FINAL_STATUSES = (TicketStatus.APPROVED, TicketStatus.REJECTED, TicketStatus.CANCELLED)


def proposal_summary(order: Order, items: list[dict[str, Any]]) -> str:
    """The plan in words its customer reads too: products and sizes, not stock codes."""
    return "; ".join(f"exchange {line}" for line in plan_lines(order, items))


# The switch of a graph version: whether a proposed plan waits for people (on unless a version
# says otherwise) or is only recorded while the run goes on.
PLANS_WAIT = "plans_wait"


# --- the worker's side ----------------------------------------------------------------------


class PlanWait(BaseModel):
    """What a run whose plan waits for people waits with: the ticket and its version."""

    model_config = ConfigDict(extra="forbid", strict=True)

    ticket_id: str
    proposal_version: int = Field(ge=1)


def _ticket_id_field() -> serializers.Field:
    return serializers.UUIDField(allow_null=True)


CONFIRMATION = WaitKind(
    name="confirmation",
    payload=PlanWait,
    status=RunStatus.WAITING_USER,
    pending_fields={"ticket_id": _ticket_id_field},
    input_refusal="The run waits for a plan's confirmation: confirm or revise its ticket instead.",
)
PLAN_REVIEW = WaitKind(
    name="plan_review",
    payload=PlanWait,
    status=RunStatus.WAITING_APPROVAL,
    pending_fields={"ticket_id": _ticket_id_field},
    input_refusal="The run waits for a supervisor's review of its plan.",
)

# A plan's wait while its ticket is open, per ticket status: the stage (part of the wait's id,
# so an answer to an older stage or version never counts) and the wait's kind.
PLAN_STAGES = {
    TicketStatus.WAITING_CONFIRMATION: ("confirmation", CONFIRMATION),
    TicketStatus.NEEDS_REVISION: ("revision", PLAN_REVIEW),
    TicketStatus.WAITING_REVIEW: ("review", PLAN_REVIEW),
}


def plan_interrupt_id(key: str, version: int, ticket_status: str) -> str:
    return interrupt_id_for(key, f"v{version}", PLAN_STAGES[ticket_status][0])


def plan_wait(
    *, key: str, ticket_id, version: int, ticket_status: str, tool_name: str, tool_args: dict
) -> tuple[str, WaitState]:
    """The run's status and wait while its plan's ticket is open in `ticket_status`."""
    _, kind = PLAN_STAGES[ticket_status]
    return kind.status, WaitState(
        interrupt_id=plan_interrupt_id(key, version, ticket_status),
        kind=kind.name,
        tool_name=tool_name,
        tool_key=key,
        tool_args=tool_args,
        payload=PlanWait(ticket_id=str(ticket_id), proposal_version=version),
    )


def plan_result(ticket: Ticket) -> dict[str, Any]:
    """What the model is told about a plan."""
    proposal = ticket.proposals.get(version=ticket.version)
    review = ticket.reviews.filter(proposal_version=ticket.version).first()
    status = {
        TicketStatus.APPROVED: "approved",
        TicketStatus.REJECTED: "rejected",
        TicketStatus.CANCELLED: "cancelled",
    }.get(ticket.status, "proposed")
    return {
        "status": status,
        "ticket_id": str(ticket.pk),
        "proposal_version": ticket.version,
        "items": proposal.items,
        "summary": proposal.summary,
        "note": review.note if review else None,
    }


def _ticket_insert(
    *, run: AgentRun, order: Order, key: str, items: list, ticket_id=None
) -> tuple[Ticket, BusinessEvent]:
    """A ticket, its first proposal and the `proposed` event. Call inside a transaction."""
    ticket = Ticket.objects.create(
        id=ticket_id or uuid.uuid4(),
        merchant_id=run.merchant_id,
        run_id=run.pk,
        customer_id=run.account_id,
        order=order,
        tool_execution_key=key,
    )
    Proposal.objects.create(
        ticket=ticket, version=1, items=items, summary=proposal_summary(order, items)
    )
    event = BusinessEvent.objects.create(
        merchant_id=run.merchant_id,
        ticket=ticket,
        run_id=run.pk,
        kind=BusinessEventKind.PROPOSED,
        proposal_version=1,
        actor="agent",
        data={"items": items},
    )
    return ticket, event


def plan_interrupt(
    *, run: AgentRun, lease: Lease, tool: Tool, args: BaseModel, key: str
) -> StepCommit | ToolOutcome:
    """PLAN_INTERRUPT's pause: propose a plan and wait, or report how it
    ended. Idempotent by the call's key: a replayed step finds its ticket, never a second."""
    arguments = args.model_dump(mode="json")
    ticket = Ticket.objects.filter(tool_execution_key=key).first()
    waits = GRAPH_RELEASES[run.graph_version].switch(PLANS_WAIT)
    if ticket is None:
        order = selectors.order_for_customer(
            merchant_id=run.merchant_id, customer_id=run.account_id, number=arguments["order_id"]
        )
        if order is None:
            error = f"there is no order {arguments['order_id']} for this customer"
        else:
            error = exchange_items_problem(order, arguments["items"])
        if error:
            return ToolOutcome(ToolStatus.FAILED, arguments, {"error": error})
        if not waits:
            ticket = _ticket_create_once(run=run, order=order, key=key, items=arguments["items"])
            return ToolOutcome(ToolStatus.SUCCEEDED, arguments, plan_result(ticket))
        return _pause_for_new_plan(run=run, tool=tool, order=order, key=key, arguments=arguments)
    if ticket.status in FINAL_STATUSES or not waits:
        return ToolOutcome(ToolStatus.SUCCEEDED, arguments, plan_result(ticket))
    # Re-queued while its plan is still open (an operator's hand): wait for it again.
    status, wait = plan_wait(
        key=key,
        ticket_id=ticket.pk,
        version=ticket.version,
        ticket_status=ticket.status,
        tool_name=tool.name,
        tool_args=arguments,
    )
    return wait_pause(run, status=status, wait=wait, events=[])


def _ticket_create_once(*, run: AgentRun, order: Order, key: str, items: list) -> Ticket:
    """A graph without business waits creates the ticket on its own, like any executor:
    in its own transaction, idempotent by the key."""
    try:
        with transaction.atomic():
            ticket, _ = _ticket_insert(run=run, order=order, key=key, items=items)
    except IntegrityError:
        ticket = Ticket.objects.get(tool_execution_key=key)
    return ticket


def _pause_for_new_plan(
    *, run: AgentRun, tool: Tool, order: Order, key: str, arguments: dict
) -> StepCommit:
    ticket_id = uuid.uuid4()
    status, wait = plan_wait(
        key=key,
        ticket_id=ticket_id,
        version=1,
        ticket_status=TicketStatus.WAITING_CONFIRMATION,
        tool_name=tool.name,
        tool_args=arguments,
    )
    items = arguments["items"]

    def record(locked_run: AgentRun) -> None:
        # In the transaction that pauses the run: the ticket exists exactly when it waits.
        _, event = _ticket_insert(
            run=locked_run, order=order, key=key, items=items, ticket_id=ticket_id
        )
        run_services.run_event_cursor_move_locked(locked_run, event_id=event.pk)

    return wait_pause(
        run,
        status=status,
        wait=wait,
        events=[
            (
                "plan.proposed",
                {
                    "ticket_id": str(ticket_id),
                    "proposal_version": 1,
                    "items": items,
                    "summary": proposal_summary(order, items),
                    "interrupt_id": wait.interrupt_id,
                },
            )
        ],
        on_locked=record,
    )


# --- ticket commands --------------------------------------------------------------------------


def reconcile_enqueue(run_id) -> None:
    from django_q.tasks import async_task

    async_task("approvals.tasks.reconcile", str(run_id))


@dataclass(frozen=True)
class TicketMove:
    """What a command does to a ticket: from which statuses, to which, with which event."""

    allowed: tuple[str, ...]
    status: str
    kind: str
    data: dict[str, Any]
    new_version: bool = False
    # Writes the command's own record (a confirmation, a proposal, a review).
    record: Callable[[Ticket, int], None] | None = None


def _ticket_command(
    *, ticket: Ticket, principal: Principal, proposal_version: int, move: TicketMove
) -> Ticket:
    """One command on a ticket, in one transaction; on commit the run reconciles.

    The run is locked first, as the lock order says: ending a run cancels its open tickets
    under the run's lock, and the event's reference to the run would otherwise wait for that
    lock while holding the ticket's (a deadlock on PostgreSQL). A wait past its deadline is
    expired first, and the command refused.
    """
    with transaction.atomic():
        run = run_lock(ticket.run_id)
        expired = run_services.run_wait_expire_locked(run)
        if not expired:
            _ticket_move_locked(ticket.pk, principal, proposal_version, move)
    if expired:
        # Committed above: the run failed with WAIT_EXPIRED and its plan was cancelled.
        raise errors.InterruptExpired("Nobody answered in time; the plan was closed.")
    return Ticket.objects.get(pk=ticket.pk)


def _ticket_move_locked(
    ticket_id, principal: Principal, proposal_version: int, move: TicketMove
) -> None:
    """Check the version and the state under the ticket's lock, move it by a conditional
    UPDATE, write the record and the BusinessEvent. Call holding the run's lock."""
    locked = locks.ticket_lock(ticket_id)
    if locked.version != proposal_version:
        raise errors.VersionConflict(
            f"The plan is at version {locked.version}, not {proposal_version}.",
            proposal_version=locked.version,
        )
    if locked.status not in move.allowed:
        raise errors.InvalidTransition(
            f"The plan is {locked.status}; that is not possible now.",
            ticket_status=locked.status,
        )
    version = locked.version + 1 if move.new_version else locked.version
    moved = Ticket.objects.filter(
        pk=locked.pk, status=locked.status, version=locked.version
    ).update(status=move.status, version=version, updated_at=timezone.now())
    if moved != 1:
        raise transaction.TransactionManagementError("ticket changed under its lock")
    if move.record is not None:
        move.record(locked, version)
    BusinessEvent.objects.create(
        merchant_id=locked.merchant_id,
        ticket=locked,
        run_id=locked.run_id,
        kind=move.kind,
        proposal_version=version,
        actor=principal.name,
        actor_user=principal.user,
        actor_key=principal.api_key if principal.user is None else None,
        data=move.data,
    )
    transaction.on_commit(partial(reconcile_enqueue, locked.run_id), robust=True)


def ticket_principal(*, ticket: Ticket, user) -> Principal:
    """The principal of a signed-in user (the admin, the portal) for a ticket's shop."""
    principal = principal_for_user(user=user, merchant=ticket.merchant)
    if principal is None:
        raise errors.NotAllowed("You no longer belong to this shop.")
    return principal


def ticket_owner_check(ticket: Ticket, principal: Principal, action: str) -> None:
    if not principal.is_customer or principal.user.pk != ticket.customer_id:
        raise errors.NotAllowed(f"Only the plan's customer may {action} it.")


def plan_supervisor_check(principal: Principal, action: str) -> None:
    if not (principal.can_supervise or principal.is_service):
        raise errors.NotAllowed(f"Only supervisors {action} plans.")


def ticket_confirm(*, ticket: Ticket, principal: Principal, proposal_version: int) -> Ticket:
    """The customer says yes to the current proposal: it now waits for a supervisor."""
    ticket_owner_check(ticket, principal, "confirm")

    def record(locked: Ticket, version: int) -> None:
        Confirmation.objects.create(
            ticket=locked, proposal_version=version, customer=principal.user
        )

    return _ticket_command(
        ticket=ticket,
        principal=principal,
        proposal_version=proposal_version,
        move=TicketMove(
            allowed=(TicketStatus.WAITING_CONFIRMATION,),
            status=TicketStatus.WAITING_REVIEW,
            kind=BusinessEventKind.CONFIRMED,
            data={},
            record=record,
        ),
    )


def exchange_items_validate(*, order: Order, items: Any) -> list[dict[str, Any]]:
    """A supervisor's edited items, checked like the tool's own arguments; 400 otherwise."""
    try:
        parsed = EXCHANGE_ITEMS.validate_python(items)
    except ValidationError as error:
        raise errors.InvalidInput(
            "The items are not a valid exchange.",
            errors=pydantic_errors(error, "items"),
        ) from error
    cleaned = [item.model_dump(mode="json") for item in parsed]
    problem = exchange_items_problem(order, cleaned)
    if problem:
        raise errors.InvalidInput(problem, errors=[{"field": "items", "message": problem}])
    return cleaned


def ticket_revise(
    *, ticket: Ticket, principal: Principal, proposal_version: int, note: str, items=None
) -> Ticket:
    """The customer asks for changes (NEEDS_REVISION), or a supervisor proposes a new version
    with edited items, which the customer must confirm again."""
    if principal.is_customer:
        ticket_owner_check(ticket, principal, "ask for changes to")
        if items is not None:
            raise errors.InvalidInput(
                "A customer asks for changes in the note; a supervisor edits the items.",
                errors=[{"field": "items", "message": "only a supervisor edits the items"}],
            )
        if not note.strip():
            raise errors.InvalidInput(
                "Say what should change in the plan.",
                errors=[{"field": "note", "message": "Say what should change in the plan."}],
            )
        return _ticket_command(
            ticket=ticket,
            principal=principal,
            proposal_version=proposal_version,
            move=TicketMove(
                allowed=(TicketStatus.WAITING_CONFIRMATION,),
                status=TicketStatus.NEEDS_REVISION,
                kind=BusinessEventKind.CHANGES_REQUESTED,
                data={"note": note},
            ),
        )
    plan_supervisor_check(principal, "revise")
    if items is None:
        raise errors.InvalidInput(
            "A revision by a supervisor names the new items.",
            errors=[{"field": "items", "message": "This field is required."}],
        )
    cleaned = exchange_items_validate(order=ticket.order, items=items)

    def record(locked: Ticket, version: int) -> None:
        Proposal.objects.create(
            ticket=locked,
            version=version,
            items=cleaned,
            summary=proposal_summary(ticket.order, cleaned),
            note=note,
            created_by=principal.user,
        )

    return _ticket_command(
        ticket=ticket,
        principal=principal,
        proposal_version=proposal_version,
        move=TicketMove(
            allowed=TICKET_OPEN_STATUSES,
            status=TicketStatus.WAITING_CONFIRMATION,
            kind=BusinessEventKind.REVISED,
            data={"items": cleaned, "note": note},
            new_version=True,
            record=record,
        ),
    )


def ticket_decide(
    *, ticket: Ticket, principal: Principal, proposal_version: int, decision: str, note: str
) -> Ticket:
    """A supervisor approves or rejects the confirmed proposal."""
    plan_supervisor_check(principal, "decide")
    if decision not in PlanDecision.values:
        raise errors.InvalidInput(
            "Unknown decision.",
            errors=[{"field": "decision", "message": "approve or reject"}],
        )
    if decision == "reject" and not note.strip():
        raise errors.InvalidInput(
            "A rejection needs a note; the agent tells the customer.",
            errors=[{"field": "note", "message": "required to reject"}],
        )

    def record(locked: Ticket, version: int) -> None:
        PlanReview.objects.create(
            ticket=locked,
            proposal_version=version,
            decision=decision,
            note=note,
            reviewer=principal.user,
            reviewer_key=principal.api_key if principal.user is None else None,
        )

    approve = decision == PlanDecision.APPROVE
    return _ticket_command(
        ticket=ticket,
        principal=principal,
        proposal_version=proposal_version,
        move=TicketMove(
            allowed=(TicketStatus.WAITING_REVIEW,),
            status=TicketStatus.APPROVED if approve else TicketStatus.REJECTED,
            kind=BusinessEventKind.APPROVED if approve else BusinessEventKind.REJECTED,
            data={"note": note},
            record=record,
        ),
    )


# --- reconciling a run with its plan ----------------------------------------------------------


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
