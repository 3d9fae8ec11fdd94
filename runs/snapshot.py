"""The typed state of a waiting run: state_snapshot v2, the strict, versioned record of its
pending tool call (DESIGN 6.1), and the wait state of any other wait, its payload validated by
the wait kind a domain registered (runs.extensions)."""

import hashlib
import json
from typing import Any, Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, ValidationError, model_validator

from agentportal import errors


class CallStatus:
    PENDING_APPROVAL = "PENDING_APPROVAL"
    APPROVED_EXECUTING = "APPROVED_EXECUTING"
    EXECUTED = "EXECUTED"
    REJECTED = "REJECTED"
    EXPIRED = "EXPIRED"
    CANCELLED = "CANCELLED"

    ALL = (PENDING_APPROVAL, APPROVED_EXECUTING, EXECUTED, REJECTED, EXPIRED, CANCELLED)
    DECIDED = (APPROVED_EXECUTING, EXECUTED, REJECTED)


# Nothing else: an illegal transition is an error, never silently repaired.
TRANSITIONS = {
    CallStatus.PENDING_APPROVAL: {
        CallStatus.APPROVED_EXECUTING,
        CallStatus.REJECTED,
        CallStatus.EXPIRED,
        CallStatus.CANCELLED,
    },
    # Cancelled: its run ended before it executed (DESIGN 6.1's run-end rule).
    CallStatus.APPROVED_EXECUTING: {CallStatus.EXECUTED, CallStatus.CANCELLED},
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
        "PENDING_APPROVAL", "APPROVED_EXECUTING", "EXECUTED", "REJECTED", "EXPIRED", "CANCELLED"
    ]
    expires_at: AwareDatetime
    decision: Literal["approve", "reject", "revise"] | None
    result: dict[str, Any] | None
    updated_at: AwareDatetime


class RunContext(_Strict):
    thread_id: str
    run_id: str


class StateSnapshot(_Strict):
    version: Literal[2]
    pending_tool_call: PendingToolCall
    run_context: RunContext

    def dump(self) -> dict[str, Any]:
        return self.model_dump(mode="json")


class SnapshotError(errors.SnapshotInvalid):
    pass


class SnapshotVersionUnsupported(SnapshotError, errors.SnapshotVersionUnsupported):
    pass


def snapshot_parse(data: Any) -> StateSnapshot:
    """Validate a stored snapshot; anything but an exact v2 snapshot is an error."""
    if not isinstance(data, dict):
        raise SnapshotError("the state snapshot is not an object")
    if data.get("version") != 2 or isinstance(data.get("version"), bool):
        raise SnapshotVersionUnsupported(f"state snapshot version {data.get('version')!r}")
    try:
        return StateSnapshot.model_validate_json(json.dumps(data))
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
        from runs.extensions import wait_kind

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
