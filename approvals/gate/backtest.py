"""What proposed policy rules would have done to a shop's past calls of one tool: how many
the rules would have approved with no person, how many of those a person in fact rejected or
revised and the money at stake, how many would have needed two people, and the inbox the
rest make a day. A read: nothing is changed (approvals.gate.policies says what a version asks
of a call; the same function weighs the proposal here)."""

from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal

from approvals.gate.policies import (
    PolicyRules,
    amount_read,
    call_requirement,
    policy_rules_check,
)
from approvals.models import Approval, Decision

# Most calls replayed: the newest of the period, so a year of a busy shop stays a bounded read.
MAX_CALLS = 50_000


@dataclass
class PolicyBacktest:
    since: datetime
    until: datetime
    calls: int = 0
    auto_approved: int = 0
    # Of those the rules would approve with no person: what people in fact decided instead.
    auto_approved_people_rejected: int = 0
    auto_approved_people_revised: int = 0
    # The money the rules would have paid against those decisions: the whole amount of a
    # rejected call, what a revision took off a revised one.
    money_against_people: Decimal = Decimal("0.00")
    auto_approved_money: Decimal = Decimal("0.00")
    two_approvers: int = 0
    waiting_for_people: int = 0
    truncated: bool = False
    days: float = field(init=False, default=0.0)

    @property
    def inbox_per_day(self) -> float:
        return round(self.waiting_for_people / self.days, 2) if self.days else 0.0


def policy_backtest(
    *, merchant, tool_name: str, rules: PolicyRules, since: datetime, until: datetime
) -> PolicyBacktest:
    """Replay the shop's calls of `tool_name` asked for in [since, until) against `rules`,
    on the arguments the agent asked for (what a policy weighs when a call is made)."""
    policy_rules_check(merchant=merchant, tool_name=tool_name, rules=rules)
    result = PolicyBacktest(since=since, until=until)
    result.days = max((until - since).total_seconds() / 86400, 0.0)
    calls = (
        Approval.objects.filter(
            merchant=merchant, tool_name=tool_name, created_at__gte=since, created_at__lt=until
        )
        .order_by("-created_at")
        .values_list("proposed_args", "approved_args", "decision", "decided_by_policy")
    )
    rows = list(calls[: MAX_CALLS + 1])
    result.truncated = len(rows) > MAX_CALLS
    for proposed, approved, decision, by_policy in rows[:MAX_CALLS]:
        result.calls += 1
        needs = call_requirement(version=rules, arguments=proposed, now=until)
        if not needs.auto_approve:
            result.waiting_for_people += 1
            result.two_approvers += needs.required_approvals >= 2
            continue
        result.auto_approved += 1
        amount = amount_read(proposed.get(rules.amount_field)) or Decimal("0")
        result.auto_approved_money += amount
        if by_policy:
            continue
        if decision == Decision.REJECT:
            result.auto_approved_people_rejected += 1
            result.money_against_people += amount
        elif decision == Decision.REVISE:
            result.auto_approved_people_revised += 1
            revised = amount_read((approved or {}).get(rules.amount_field))
            if revised is not None:
                result.money_against_people += max(amount - revised, Decimal("0"))
    return result
