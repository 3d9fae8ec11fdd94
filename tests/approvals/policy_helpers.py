"""Shared set-up of the approval-policy tests: a shop's policy, a refund that waits under it."""

from decimal import Decimal

from django.contrib.auth.models import User

from agentportal.models import Merchant
from approvals.gate.bands import ApproverBand
from approvals.gate.policies import PolicyRules, policy_update
from approvals.models import Approval, ApprovalPolicy
from runs import worker
from runs.models import AgentRun
from tests import factories


def policy_set(merchant: Merchant, **rules) -> ApprovalPolicy:
    """The shop's refund policy; `approver_bands` as (from, approvals, group) triples:
    `[("200.00", 2, "Finance"), (None, 1, None)]`."""
    values = {"amount_field": "amount", **rules}
    for name in ("auto_approve_up_to", "two_approvers_from"):
        if values.get(name) is not None:
            values[name] = Decimal(values[name])
    values["approver_bands"] = tuple(
        ApproverBand(
            from_amount=None if start is None else Decimal(start), approvals=count, group=group
        )
        for start, count, group in values.get("approver_bands", ())
    )
    return policy_update(merchant=merchant, tool_name="issue_refund", rules=PolicyRules(**values))


def big_order(merchant: Merchant, number: str = "ORD-9001", total: str = "900.00"):
    """An order of alice's with room for a large refund."""
    return factories.order_create(
        merchant=merchant, customer=User.objects.get(username="alice"), number=number, total=total
    )


def refund_run(merchant: Merchant, amount: str, order: str = "ORD-1003") -> AgentRun:
    """alice asks for a refund and a worker takes the run as far as it goes."""
    run = factories.run_queue(
        customer=User.objects.get(username="alice"),
        merchant=merchant,
        message=f"I want a refund for {order} amount {amount}",
    )
    worker.tick()
    run.refresh_from_db()
    return run


def approval_of(run: AgentRun) -> Approval:
    return Approval.objects.get(run=run)


def seen(approval: Approval, decision: str, body: dict) -> dict:
    """A decision body as a careful integration sends it: an approve names the digest of the
    arguments it saw (the approval's representation gives it), unless the test names one."""
    if decision == "approve" and "args_digest" not in body:
        return {**body, "args_digest": Approval.objects.get(pk=approval.pk).digest_on_the_table}
    return body
