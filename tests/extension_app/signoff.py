"""A test-only domain that extends the runtime as a real one would, with no line of `runs/`
knowing it: a tool whose call waits for the customer's sign-off (a new interrupt and wait
kind), a graph node that audits the sign-off before the agent goes on, and a script for the
scripted model that asks for one."""

import json
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from runs.extensions import Interrupt, WaitKind
from runs.inputs import wait_pause
from runs.models import AgentRun, Node, RunInput, RunStatus, ToolExecution, ToolStatus
from runs.nodes import tool_key
from runs.services import StepCommit
from runs.snapshot import WaitState, interrupt_id_for
from runs.tools import Tool

SCRIPT = "signoff"
AUDIT_NODE = "signoff_audit"
TOOL = "request_signoff"


class SignoffArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    note: str = Field(min_length=1, max_length=200)


class Signoff(BaseModel):
    """What a run waiting for a sign-off waits with."""

    model_config = ConfigDict(extra="forbid", strict=True)

    note: str


SIGNOFF = WaitKind(
    name="signoff",
    payload=Signoff,
    status=RunStatus.WAITING_USER,
    pending_fields={"note": str},
    answers_inputs=True,
)


def signoff_pause(*, run: AgentRun, lease, tool: Tool, args: SignoffArgs, key: str):
    """Wait for the sign-off; once it is there, hand the run to the audit node."""
    interrupt_id = interrupt_id_for(key)
    if RunInput.objects.filter(run_id=run.pk, interrupt_id=interrupt_id).exists():
        return StepCommit(next_node=AUDIT_NODE, advance_step=False)
    wait = WaitState(
        interrupt_id=interrupt_id,
        kind=SIGNOFF.name,
        tool_name=tool.name,
        tool_key=key,
        tool_args=args.model_dump(mode="json"),
        payload=Signoff(note=args.note),
    )
    return wait_pause(
        run,
        status=SIGNOFF.status,
        wait=wait,
        events=[("signoff.requested", {"interrupt_id": interrupt_id, "note": args.note})],
    )


SIGNOFF_INTERRUPT = Interrupt(policy="signoff", pause=signoff_pause, kinds=(SIGNOFF,))


def audit_step(run: AgentRun, lease):
    """Record who signed off as the call's result, then go back to the tools node, which
    finds every result of the turn and hands it to the model."""
    calls = run.messages[-1]["tool_calls"]
    index = next(i for i, call in enumerate(calls) if call["function"]["name"] == TOOL)
    key = tool_key(run, index)
    answer = RunInput.objects.get(run_id=run.pk, interrupt_id=interrupt_id_for(key))
    result = {"signed_off_by": answer.created_by, "text": answer.payload["text"]}
    execution = ToolExecution(
        run_id=run.pk,
        step=run.step,
        index=index,
        idempotency_key=key,
        tool=TOOL,
        args=json.loads(calls[index]["function"]["arguments"]),
        status=ToolStatus.SUCCEEDED,
        result=result,
    )
    return (
        yield StepCommit(
            next_node=Node.TOOLS,
            advance_step=False,
            events=[("signoff.audited", {"key": key, **result})],
            tool_executions=[execution],
        )
    )


def signoff_script(turn, declared: set[str]) -> str | tuple[str, dict[str, Any]]:
    if TOOL not in turn.results:
        return (TOOL, {"note": turn.text[:200]})
    return f"Signed off: {turn.results[TOOL]['text']}"


REQUEST_SIGNOFF = Tool(
    name=TOOL,
    description="Ask the customer to sign off on a note before going on.",
    args_model=SignoffArgs,
    policy=SIGNOFF_INTERRUPT.policy,
)


def signoff_requested_sentence(data: dict, decider: str | None) -> str:
    said = f"Waiting for a sign-off: {data.get('note', '')}"
    return f"{said} (decided by {decider})" if decider else said
