"""The graph's own nodes: the model node asks the model for the next turn, the tools node runs
that turn's tool calls (and the followup node the one call a follow-up request makes). Each is
a step function the worker runs (runs.worker); runs.apps registers them."""

import json
import logging
import time
from collections.abc import Generator
from typing import Any

from django.conf import settings
from django.db import DatabaseError
from pydantic import ValidationError

from agentportal.logs import about
from agentportal.problems import pydantic_errors
from runs import extensions, services
from runs.deltas import DeltaPublisher
from runs.llm import ModelError, ModelResponse
from runs.model_choice import model_client_for
from runs.models import (
    AgentRun,
    AttemptStatus,
    ErrorCode,
    Node,
    RunStatus,
    ToolExecution,
    ToolStatus,
)
from runs.releases import tools_declared
from runs.services import Lease, StepCommit
from runs.step_protocol import CallTimedOut, RunAbandoned, SlowCall, Step, ToolOutcome
from runs.tools import (
    CancellationToken,
    Policy,
    Tool,
    ToolCancelled,
    ToolContext,
    ToolError,
)

logger = logging.getLogger(__name__)


def _config(name: str) -> Any:
    return settings.AGENTPORTAL[name]


# --- the model node ------------------------------------------------------------------------


def model_step(run: AgentRun, lease: Lease) -> Step:
    """The model node: ask the model for the next turn, with the tools the release declares."""
    manifest = run.release_snapshot["manifest"]
    tools = tools_declared(run.release_snapshot)
    client = model_client_for(manifest)
    schemas = [tool.schema() for tool in tools.values()]
    started = time.monotonic()
    deltas = None
    if _config("STREAM_DELTAS"):
        deltas = DeltaPublisher(run=str(run.pk), gen=f"{run.step}.{lease.attempt_no}")

    async def streamed() -> ModelResponse:
        try:
            return await client.acomplete(messages=run.messages, tools=schemas, deltas=deltas)
        finally:
            # Complete or failed, this call writes no more: its commit (or retry) follows.
            if deltas is not None:
                await deltas.flush(done=True)

    try:
        if client.waits:
            response = yield SlowCall(streamed, CancellationToken(), awaited=True)
        else:
            response = client.complete(messages=run.messages, tools=schemas)
    except ModelError as error:
        return (yield _model_failed(run, lease, str(error), started))
    except RunAbandoned as abandoned:
        _model_abandoned(run, lease, str(abandoned), started)
        raise
    latency_ms = int((time.monotonic() - started) * 1000)
    run = yield _model_commit(response, latency_ms)
    if run.next_node == Node.TOOLS:
        lease.fresh_turn = run.step
    return run


def _model_commit(response: ModelResponse, latency_ms: int) -> StepCommit:
    responded = (
        "model.responded",
        {
            "usage": response.usage,
            "tool_calls": [call.name for call in response.tool_calls],
            "latency_ms": latency_ms,
        },
    )
    started = [
        ("tool.started", {"tool": call.name, "call_id": call.id, "index": index})
        for index, call in enumerate(response.tool_calls)
    ]
    commit = StepCommit(
        next_node=Node.TOOLS,
        messages=[response.as_message()],
        events=[responded, *started],
        attempt_status=AttemptStatus.RESPONDED,
        attempt_usage=response.usage,
        attempt_latency_ms=latency_ms,
    )
    if not response.tool_calls:
        commit.complete_with = response.content or ""
    return commit


def _model_failed(run: AgentRun, lease: Lease, error: str, started: float) -> StepCommit:
    logger.warning("model call for run %s failed: %s", run.pk, error, extra=about(run))
    latency_ms = int((time.monotonic() - started) * 1000)
    commit = StepCommit(
        next_node=Node.MODEL,
        advance_step=False,
        events=[("model.failed", {"attempt": lease.attempt_no, "error": error[:500]})],
        attempt_status=AttemptStatus.FAILED,
        attempt_latency_ms=latency_ms,
        attempt_error=error[:2000],
    )
    if lease.attempt_no >= _config("MODEL_ATTEMPTS_PER_STEP"):
        commit.fail_with = (
            ErrorCode.MODEL_ERROR,
            f"The model failed {lease.attempt_no} times: {error[:500]}",
        )
    return commit


def _model_abandoned(run: AgentRun, lease: Lease, reason: str, started: float) -> None:
    """The run was stopped or lost while the model answered and the call is given up: its
    attempt says so, and nothing else of the run is written."""
    if lease.attempt_id is None:
        return
    try:
        services.model_attempt_finish(
            attempt_id=lease.attempt_id,
            status=AttemptStatus.ABANDONED,
            latency_ms=int((time.monotonic() - started) * 1000),
            error=reason[:2000],
        )
    except DatabaseError:
        # The run is dropped all the same; a new lease holder would find the attempt STARTED.
        logger.exception("could not record model attempt %s as abandoned", lease.attempt_id)


# --- the tools node ------------------------------------------------------------------------


def tool_key(run: AgentRun, index: int) -> str:
    return f"agent:{run.pk}:{run.step}:{index}"


def _tool_message(call_id: str, result: dict[str, Any]) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": json.dumps(result)}


def followup_step(run: AgentRun, lease: Lease) -> Step:
    """The followup node: the tools node for a turn whose only call is a follow-up request."""
    return (yield from tools_step(run, lease, followup_node=True))


