"""A shop's approval policies: writing a new version of one, and what a version asks of a call.

Policies are versioned like releases. `policy_update` writes a new immutable version when a
rule changes; a call records the version it was created under and what that version asked of
it (how many approvals, when to escalate), so a later edit never changes a pending call.
"""

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal, InvalidOperation
from typing import Any

from django.db import transaction
from django.db.models import Case, DecimalField, When
from django.db.models.fields.json import KT
from django.db.models.functions import Cast

from agentportal import errors
from agentportal.models import Merchant
from approvals.gate.bands import (
    ApproverBand,
    band_for,
    bands_as_json,
    bands_from_json,
    bands_problems,
)
from approvals.gate.reviews import call_reviews
from approvals.locks import policy_lock
from approvals.models import ApprovalPolicy, ApprovalPolicyVersion, ApproverGroup
from runs.tools import TOOLS

# The policy of the tools whose calls wait for a supervisor's approval (approvals.interrupts).
APPROVAL_POLICY = "approval"
# What a version's rules are made of; two versions with the same values are the same rules.
RULE_FIELDS = (
    "amount_field",
    "auto_approve_up_to",
    "two_approvers_from",
    "approver_bands",
    "escalate_after_seconds",
    "escalate_to_operators",
    "escalate_to_email",
)
NUMERIC_ANNOTATIONS = (Decimal, int, float)
# The most seconds `escalate_after_seconds` holds (its column's range on every database).
MAX_SECONDS = 2**31 - 1


@dataclass(frozen=True)
class PolicyRules:
    """A policy's rules. `two_approvers_from` is the shorthand of one band (two people of any
    group from that amount): given alone, the bands are made of it."""

    amount_field: str
    auto_approve_up_to: Decimal | None = None
    two_approvers_from: Decimal | None = None
    approver_bands: tuple[ApproverBand, ...] = field(default=())
    escalate_after_seconds: int | None = None
    escalate_to_operators: bool = True
    escalate_to_email: str = ""

    def __post_init__(self) -> None:
        bands = tuple(self.approver_bands)
        if self.two_approvers_from is not None and not bands:
            bands = (ApproverBand(from_amount=self.two_approvers_from, approvals=2),)
        # (stored as the JSON says them: amounts to the cent, lowest band first)
        object.__setattr__(self, "approver_bands", bands_from_json(bands_as_json(bands)))

    @classmethod
    def of(cls, version: ApprovalPolicyVersion) -> "PolicyRules":
        values = {name: getattr(version, name) for name in RULE_FIELDS}
        return cls(**values | {"approver_bands": bands_from_json(version.approver_bands)})

    def as_fields(self) -> dict[str, Any]:
        """The rules as a version's columns."""
        values = {name: getattr(self, name) for name in RULE_FIELDS}
        return values | {"approver_bands": bands_as_json(self.approver_bands)}


@dataclass(frozen=True)
class CallRequirement:
    """What a policy version asks of one call: `required_approvals` people, of the approver
    group `group` when it names one (None: any supervisor of the shop)."""

    auto_approve: bool
    required_approvals: int
    escalate_at: datetime | None
    group: str | None = None


def policy_tool_names() -> list[str]:
    """The tools a policy can be set for: those whose calls wait for approval."""
    return sorted(name for name, tool in TOOLS.items() if tool.policy == APPROVAL_POLICY)


def policy_amount_fields() -> list[str]:
    """The arguments a policy can weigh: the numeric ones of the tools it can be set for."""
    return sorted(
        {
            name
            for tool_name in policy_tool_names()
            for name, info in TOOLS[tool_name].args_model.model_fields.items()
            if info.annotation in NUMERIC_ANNOTATIONS
        }
    )


