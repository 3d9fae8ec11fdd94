"""A decision as asked for (by the API, a page, the admin or an email link), and the checks of
its body that come before any lock."""

from dataclasses import dataclass
from typing import Any

from agentportal import errors
from approvals.gate.calls import tool_args_validate
from approvals.gate.reviews import call_review
from approvals.models import Approval, Decision
from runs.tools import TOOLS


@dataclass(frozen=True)
class DecisionRequest:
    interrupt_id: str
    decision: str
    tool_args: dict[str, Any] | None = None
    reason: str = ""
    # The digest of the arguments the decider saw (pages always send it).
    args_digest: str | None = None
    # Where the decision was made, for the record: api, page, admin or email_link.
    via: str = "api"


def decision_validate(*, approval: Approval | None, request: DecisionRequest) -> dict | None:
    """The body checks (400) that come before the lock: a reason to reject, revised arguments
    that fit the tool. Returns the normalised revised arguments."""
    if request.decision not in Decision.values:
        raise errors.InvalidInput(
            "Unknown decision.",
            errors=[{"field": "decision", "message": "approve, reject or revise"}],
        )
    if request.decision == Decision.REJECT and not request.reason.strip():
        raise errors.InvalidInput(
            "A rejection needs a reason; the agent tells the customer.",
            errors=[{"field": "reason", "message": "required to reject"}],
        )
    if request.decision != Decision.REVISE:
        if request.tool_args is not None:
            raise errors.InvalidInput(
                "tool_args go with revise only.",
                errors=[{"field": "tool_args", "message": "only with decision revise"}],
            )
        return None
    if not isinstance(request.tool_args, dict):
        raise errors.InvalidInput(
            "A revision needs the edited tool_args.",
            errors=[{"field": "tool_args", "message": "an object of the tool's arguments"}],
        )
    tool = TOOLS.get(approval.tool_name) if approval else None
    if tool is None:
        return request.tool_args
    revised = tool_args_validate(tool, request.tool_args)
    check = call_review(approval.tool_name).revision_check
    if check is not None:
        check(approval, revised)
    return revised
