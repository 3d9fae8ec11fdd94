"""Graph versions the code can execute, and the release manifest a merchant publishes."""

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field

from django.conf import settings
from pydantic import BaseModel, ConfigDict, Field, field_validator

from runs import extensions
from runs.tools import TOOLS, Policy, Tool, policy_known


@dataclass(frozen=True)
class GraphRelease:
    """One graph version the code can execute, registered by the domain: its switches and the
    system prompt of a release that sets none. A run keeps the version it was queued under;
    the `default` one is what a merchant without a published release runs on."""

    version: str
    system_prompt: str = ""
    default: bool = False
    # Tool policies this version has no node or interrupt for: their tools are not offered.
    without_policies: frozenset[str] = frozenset()
    # The domain's own switches, read by its handlers; an unnamed switch is on.
    switches: Mapping[str, bool] = field(default_factory=dict)

    def switch(self, name: str) -> bool:
        return self.switches.get(name, True)


GRAPH_RELEASES: dict[str, GraphRelease] = {}


def graph_release_register(release: GraphRelease) -> None:
    if release.version in GRAPH_RELEASES:
        raise extensions.ExtensionError(f"graph version {release.version} is registered already")
    if release.default and any(other.default for other in GRAPH_RELEASES.values()):
        raise ValueError(f"{release.version}: a default graph version is registered already")
    GRAPH_RELEASES[release.version] = release


def graph_release_default() -> GraphRelease:
    for release in GRAPH_RELEASES.values():
        if release.default:
            return release
    raise LookupError("no default graph version is registered")


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
    policy: str | None = None

    @field_validator("policy")
    @classmethod
    def _registered(cls, policy: str | None) -> str | None:
        if policy is not None and not policy_known(policy):
            raise ValueError(f"{policy!r} is not a registered tool policy")
        return policy


class ReleaseManifest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    # "default" (settings), "openai", "scripted" (the default script) or "scripted:<name>".
    model: str = "default"
    # "": the system prompt its graph version registered.
    system_prompt: str = ""
    tools: list[ToolDeclaration] = Field(default_factory=list)
    limits: Limits = Field(default_factory=Limits)

    @field_validator("model")
    @classmethod
    def _known_model(cls, model: str) -> str:
        if model in ("default", "openai", "scripted"):
            return model
        kind, _, script_name = model.partition(":")
        if kind != "scripted" or script_name not in extensions.script_names():
            raise ValueError(f"{model!r} is neither a model client nor a registered script")
        return model


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
    return ReleaseManifest(
        tools=[ToolDeclaration(name=name) for name in TOOLS],
        limits=default_limits(),
    )


def tools_declared(release_snapshot: dict) -> dict[str, Tool]:
    """The tools a run may see and execute: those its release declares that the code has, and
    whose policy its graph version has a node or an interrupt for."""
    graph = GRAPH_RELEASES.get(release_snapshot.get("graph_version", ""))
    switched_off = graph.without_policies if graph is not None else frozenset()
    declared = {}
    for entry in release_snapshot.get("manifest", {}).get("tools", []):
        tool = TOOLS.get(entry["name"])
        if tool is not None and tool.policy not in switched_off:
            policy = entry.get("policy") or tool.policy
            if tool.policy != Policy.AUTO:
                policy = tool.policy  # a person's decision is never configured away
            # Asked at every step: the registered tool itself unless the release changes it.
            declared[tool.name] = (
                tool if policy == tool.policy else dataclasses.replace(tool, policy=policy)
            )
    return declared
