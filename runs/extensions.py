"""The runtime's extension points, filled by the apps in their AppConfig.ready().

The runtime knows runs, steps, interrupts, tools and models; a domain app teaches it the rest
here, and `runs` never imports the domain:

- an **interrupt**: a tool policy that pauses the run until people answer. It says what
  pausing does, which **wait kinds** it can leave the run in, how its pending items are
  listed, and what a wait's expiry and the run's end do to what it owns;
- a **node** of the graph: a name and the step function the worker runs for it;
- the **scripts** the offline scripted model plays (a release picks one by name with
  `"model": "scripted:<name>"`; plain `"scripted"` plays the default one);
- a **maintenance sweep** for the once-a-minute backstop, and a hook for every run's end;
- tools (`runs.tools.tool_register`) and graph releases (`runs.releases.graph_release_register`).

Registering the same name twice is a mistake and raises, so that two apps cannot silently
replace each other's extensions.
"""

from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any
from uuid import UUID

from pydantic import BaseModel

if TYPE_CHECKING:
    from runs.models import AgentRun
    from runs.scripted import Transcript

# A pause handler gets the run, the lease, the tool, its validated arguments and the call's key
# (keyword arguments `run`, `lease`, `tool`, `args`, `key`); it returns the StepCommit that
# pauses (or fails) the run, or the call's ToolOutcome when the wait was already answered.
PauseHandler = Callable[..., Any]
# A step function gets the run and its lease and is a generator of StepCommits and SlowCalls
# that returns the run (see runs.worker).
StepFunction = Callable[..., Generator[Any, Any, Any]]
# What a run-end hook reports: run events, as (type, data).
RunEvents = list[tuple[str, dict[str, Any]]]
# A script gets what the conversation says so far and the names of the tools declared to the
# model; it returns the answer's text, or the (tool name, arguments) of the next call.
Script = Callable[["Transcript", set[str]], "str | tuple[str, dict[str, Any]]"]


# The types a pending item's field may have: what every client can read from JSON.
PENDING_FIELD_TYPES = (str, int, bool, UUID, datetime)


@dataclass(frozen=True)
class WaitKind:
    """Something a paused run can wait for, kept in its wait state.

    `payload`: a pydantic model of what the wait state carries for this kind (validated
    strictly whenever the state is read); None for a kind whose interrupt keeps its waits
    elsewhere and lists them with its own `pending`. `status`: the run's status while it waits.
    `pending_fields`: the fields this kind adds to a `pending` item, by name and type (one of
    PENDING_FIELD_TYPES; runs.serializers renders them), their values read from the payload;
    every pending item has every kind's fields (null when not its own), so that the
    representation is the same whatever a run waits for. `answers_inputs`:
    whether `POST /runs/{id}/inputs` answers it; `input_refusal`: what an input sent to such a
    wait is told instead.
    """

    name: str
    payload: type[BaseModel] | None
    status: str
    pending_fields: Mapping[str, type] = field(default_factory=dict)
    answers_inputs: bool = False
    input_refusal: str = "The run is not waiting for an input."


@dataclass(frozen=True)
class Interrupt:
    """A tool policy that pauses the run until people answer.

    `pause`: what pausing does (a PauseHandler). `kinds`: the wait kinds it can leave the run
    in. `pending`: lists the run's pending items that are not kept in its wait state (an
    approval keeps its call in the state snapshot); waits kept in the wait state are listed by
    the runtime. `before_wait_expiry`: called, holding the run's lock, before a wait past its
    deadline fails the run, to apply what was decided in time. `on_run_end`: called with the
    run and its status before, holding the run's lock inside the transaction that ends it
    (every end, completion included), to close what the interrupt owns; it returns the
    run events that say what became of those items (they go before the run's final event).
    """

    policy: str
    pause: PauseHandler
    kinds: tuple[WaitKind, ...] = ()
    pending: Callable[["AgentRun"], list[dict[str, Any]]] | None = None
    before_wait_expiry: Callable[["AgentRun"], object] | None = None
    on_run_end: Callable[["AgentRun", str], "RunEvents | None"] | None = None


