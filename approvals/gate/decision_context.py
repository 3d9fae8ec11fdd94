"""What a supervisor needs to decide a call, in plain words: the call and its arguments, what
the customer said, who approved it already and what its policy asks, and the other calls asked
for with it. What the call is about and what looks wrong with it is the tool's to say, through
its CallReview (approvals.gate.reviews)."""

import json
from datetime import timedelta
from decimal import Decimal, InvalidOperation
from typing import Any

from django.utils import timezone
from django.utils.timesince import timesince

from approvals import selectors
from approvals.gate.bands import ApproverBand, bands_from_json
from approvals.gate.quorum import approve_refusal
from approvals.gate.reviews import Concern, call_review
from approvals.models.gate import (
    Approval,
    ApprovalPolicyVersion,
    ApprovalStatus,
    ApprovalVote,
    Decision,
)
from runs import selectors as run_selectors


def money(amount: Any, currency: str = "") -> str:
    """20 -> "20.00 EUR"; what is not a number is shown as it is."""
    try:
        value = f"{Decimal(str(amount)):.2f}"
    except (InvalidOperation, ValueError):
        return str(amount)
    return f"{value} {currency}".strip()


def call_label(tool_name: str) -> str:
    return call_review(tool_name).label or tool_name.replace("_", " ").capitalize()


def readable_arguments(
    tool_name: str, arguments: dict[str, Any], currency: str = ""
) -> list[tuple[str, str]]:
    """(label, value) for each argument: an amount with its currency, a list as JSON."""
    labels = call_review(tool_name).argument_labels
    readable = []
    for name, value in arguments.items():
        if name == "amount":
            shown = money(value, currency)
        elif isinstance(value, dict | list):
            shown = json.dumps(value, ensure_ascii=False)
        else:
            shown = str(value)
        readable.append((labels.get(name, name.replace("_", " ").capitalize()), shown))
    return readable


def revision_concerns(approval: Approval, arguments: dict[str, Any]) -> list[Concern]:
    """The warnings of the call's page for a revision of it to `arguments` (validated)."""
    concerns = call_review(approval.tool_name).concerns
    return concerns(approval, arguments) if concerns else []


def approval_decision_context(approval: Approval) -> dict[str, Any]:
    """The approval page's account of the call: headline, readable arguments, what the
    customer said, and what its tool adds (what it is about, the warnings while it waits)."""
    transcript = run_selectors.run_transcript(approval.run)
    context = {
        "headline": call_label(approval.tool_name),
        "arguments": readable_arguments(approval.tool_name, approval.proposed_args),
        "approved_arguments": readable_arguments(approval.tool_name, approval.approved_args or {}),
        "transcript": transcript,
        "warnings": [],
    }
    facts = call_review(approval.tool_name).facts
    return context | (facts(approval, transcript) if facts else {})


# --- who approved, and what the call still needs -------------------------------------------------


def policy_described(version: ApprovalPolicyVersion) -> str:
    """A policy version's rules as a supervisor reads them: "two approvers from 200.00
    (version 1)"."""
    rules = []
    if version.auto_approve_up_to is not None:
        rules.append(f"approved by the rule up to {money(version.auto_approve_up_to)}")
    if version.two_approvers_from is not None:
        rules.append(f"two approvers from {money(version.two_approvers_from)}")
    else:
        rules += [_band_described(band) for band in bands_from_json(version.approver_bands)]
    if version.escalate_after_seconds:
        rules.append(f"escalated after {_duration(version.escalate_after_seconds)} undecided")
    return f"{', '.join(rules) or 'one approver'} (version {version.version})"


def _band_described(band: ApproverBand) -> str:
    """`2 of the Finance group from 200.00`, `1 of the Support group`."""
    who = (
        f"{band.approvals} of the {band.group} group"
        if band.group
        else (f"{band.approvals} approvers")
    )
    return f"{who} from {money(band.from_amount)}" if band.from_amount is not None else who


