"""The worker's side of an exchange plan: the pause that proposes a plan, the waits it leaves
the run in (the customer's confirmation, then a supervisor's review) and the call's result."""

import uuid
from typing import Any

from django.db import IntegrityError, transaction
from pydantic import BaseModel, ConfigDict, Field

from approvals import selectors
from approvals.customer_words import plan_lines
from approvals.models import (
    BusinessEvent,
    BusinessEventKind,
    Order,
    Proposal,
    Ticket,
    TicketStatus,
)
from approvals.plans.exchange_items import exchange_items_problem
from runs import services as run_services
from runs.extensions import WaitKind
from runs.inputs import wait_pause
from runs.models import AgentRun, RunStatus, ToolStatus
from runs.releases import GRAPH_RELEASES
from runs.services import Lease, StepCommit
from runs.snapshot import WaitState, interrupt_id_for
from runs.step_protocol import ToolOutcome
from runs.tools import Tool

FINAL_STATUSES = (TicketStatus.APPROVED, TicketStatus.REJECTED, TicketStatus.CANCELLED)


def proposal_summary(order: Order, items: list[dict[str, Any]]) -> str:
    """The plan in words its customer reads too: products and sizes, not stock codes."""
    return "; ".join(f"exchange {line}" for line in plan_lines(order, items))


# The switch of a graph version: whether a proposed plan waits for people (on unless a version
# says otherwise) or is only recorded while the run goes on.
PLANS_WAIT = "plans_wait"
# The policy of the tools that propose a plan for people to confirm (approvals.interrupts).
PLAN_POLICY = "business_wait"


class PlanWait(BaseModel):
    """What a run whose plan waits for people waits with: the ticket and its version."""

    model_config = ConfigDict(extra="forbid", strict=True)

    ticket_id: str
    proposal_version: int = Field(ge=1)


CONFIRMATION = WaitKind(
    name="confirmation",
    payload=PlanWait,
    status=RunStatus.WAITING_USER,
    pending_fields={"ticket_id": uuid.UUID},
    input_refusal="The run waits for a plan's confirmation: confirm or revise its ticket instead.",
)
PLAN_REVIEW = WaitKind(
    name="plan_review",
    payload=PlanWait,
    status=RunStatus.WAITING_APPROVAL,
    pending_fields={"ticket_id": uuid.UUID},
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
