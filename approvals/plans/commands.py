"""The ticket commands (confirm, revise, decide): each commits the business record and a
BusinessEvent in one transaction, and enqueues `reconcile(run_id)` on commit."""

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

from django.db import transaction
from django.utils import timezone
from pydantic import TypeAdapter, ValidationError

from agentportal import errors
from agentportal.principals import Principal
from agentportal.problems import pydantic_errors
from agentportal.selectors import principal_for_user
from approvals import locks
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
from approvals.plans.exchange_items import ExchangeItems, exchange_items_problem
from approvals.plans.waits import proposal_summary
from runs import services as run_services
from runs.locks import run_lock

EXCHANGE_ITEMS = TypeAdapter(ExchangeItems)


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

    return _customer_answer(
        ticket=ticket,
        principal=principal,
        proposal_version=proposal_version,
        status=TicketStatus.WAITING_REVIEW,
        kind=BusinessEventKind.CONFIRMED,
        data={},
        record=record,
    )


def _customer_answer(
    *,
    ticket: Ticket,
    principal: Principal,
    proposal_version: int,
    status: str,
    kind: str,
    data: dict[str, Any],
    record: Callable[[Ticket, int], None] | None = None,
) -> Ticket:
    """The customer's answer to the proposal waiting for it: the ticket moves to `status`
    with an event of `kind` (and `record` is written under the ticket's lock)."""
    move = TicketMove(
        allowed=(TicketStatus.WAITING_CONFIRMATION,),
        status=status,
        kind=kind,
        data=data,
        record=record,
    )
    return _ticket_command(
        ticket=ticket, principal=principal, proposal_version=proposal_version, move=move
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
        return _customer_answer(
            ticket=ticket,
            principal=principal,
            proposal_version=proposal_version,
            status=TicketStatus.NEEDS_REVISION,
            kind=BusinessEventKind.CHANGES_REQUESTED,
            data={"note": note},
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