def tools_step(run: AgentRun, lease: Lease, *, followup_node: bool = False) -> Step:
    """Run the last model turn's tool calls, committing each result with its key.

    A call whose key already has a result is never run again: its result is reused. The
    followup node is this same step for a turn whose only call is a follow-up request.
    """
    calls = run.messages[-1].get("tool_calls") or []
    limit = run.release_snapshot["manifest"]["limits"]["max_tool_calls_per_turn"]
    keys = [tool_key(run, index) for index in range(len(calls))]
    done = {}
    if lease.fresh_turn != run.step:
        done = {
            execution.idempotency_key: execution
            for execution in ToolExecution.objects.filter(idempotency_key__in=keys)
        }
    # Coming back to this turn (the followup node) looks its results up again.
    lease.fresh_turn = None
    declared = tools_declared(run.release_snapshot)
    for index, call in enumerate(calls):
        key = keys[index]
        if key in done:
            continue
        last = all(k in done for k in keys[index + 1 :])
        name = call["function"]["name"]
        tool = declared.get(name)
        outcome = yield from _tool_outcome(
            run,
            lease,
            tool,
            name,
            call,
            key,
            index,
            limit,
            alone=len(calls) == 1,
            followup_node=followup_node,
        )
        if isinstance(outcome, StepCommit):
            return (yield outcome)
        execution = ToolExecution(
            run_id=run.pk,
            step=run.step,
            index=index,
            idempotency_key=key,
            tool=name,
            args=outcome.arguments,
            status=outcome.status,
            result=outcome.result,
        )
        done[key] = execution
        commit = StepCommit(
            next_node=Node.TOOLS,
            advance_step=False,
            events=[
                (
                    "tool.result",
                    {"key": key, "tool": name, "status": outcome.status, "result": outcome.result},
                )
            ],
            tool_executions=[] if outcome.recorded else [execution],
        )
        if last:
            _finish_turn(commit, calls, keys, done)
        run = yield commit
        if run.status != RunStatus.RUNNING:
            return run
    if run.next_node in (Node.TOOLS, Node.FOLLOWUP) and all(key in done for key in keys):
        # Every result was already committed (a crash after the last one): just move on.
        commit = StepCommit(next_node=Node.MODEL)
        _finish_turn(commit, calls, keys, done)
        run = yield commit
    return run


def _finish_turn(commit: StepCommit, calls: list, keys: list[str], done: dict) -> None:
    commit.next_node = Node.MODEL
    commit.advance_step = True
    commit.messages = [
        _tool_message(call["id"], done[key].result) for call, key in zip(calls, keys, strict=True)
    ]


def _tool_outcome(
    run: AgentRun,
    lease: Lease,
    tool: Tool | None,
    name: str,
    call: dict[str, Any],
    key: str,
    index: int,
    limit: int,
    *,
    alone: bool,
    followup_node: bool,
) -> Generator[SlowCall, Any, StepCommit | ToolOutcome]:
    """Either a StepCommit (the run pauses, fails or moves to the followup node) or what the
    call came to."""
    raw_arguments = call["function"].get("arguments") or "{}"
    try:
        arguments = json.loads(raw_arguments)
    except ValueError:
        return ToolOutcome(
            ToolStatus.FAILED, {"raw": raw_arguments}, {"error": "arguments are not JSON"}
        )
    if index >= limit:
        return ToolOutcome(
            ToolStatus.FAILED, arguments, {"error": f"at most {limit} tool calls per turn"}
        )
    if tool is None:
        return ToolOutcome(
            ToolStatus.FAILED, arguments, {"error": f"the tool {name} is not available"}
        )
    try:
        validated = tool.args_model.model_validate(arguments)
    except ValidationError as error:
        return ToolOutcome(
            ToolStatus.FAILED,
            arguments,
            {"error": "invalid arguments", "errors": pydantic_errors(error)},
        )
    if tool.policy == Policy.FOLLOWUP and not followup_node:
        if not alone:
            return ToolOutcome(
                ToolStatus.FAILED,
                arguments,
                {"error": f"{name} must be the only tool call in its turn"},
            )
        # The followup node executes it: commit the hand-over first.
        return StepCommit(next_node=Node.FOLLOWUP, advance_step=False)
    if tool.policy not in (Policy.AUTO, Policy.FOLLOWUP):
        interrupt = extensions.interrupt_for(tool.policy)
        if interrupt is None:
            return ToolOutcome(
                ToolStatus.FAILED, arguments, {"error": f"the tool {name} is not available"}
            )
        return interrupt.pause(run=run, lease=lease, tool=tool, args=validated, key=key)
    token = CancellationToken()
    context = ToolContext(
        run_id=run.pk,
        merchant_id=run.merchant_id,
        account_id=run.account_id,
        idempotency_key=key,
        cancel=token,
    )
    try:
        if tool.blocking:
            deadline = time.monotonic() + tool.timeout()
            result = yield SlowCall(lambda: tool.executor(validated, context), token, deadline)
        else:
            result = tool.executor(validated, context)
    except ToolError as error:
        return ToolOutcome(ToolStatus.FAILED, arguments, {"error": str(error)})
    except CallTimedOut:
        logger.warning(
            "tool %s of run %s timed out after %ss",
            name,
            run.pk,
            tool.timeout(),
            extra=about(run),
        )
        return ToolOutcome(
            ToolStatus.FAILED,
            arguments,
            {
                "error": f"{name} took longer than {tool.timeout():g} seconds and was stopped",
                "timed_out": True,
            },
        )
    except ToolCancelled as cancelled:
        raise RunAbandoned(str(cancelled)) from cancelled
    except RunAbandoned:
        raise
    except Exception as error:
        logger.exception("tool %s failed for run %s", name, run.pk, extra=about(run))
        return StepCommit(
            next_node=Node.TOOLS,
            advance_step=False,
            fail_with=(ErrorCode.TOOL_ERROR, f"{name} failed: {type(error).__name__}: {error}"),
        )
    return ToolOutcome(ToolStatus.SUCCEEDED, arguments, result)
