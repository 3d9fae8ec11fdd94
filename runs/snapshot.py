"""The typed state of a waiting run: state_snapshot v2, the strict, versioned record of its
pending tool call (DESIGN 6.1), or v3 when one model turn paused with several (seed 004's
composite interrupt), and the wait state of any other wait, its payload validated by
the wait kind a domain registered (runs.extensions)."""

import hashlib
import json
from typing import Any, Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, ValidationError, model_validator

from agentportal import errors
from runs.extensions import wait_kind


class CallStatus:
    PENDING_APPROVAL = "PENDING_APPROVAL"
    APPROVED_EXECUTING = "APPROVED_EXECUTING"
    EXECUTED = "EXECUTED"
    # Executed, and the tool refused: nothing was done, its reason is the call's result.
    FAILED = "FAILED"
    REJECTED = "REJECTED"
    EXPIRED = "EXPIRED"
    CANCELLED = "CANCELLED"

    ALL = (PENDING_APPROVAL, APPROVED_EXECUTING, EXECUTED, FAILED, REJECTED, EXPIRED, CANCELLED)
    DECIDED = (APPROVED_EXECUTING, EXECUTED, FAILED, REJECTED)


# Nothing else: an illegal transition is an error, never silently repaired.
TRANSITIONS = {
    CallStatus.PENDING_APPROVAL: {
        CallStatus.APPROVED_EXECUTING,
        CallStatus.REJECTED,
        CallStatus.EXPIRED,
        CallStatus.CANCELLED,
    },
    # Failed: the tool refused when it executed. Cancelled: its run ended before it executed
    # (DESIGN 6.1's run-end rule).
    CallStatus.APPROVED_EXECUTING: {CallStatus.EXECUTED, CallStatus.FAILED, CallStatus.CANCELLED},
}


class IllegalTransition(Exception):
    pass


def transition_check(current: str, new: str) -> None:
    if new not in TRANSITIONS.get(current, set()):
        raise IllegalTransition(f"{current} -> {new} is not allowed")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class PendingToolCall(_Strict):
    interrupt_id: str
    tool_name: str
    tool_args: dict[str, Any]
    status: Literal[
        "PENDING_APPROVAL",
        "APPROVED_EXECUTING",
        "EXECUTED",
        "FAILED",
        "REJECTED",
        "EXPIRED",
        "CANCELLED",
    ]
    expires_at: AwareDatetime
    decision: Literal["approve", "reject", "revise"] | None
    result: dict[str, Any] | None
    updated_at: AwareDatetime


class RunContext(_Strict):
    thread_id: str
    run_id: str


class StateSnapshot(_Strict):
    """Version 2: one pending call, exactly as seed 000 has it."""

    version: Literal[2]
    pending_tool_call: PendingToolCall
    run_context: RunContext

    @property
    def calls(self) -> list[PendingToolCall]:
        return [self.pending_tool_call]

    def dump(self) -> dict[str, Any]:
        return self.model_dump(mode="json")


class CompositeSnapshot(_Strict):
    """Version 3: the calls of one model turn that paused together, in the model's order."""

    version: Literal[3]
    pending_tool_calls: list[PendingToolCall] = Field(min_length=2)
    run_context: RunContext

    @property
    def calls(self) -> list[PendingToolCall]:
        return list(self.pending_tool_calls)

    def dump(self) -> dict[str, Any]:
        return self.model_dump(mode="json")


def snapshot_of(calls: list[PendingToolCall], run_context: RunContext) -> dict[str, Any]:
    """The stored snapshot of these calls: version 2 for one, version 3 for several."""
    if len(calls) == 1:
        return StateSnapshot(version=2, pending_tool_call=calls[0], run_context=run_context).dump()
    return CompositeSnapshot(version=3, pending_tool_calls=calls, run_context=run_context).dump()


def snapshot_call(snapshot: "StateSnapshot | CompositeSnapshot", interrupt_id: str):
    """The snapshot's call with this interrupt id, or None."""
    return next((call for call in snapshot.calls if call.interrupt_id == interrupt_id), None)


class SnapshotError(errors.SnapshotInvalid):
    pass


class SnapshotVersionUnsupported(SnapshotError, errors.SnapshotVersionUnsupported):
    pass


def snapshot_parse(data: Any) -> StateSnapshot | CompositeSnapshot:
    """Validate a stored snapshot; anything but an exact v2 or v3 snapshot is an error."""
    if not isinstance(data, dict):
        raise SnapshotError("the state snapshot is not an object")
    version = data.get("version")
    if version not in (2, 3) or isinstance(version, bool):
        raise SnapshotVersionUnsupported(f"state snapshot version {version!r}")
    model = StateSnapshot if version == 2 else CompositeSnapshot
    try:
        return model.model_validate_json(json.dumps(data))
    except (ValidationError, TypeError, ValueError) as error:
        raise SnapshotError(str(error)) from error


def interrupt_id_for(key: str, *parts: str) -> str:
    """The id of a wait, derived from its tool call's key (and what it waits for), so that a
    replayed step finds the same wait."""
    return "int-" + hashlib.sha256(":".join((key, *parts)).encode()).hexdigest()[:16]


class WaitState(_Strict):
    """What a run waiting for people waits for: the call that paused it and its wait kind's
    payload, validated by the model that kind registered (runs.extensions)."""

    interrupt_id: str
    kind: str
    tool_name: str
    tool_key: str
    tool_args: dict[str, Any]
    payload: Any

    @model_validator(mode="after")
    def _payload_of_its_kind(self) -> "WaitState":
        kind = wait_kind(self.kind)
        if kind is None or kind.payload is None:
            raise ValueError(f"{self.kind!r} is not a registered wait kind with a payload")
        if not isinstance(self.payload, kind.payload):
            self.payload = kind.payload.model_validate_json(json.dumps(self.payload))
        return self

    def dump(self) -> dict[str, Any]:
        return self.model_dump(mode="json")


def wait_parse(data: Any) -> WaitState | None:
    """The run's wait state, or None when it has none; SnapshotError when it is malformed."""
    if data is None:
        return None
    try:
        return WaitState.model_validate_json(json.dumps(data))
    except (ValidationError, TypeError, ValueError) as error:
        raise SnapshotError(f"wait state: {error}") from error
