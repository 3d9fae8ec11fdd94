"""Exchange plans (DESIGN 6.3): the agent proposes, the customer confirms, a supervisor
reviews, and the same run resumes exactly once.

Two halves that meet only through BusinessEvent rows:
- the ticket commands (confirm, revise, decide) commit the business record and an event, one
  transaction each, and enqueue `reconcile(run_id)` on commit;
- `plan_reconcile` applies a run's events after its cursor, in order, under the run's lock.

Lock order: Conversation -> AgentRun -> Ticket.

The package's modules: `waits` (the worker's side: the pause and the waits), `commands` (the
ticket commands), `reconcile` (the run meeting its plan's events), `exchange_items` (what an
exchange line may ask for), `selectors` (a plan in people's words) and `admin`.
"""

from approvals.plans.commands import (
    plan_supervisor_check,
    ticket_confirm,
    ticket_decide,
    ticket_owner_check,
    ticket_principal,
    ticket_revise,
)
from approvals.plans.reconcile import plan_events_apply_locked, plan_reconcile, plans_reconcile_due
from approvals.plans.waits import (
    CONFIRMATION,
    PLAN_POLICY,
    PLAN_REVIEW,
    PLANS_WAIT,
    plan_interrupt,
    plan_wait,
)

__all__ = [
    "CONFIRMATION",
    "PLANS_WAIT",
    "PLAN_POLICY",
    "PLAN_REVIEW",
    "plan_events_apply_locked",
    "plan_interrupt",
    "plan_reconcile",
    "plan_supervisor_check",
    "plan_wait",
    "plans_reconcile_due",
    "ticket_confirm",
    "ticket_decide",
    "ticket_owner_check",
    "ticket_principal",
    "ticket_revise",
]
