"""Graph versions the code can execute, and the release manifest a merchant publishes."""

from dataclasses import dataclass
from typing import Literal

from django.conf import settings
from pydantic import BaseModel, ConfigDict, Field

DEFAULT_GRAPH_VERSION = "after-sales-v10"


@dataclass(frozen=True)
class GraphRelease:
    """Switches of one registered graph version. A run keeps the version it was queued under."""

    version: str
    clarification: bool = True
    business_wait: bool = True
    followup: bool = True


GRAPH_RELEASES: dict[str, GraphRelease] = {}


def graph_release_register(release: GraphRelease) -> None:
    GRAPH_RELEASES[release.version] = release


class Limits(BaseModel):
    model_config = ConfigDict(extra="forbid")

    max_model_calls: int = Field(default=6, ge=1, le=100)
    max_steps: int = Field(default=20, ge=1, le=200)
    max_tool_calls_per_turn: int = Field(default=4, ge=1, le=32)
    run_deadline_seconds: int = Field(default=600, ge=1)
    wait_seconds: int = Field(default=24 * 3600, ge=1)
    approval_ttl_seconds: int = Field(default=1800, ge=1)


class ToolDeclaration(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    # None: the tool's registered policy. A release may make a tool stricter, never looser.
    policy: Literal["auto", "approval", "clarification", "business_wait", "followup"] | None = None


class ReleaseManifest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    model: str = "default"  # "default" (settings), "scripted" or "openai"
    system_prompt: str = (
        "You are the after-sales assistant of an online shop. Help the customer with orders, "
        "refunds and exchanges. Use the tools; never promise what a tool did not confirm."
    )
    tools: list[ToolDeclaration] = Field(default_factory=list)
    limits: Limits = Field(default_factory=Limits)


def default_limits() -> Limits:
    config = settings.AGENTPORTAL
    return Limits(
        max_model_calls=config["MAX_MODEL_CALLS"],
        max_steps=config["MAX_STEPS"],
        max_tool_calls_per_turn=config["MAX_TOOL_CALLS_PER_TURN"],
        run_deadline_seconds=config["RUN_DEADLINE_SECONDS"],
        wait_seconds=config["WAIT_SECONDS"],
        approval_ttl_seconds=config["APPROVAL_TTL_SECONDS"],
    )


def default_manifest() -> ReleaseManifest:
    """What a merchant without a published release runs on: every registered tool."""
    from runs.tools import TOOLS

    return ReleaseManifest(
        tools=[ToolDeclaration(name=name) for name in TOOLS],
        limits=default_limits(),
    )