def policy_rules_check(*, merchant: Merchant, tool_name: str, rules: PolicyRules) -> None:
    """400 with field errors unless the rules fit the tool and the shop: the tool exists and
    waits for approval, the amount field is one of its numeric arguments, thresholds are not
    negative, the auto-approval limit lies below the four-eyes threshold and every band, and
    the bands name the shop's approver groups (approvals.gate.bands)."""
    tool = TOOLS.get(tool_name)
    if tool is None or tool.policy != APPROVAL_POLICY:
        raise errors.InvalidInput(
            f"{tool_name} is not a tool whose calls wait for approval.",
            errors=[{"field": "tool_name", "message": "a tool whose calls need approval"}],
        )
    problems = []
    field = tool.args_model.model_fields.get(rules.amount_field)
    if field is None or field.annotation not in NUMERIC_ANNOTATIONS:
        numeric = [
            name
            for name, info in tool.args_model.model_fields.items()
            if info.annotation in NUMERIC_ANNOTATIONS
        ]
        problems.append(
            {
                "field": "amount_field",
                "message": f"one of {tool_name}'s amounts: {', '.join(numeric) or 'none'}",
            }
        )
    for name in ("auto_approve_up_to", "two_approvers_from"):
        value = getattr(rules, name)
        if value is not None and value < 0:
            problems.append({"field": name, "message": "must not be negative"})
    auto, four_eyes = rules.auto_approve_up_to, rules.two_approvers_from
    if auto is not None and four_eyes is not None and auto >= four_eyes:
        problems.append(
            {
                "field": "two_approvers_from",
                "message": f"must be above auto_approve_up_to ({auto})",
            }
        )
    shorthand = (ApproverBand(from_amount=four_eyes, approvals=2),)
    if four_eyes is not None and rules.approver_bands != shorthand:
        problems.append(
            {
                "field": "approver_bands",
                "message": "give either two_approvers_from or approver_bands, not both",
            }
        )
    elif four_eyes is None:
        groups = set(ApproverGroup.objects.filter(merchant=merchant).values_list("name", flat=True))
        problems += bands_problems(rules.approver_bands, auto_approve_up_to=auto, groups=groups)
    if rules.escalate_after_seconds is not None and rules.escalate_after_seconds < 1:
        problems.append({"field": "escalate_after_seconds", "message": "at least 1 second"})
    if problems:
        raise errors.InvalidInput("The policy's rules do not fit together.", errors=problems)


def policy_update(
    *, merchant: Merchant, tool_name: str, rules: PolicyRules, user=None
) -> ApprovalPolicy:
    """Set a tool's policy in a shop: a new version when a rule changed, nothing otherwise.

    Locks the policy row (created first if the shop had none), so two concurrent edits make
    two consecutive versions and never the same number twice.
    """
    policy_rules_check(merchant=merchant, tool_name=tool_name, rules=rules)
    # get_or_create finds the row a concurrent first edit created a moment ago.
    policy, _created = ApprovalPolicy.objects.get_or_create(merchant=merchant, tool_name=tool_name)
    with transaction.atomic():
        policy = policy_lock(policy.pk)
        current = policy.current
        if current is not None and PolicyRules.of(current) == rules:
            return policy
        version = ApprovalPolicyVersion.objects.create(
            policy=policy,
            version=(current.version + 1) if current else 1,
            created_by=user,
            **rules.as_fields(),
        )
        moved = ApprovalPolicy.objects.filter(pk=policy.pk, current=current).update(current=version)
        if moved != 1:
            raise transaction.TransactionManagementError("policy changed under its lock")
        policy.current = version
    return policy


def policy_version_current(*, merchant_id: int, tool_name: str) -> ApprovalPolicyVersion | None:
    policy = (
        ApprovalPolicy.objects.filter(merchant_id=merchant_id, tool_name=tool_name)
        .select_related("current")
        .first()
    )
    return policy.current if policy is not None else None


def call_amount() -> Case:
    """A call's amount as a number, to sort calls by: the argument its policy version weighs,
    or, for a call no policy weighed, the one its tool's review names; None when neither."""
    money = DecimalField(max_digits=12, decimal_places=2)
    weighed = [
        When(policy_version__amount_field=name, then=Cast(KT(f"proposed_args__{name}"), money))
        for name in policy_amount_fields()
    ]
    named = [
        When(
            policy_version__isnull=True,
            tool_name=review.tool_name,
            then=Cast(KT(f"proposed_args__{review.amount_field}"), money),
        )
        for review in call_reviews()
        if review.amount_field
    ]
    return Case(*weighed, *named, default=None, output_field=money)


def call_requirement(
    *,
    version: ApprovalPolicyVersion | PolicyRules | None,
    arguments: dict[str, Any],
    now: datetime,
) -> CallRequirement:
    """What a call with these (validated) arguments needs under a policy version (or proposed
    rules). Without a policy: one approval, no escalation. An amount that cannot be read is
    never auto-approved and falls in the policy's highest band."""
    if version is None:
        return CallRequirement(auto_approve=False, required_approvals=1, escalate_at=None)
    amount = amount_read(arguments.get(version.amount_field))
    escalate_at = (
        now + timedelta(seconds=version.escalate_after_seconds)
        if version.escalate_after_seconds
        else None
    )
    auto = (
        amount is not None
        and version.auto_approve_up_to is not None
        and amount <= version.auto_approve_up_to
    )
    bands = version.approver_bands
    band = band_for(bands if isinstance(bands, tuple) else bands_from_json(bands), amount)
    return CallRequirement(
        auto_approve=auto,
        required_approvals=band.approvals if band else 1,
        escalate_at=None if auto else escalate_at,
        group=band.group if band else None,
    )


def amount_read(value: Any) -> Decimal | None:
    """An argument's value as an amount; None when it is not a finite number."""
    try:
        amount = Decimal(str(value))
    except (InvalidOperation, ValueError):
        return None
    return amount if amount.is_finite() else None