def _duration(seconds: int) -> str:
    if seconds < 60:
        return f"{seconds} second{'s' if seconds != 1 else ''}"
    now = timezone.now()
    return timesince(now - timedelta(seconds=seconds), now)


def approvals_context(approval: Approval, *, user) -> dict[str, Any]:
    """The approval page's account of the approvals: who approved the arguments on the table
    and when, whether this supervisor may approve (not twice: a call that needs two people
    needs two different ones), whose changes an approval now approves, and the policy."""
    pending = approval.status == ApprovalStatus.PENDING_APPROVAL
    votes = approval.current_votes
    approved_by_me = pending and any(vote.user_id == user.pk for vote in votes)
    revised = pending and approval.approved_args not in (None, approval.proposed_args)
    revisers = [vote.voter_name for vote in votes if vote.decision == Decision.REVISE]
    refusal = approve_refusal(approval=approval, user=user) if pending else ""
    return {
        "four_eyes": approval.required_approvals > 1 or bool(approval.required_group),
        "required_group": approval.required_group,
        "approve_refusal": refusal,
        "approvals_given": [_given(vote) for vote in votes],
        "approved_by_me": approved_by_me,
        "can_approve": pending and not approved_by_me and not refusal,
        "revised_by": revisers[0] if revised and revisers else "",
        "approve_label": (
            f"Approve {revisers[0]}'s changes" if revised and revisers else "Approve as proposed"
        ),
        "on_the_table": approval.arguments_on_the_table,
        "policy": policy_described(approval.policy_version) if approval.policy_version else "",
    }


def _given(vote: ApprovalVote) -> dict[str, Any]:
    return {
        "by": vote.voter_name,
        "at": vote.created_at,
        "revised": vote.decision == Decision.REVISE,
    }


def approvals_note(approval: Approval, *, user_id: int) -> tuple[str, bool]:
    """An inbox row's word on a call that needs two approvals ("needs 2 approvals", "1 of 2
    approvals: sam"; "you" for the supervisor reading it), and whether they gave one: then
    it waits for another supervisor. Nothing for a call one approval decides."""
    group = f" of {approval.required_group}" if approval.required_group else ""
    if approval.required_approvals <= 1 and not group:
        return "", False
    votes = approval.current_votes
    required = approval.required_approvals
    needed = f"{required}{group} approval{'s' if required > 1 else ''}"
    if not votes:
        return f"needs {needed}", False
    names = ", ".join(
        ("you" if vote.user_id == user_id else vote.voter_name)
        + (" (with changes)" if vote.decision == Decision.REVISE else "")
        for vote in votes
    )
    mine = any(vote.user_id == user_id for vote in votes)
    return f"{len(votes)} of {needed}: {names}", mine


# What a call's status means, for a supervisor looking at the calls of one request.
CALL_STATES = {
    ApprovalStatus.PENDING_APPROVAL: "waiting for a decision",
    ApprovalStatus.APPROVED_EXECUTING: "approved, about to be carried out",
    ApprovalStatus.EXECUTED: "carried out",
    ApprovalStatus.FAILED: "refused when carried out: nothing was done",
    ApprovalStatus.REJECTED: "rejected",
    ApprovalStatus.EXPIRED: "expired: nobody decided in time",
    ApprovalStatus.CANCELLED: "cancelled with the request",
}


def siblings_context(approval: Approval) -> list[dict[str, Any]]:
    """The other calls the model asked for in the same turn, each with its state: they were
    paused together and are decided one by one."""
    return [
        {
            "interrupt_id": sibling.interrupt_id,
            "label": call_label(sibling.tool_name),
            "arguments": ", ".join(
                f"{label}: {value}"
                for label, value in readable_arguments(sibling.tool_name, sibling.proposed_args)
            ),
            "state": CALL_STATES.get(sibling.status, sibling.status),
            "pending": sibling.status == ApprovalStatus.PENDING_APPROVAL,
        }
        for sibling in selectors.approval_siblings(approval)
    ]
