"""The worked example of docs/architecture.md: a tool whose calls need a supervisor's approval,
added by an app of its own without a line of the after-sales domain changed. A goodwill
voucher: the agent proposes one, a person of the shop approves, revises or rejects it, and
only an approved voucher is granted, once."""

from decimal import Decimal
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from approvals.gate.policies import APPROVAL_POLICY
from runs.tools import Tool, ToolContext

SCRIPT = "voucher"
TOOL = "grant_voucher"
# What was granted, by idempotency key: a voucher granted twice would be money given twice.
GRANTED: dict[str, dict[str, Any]] = {}


class VoucherArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    amount: Decimal = Field(gt=0, max_digits=6, decimal_places=2)
    reason: str = Field(min_length=1, max_length=200)


def grant_voucher(args: VoucherArgs, context: ToolContext) -> dict[str, Any]:
    granted = GRANTED.setdefault(
        context.idempotency_key, {"status": "granted", "amount": str(args.amount)}
    )
    return dict(granted)


def voucher_script(turn, declared: set[str]) -> str | tuple[str, dict[str, Any]]:
    if TOOL not in turn.results:
        return (TOOL, {"amount": "15.00", "reason": turn.text[:200]})
    result = turn.results[TOOL]
    if result.get("status") == "granted":
        return f"A voucher of {result['amount']} is yours."
    return "No voucher this time."


GRANT_VOUCHER = Tool(
    name=TOOL,
    description="Grant the customer a goodwill voucher. A supervisor approves.",
    args_model=VoucherArgs,
    policy=APPROVAL_POLICY,
    executor=grant_voucher,
    progress="Granting a voucher…",
)
