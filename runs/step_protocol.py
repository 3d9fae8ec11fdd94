"""What a step and the worker say to each other (runs.worker executes steps; runs.nodes and the
domains' interrupts write them): the work a step waits on, what a tool call came to, and
how a wait ends early."""

from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any

from runs.models import AgentRun
from runs.services import StepCommit
from runs.tools import CancellationToken


@dataclass(frozen=True)
class ToolOutcome:
    """What a tool call came to. `recorded`: its ToolExecution row was already committed
    (by an executor that commits its side effect and the row together)."""

    status: str
    arguments: dict[str, Any]
    result: dict[str, Any]
    recorded: bool = False


class RunAbandoned(Exception):
    """The run was cancelled or lost while the worker waited on the model or a tool."""


@dataclass(frozen=True)
class SlowCall:
    """Work a step waits on (a model or a tool that blocks): the worker polls the run
    meanwhile, so that /stop is noticed within CANCEL_POLL_SECONDS, while the other runs it
    holds go on. A blocking function runs in one of the tool threads; with `awaited`, the
    function returns a coroutine, awaited on the process's event loop (runs.inflight) without
    a thread of its own."""

    function: Callable[[], Any]
    token: CancellationToken
    # time.monotonic() past which the call is abandoned (CallTimedOut), or None.
    deadline: float | None = None
    awaited: bool = False


class CallTimedOut(Exception):
    """A slow call ran past its deadline: its token was set and its thread is no longer
    awaited."""


# A step is a generator: it yields each StepCommit and gets back the committed run (or the
# exception that stopped the commit, thrown in), and yields each SlowCall and gets back its
# result (or its exception). It returns the run.
Step = Generator[StepCommit | SlowCall, Any, AgentRun]
