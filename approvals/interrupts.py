"""What the after-sales domain plugs into the runtime's interrupts (runs.extensions): a call
that waits for a supervisor's approval, and a plan that waits for its confirmation and review."""

from approvals import plans, run_ends, selectors
from approvals.gate import calls, policies
from runs.extensions import Interrupt, WaitKind
from runs.models import RunStatus

APPROVAL = WaitKind(name="approval", payload=None, status=RunStatus.WAITING_APPROVAL)
APPROVAL_INTERRUPT = Interrupt(
    policy=policies.APPROVAL_POLICY,
    pause=calls.approval_interrupt,
    kinds=(APPROVAL,),
    pending=selectors.approval_pending,
    on_run_end=run_ends.approvals_on_run_end,
)

PLAN_INTERRUPT = Interrupt(
    policy=plans.PLAN_POLICY,
    pause=plans.plan_interrupt,
    kinds=(plans.CONFIRMATION, plans.PLAN_REVIEW),
    before_wait_expiry=plans.plan_events_apply_locked,
    on_run_end=run_ends.plans_on_run_end,
)
