"""A plain domain for the runtime's own tests: the agent tracks a customer's parcel (a quick
tool reading the database), finds a pick-up locker when asked (a slow tool that stops early
when the run is cancelled), and, where the release declares them, asks the customer which
parcel they mean (a clarification) or a colleague to follow up with the courier (a follow-up,
the only call of its turn). None needs a person's decision."""

import re
import time
from typing import Any

from django.conf import settings
from pydantic import BaseModel, ConfigDict, Field

from runs.scripted import Transcript
from runs.tools import Policy, Tool, ToolCancelled, ToolContext, ToolError
from tests.extension_app.models import Parcel

SCRIPT = "parcels"
TRACK = "track_parcel"
LOCKER = "find_locker"
ASK = "ask_which_parcel"
COURIER = "ask_courier"
# What shop_create's agent may call; a release that declares ASK too asks the customer which
# parcel they mean when they named none.
TOOLS = [TRACK, LOCKER]
QUESTION = "Which parcel is this about?"
# What colleagues were asked to follow up, by the key of the call that asked (in this
# process): asked twice would be a colleague bothered twice.
COURIER_DESK: dict[str, dict[str, Any]] = {}
PARCEL_NUMBER = re.compile(r"\bPCL-\d{1,12}\b", re.IGNORECASE)


class Question(BaseModel):
    model_config = ConfigDict(extra="forbid")

    question: str = Field(min_length=1, max_length=200)


class ParcelArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    parcel_id: str = Field(pattern=r"^PCL-\d{1,12}$")


class CourierArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    parcel_id: str = Field(pattern=r"^PCL-\d{1,12}$")
    note: str = Field(max_length=500)


def _parcel(context: ToolContext, number: str) -> Parcel:
    parcel = Parcel.objects.filter(
        merchant_id=context.merchant_id, customer_id=context.account_id, number=number
    ).first()
    if parcel is None:
        raise ToolError(f"there is no parcel {number} for this customer")
    return parcel


def track_parcel(args: ParcelArgs, context: ToolContext) -> dict[str, Any]:
    parcel = _parcel(context, args.parcel_id)
    return {"parcel_id": parcel.number, "status": parcel.status}


def find_locker(args: ParcelArgs, context: ToolContext) -> dict[str, Any]:
    """The carrier is slow: this takes PARCEL_LOCKER_LATENCY_SECONDS, and stops early when the
    run is cancelled."""
    deadline = time.monotonic() + settings.PARCEL_LOCKER_LATENCY_SECONDS
    while (left := deadline - time.monotonic()) > 0:
        if not context.cancel.sleep(min(left, 0.05)):
            raise ToolCancelled("locker search abandoned: the run was cancelled")
    return {"parcel_id": _parcel(context, args.parcel_id).number, "locker": "Station Square"}


def ask_courier(args: CourierArgs, context: ToolContext) -> dict[str, Any]:
    parcel = _parcel(context, args.parcel_id)
    COURIER_DESK.setdefault(
        context.idempotency_key,
        {"run_id": context.run_id, "parcel_id": parcel.number, "note": args.note},
    )
    return {"status": "registered", "request": context.idempotency_key}


def parcels_script(turn: Transcript, declared: set[str]) -> str | tuple[str, dict[str, Any]]:
    """Track the parcel the customer names (asking which, when they named none and the
    release lets the agent ask); find a locker for it when they ask for one; ask the courier
    when they ask for a follow-up and the release lets the agent."""
    found = next(filter(None, (PARCEL_NUMBER.search(text) for text in turn.said)), None)
    if found is None:
        if ASK in declared and ASK not in turn.results:
            return (ASK, {"question": QUESTION})
        return f"{QUESTION} Please tell me its number, like PCL-1."
    number = found.group(0).upper()
    if "follow up" in turn.text.lower() and COURIER in declared:
        if COURIER not in turn.results:
            return (COURIER, {"parcel_id": number, "note": turn.text[:500]})
        asked = turn.results[COURIER]
        if "error" in asked:
            return f"I could not ask the courier about parcel {number}: {asked['error']}"
        return f"A colleague will follow up on parcel {number} with the courier."
    if TRACK not in turn.results:
        return (TRACK, {"parcel_id": number})
    parcel = turn.results[TRACK]
    if "error" in parcel:
        return f"I could not find parcel {number}: {parcel['error']}"
    if "locker" not in turn.text.lower():
        return f"Parcel {number} is {parcel['status']}."
    if LOCKER not in declared:
        return "I can't look for lockers here."
    if LOCKER not in turn.results:
        return (LOCKER, {"parcel_id": number})
    locker = turn.results[LOCKER]
    if "error" in locker:
        return f"I could not find a locker for {number}: {locker['error']}"
    return f"Parcel {number} is {parcel['status']}; you can pick it up at {locker['locker']}."


TRACK_PARCEL = Tool(
    name=TRACK,
    description="Track one of the customer's parcels by its number.",
    args_model=ParcelArgs,
    policy=Policy.AUTO,
    executor=track_parcel,
    progress="Tracking your parcel…",
)
FIND_LOCKER = Tool(
    name=LOCKER,
    description="Find a pick-up locker for a parcel. Slow.",
    args_model=ParcelArgs,
    policy=Policy.AUTO,
    executor=find_locker,
    blocking=True,
    progress="Looking for a locker…",
)
ASK_WHICH_PARCEL = Tool(
    name=ASK,
    description="Ask the customer which parcel they mean, and wait for the answer.",
    args_model=Question,
    policy=Policy.CLARIFICATION,
)
ASK_COURIER = Tool(
    name=COURIER,
    description="Ask a colleague to follow up with the courier about a parcel. "
    "Call it alone, with no other tool in the same turn.",
    args_model=CourierArgs,
    policy=Policy.FOLLOWUP,
    executor=ask_courier,
)
