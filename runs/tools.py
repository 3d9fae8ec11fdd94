"""The tool registry: what a tool takes, how it is allowed to run, and what runs it."""

import functools
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from django.conf import settings
from pydantic import BaseModel

from runs.extensions import ExtensionError, interrupt_for


class Policy:
    """How a tool call is allowed to run: on its own (`auto`), alone in the followup node, or
    paused by the interrupt registered under the policy's name (runs.extensions)."""

    AUTO = "auto"
    FOLLOWUP = "followup"
    CLARIFICATION = "clarification"


def policy_known(policy: str) -> bool:
    return policy in (Policy.AUTO, Policy.FOLLOWUP) or interrupt_for(policy) is not None


class CancellationToken:
    """Set by the worker when the run is cancelled or lost; slow tools check it."""

    def __init__(self) -> None:
        self._event = threading.Event()

    def cancel(self) -> None:
        self._event.set()

    @property
    def cancelled(self) -> bool:
        return self._event.is_set()

    def sleep(self, seconds: float) -> bool:
        """Sleep up to `seconds`; False if cancelled meanwhile."""
        return not self._event.wait(seconds)


class ToolError(Exception):
    """An expected failure the model is told about (unknown order, not eligible, ...)."""


class ToolCancelled(Exception):
    pass


@dataclass(frozen=True)
class ToolContext:
    run_id: UUID
    merchant_id: int
    account_id: int
    idempotency_key: str
    cancel: CancellationToken


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    args_model: type[BaseModel]
    policy: str
    # None for tools whose interrupt does the work (a clarification).
    executor: Callable[[BaseModel, ToolContext], dict[str, Any]] | None = None
    # Blocking tools run in a thread while the worker polls for cancellation.
    blocking: bool = False
    # A blocking call's time limit, at most AGENTPORTAL_TOOL_TIMEOUT_SECONDS (None: that).
    timeout_seconds: float | None = None
    # A few words for the person waiting while it runs ("Checking warehouse stock…").
    progress: str = ""

    def timeout(self) -> float:
        limit = settings.AGENTPORTAL["TOOL_TIMEOUT_SECONDS"]
        return min(limit, self.timeout_seconds) if self.timeout_seconds else limit

    def schema(self) -> dict[str, Any]:
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": _json_schema(self.args_model),
            },
        }


@functools.cache
def _json_schema(args_model: type[BaseModel]) -> dict[str, Any]:
    return args_model.model_json_schema()


TOOLS: dict[str, Tool] = {}


def tool_register(tool: Tool) -> None:
    if tool.name in TOOLS:
        raise ExtensionError(f"the tool {tool.name!r} is registered already")
    if not policy_known(tool.policy):
        raise ValueError(f"unknown policy {tool.policy!r} for {tool.name}")
    TOOLS[tool.name] = tool
