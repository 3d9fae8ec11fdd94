"""What a tool whose calls wait for approval adds to the gate: its words on the call page and
in the inbox, the facts a supervisor weighs, and the checks a revision must pass. The gate knows
tools by name and arguments only; a tool that has more to say registers a CallReview (as the
shop does, in approvals.shop)."""

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from approvals.models.gate import Approval


@dataclass(frozen=True)
class Concern:
    """A warning before approving: `blocking` when approved as it is the call cannot do what
    it says."""

    text: str
    blocking: bool = False


@dataclass(frozen=True)
class CallReview:
    """A tool's part of reviewing its calls; every part is optional.

    - `label`: the call's name for people ("Voucher"); `argument_labels` its arguments' names.
    - `subject`: what the call is about, from its arguments (a number people know it by),
      for the inbox.
    - `currencies`: the currency of each call's amount (by the call's pk), for a page of calls.
    - `amount_field`: the argument that is the call's amount where no policy names one.
    - `revision_check`: refuses revised arguments the tool must never run with (raises a
      DomainError), before they are locked in.
    - `facts`: the call page's account of the call, given its transcript (headline, what it is
      about, the warnings while it waits), merged over the gate's own.
    - `concerns`: the warnings for a revision of the call to these (validated) arguments.
    """

    tool_name: str
    label: str = ""
    argument_labels: Mapping[str, str] = field(default_factory=dict)
    subject: Callable[[dict[str, Any]], str] | None = None
    currencies: Callable[[list[Approval]], dict[Any, str]] | None = None
    amount_field: str = ""
    revision_check: Callable[[Approval, dict[str, Any]], None] | None = None
    facts: Callable[[Approval, list], dict[str, Any]] | None = None
    concerns: Callable[[Approval, dict[str, Any]], list[Concern]] | None = None


_REVIEWS: dict[str, CallReview] = {}


def call_review_register(review: CallReview) -> None:
    _REVIEWS[review.tool_name] = review


def call_review(tool_name: str) -> CallReview:
    """The tool's review, or one that adds nothing."""
    return _REVIEWS.get(tool_name) or CallReview(tool_name=tool_name)


def call_reviews() -> list[CallReview]:
    return list(_REVIEWS.values())