@dataclass(frozen=True)
class NodeKind:
    """A node of the graph. `calls_model`: claiming a run at this node records its model
    attempt in the claim's commit (and checks the model budget there)."""

    name: str
    step: StepFunction
    calls_model: bool = False


class ExtensionError(Exception):
    pass


class _Registry:
    def __init__(self) -> None:
        self.interrupts: dict[str, Interrupt] = {}
        self.wait_kinds: dict[str, WaitKind] = {}
        self.nodes: dict[str, NodeKind] = {}
        self.scripts: dict[str, Script] = {}
        self.sweeps: dict[str, Callable[[], int]] = {}
        self.run_end_hooks: list[Callable[[AgentRun, str], RunEvents | None]] = []


_registry = _Registry()


def interrupt_register(interrupt: Interrupt) -> None:
    if interrupt.policy in _registry.interrupts:
        raise ExtensionError(f"the interrupt {interrupt.policy!r} is registered already")
    for kind in interrupt.kinds:
        if kind.name in _registry.wait_kinds:
            raise ExtensionError(f"the wait kind {kind.name!r} is registered already")
        for name, kind_type in kind.pending_fields.items():
            if kind_type not in PENDING_FIELD_TYPES:
                raise ExtensionError(
                    f"the pending field {name!r} of {kind.name!r} is a {kind_type!r}, not one of"
                    f" {', '.join(sorted(t.__name__ for t in PENDING_FIELD_TYPES))}"
                )
    _registry.interrupts[interrupt.policy] = interrupt
    for kind in interrupt.kinds:
        _registry.wait_kinds[kind.name] = kind


def node_register(node: NodeKind) -> None:
    if node.name in _registry.nodes:
        raise ExtensionError(f"the node {node.name!r} is registered already")
    _registry.nodes[node.name] = node


DEFAULT_SCRIPT = "default"


def script_register(script: Script, *, name: str = DEFAULT_SCRIPT) -> None:
    if name in _registry.scripts:
        raise ExtensionError(f"a script named {name!r} is registered already")
    _registry.scripts[name] = script


def sweep_register(name: str, sweep: Callable[[], int]) -> None:
    """A maintenance sweep: called once a minute on its own, it returns how much it did."""
    if name in _registry.sweeps:
        raise ExtensionError(f"the maintenance sweep {name!r} is registered already")
    _registry.sweeps[name] = sweep


def run_end_register(hook: Callable[["AgentRun", str], RunEvents | None]) -> None:
    """Called with every run that ends and its status before, holding its lock; it may return
    run events that say what the run's end did."""
    if hook in _registry.run_end_hooks:
        raise ExtensionError(f"the run-end hook {hook!r} is registered already")
    _registry.run_end_hooks.append(hook)


def interrupt_for(policy: str) -> Interrupt | None:
    return _registry.interrupts.get(policy)


def interrupts() -> list[Interrupt]:
    return list(_registry.interrupts.values())


def wait_kind(name: str) -> WaitKind | None:
    return _registry.wait_kinds.get(name)


def wait_kinds() -> list[WaitKind]:
    return list(_registry.wait_kinds.values())


def pending_kind_names() -> list[str]:
    """Every `kind` a pending item can have."""
    return sorted(_registry.wait_kinds)


def node(name: str) -> NodeKind | None:
    return _registry.nodes.get(name)


def script(name: str = DEFAULT_SCRIPT) -> Script:
    if name not in _registry.scripts:
        raise ExtensionError(f"no script named {name!r} is registered for the scripted model")
    return _registry.scripts[name]


def script_names() -> list[str]:
    return list(_registry.scripts)


def sweeps() -> dict[str, Callable[[], int]]:
    return dict(_registry.sweeps)


def run_end_hooks() -> list[Callable[["AgentRun", str], RunEvents | None]]:
    """What a run's end calls: the interrupts' `on_run_end`, then the other hooks."""
    hooks = [i.on_run_end for i in _registry.interrupts.values() if i.on_run_end is not None]
    return [*hooks, *_registry.run_end_hooks]


def wait_expiry_hooks() -> list[Callable[["AgentRun"], object]]:
    return [
        i.before_wait_expiry
        for i in _registry.interrupts.values()
        if i.before_wait_expiry is not None
    ]
