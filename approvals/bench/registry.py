"""The bench's scenarios by name: each scenario module registers itself here with the options
it adds to `manage.py bench` and the function that runs it."""

from argparse import ArgumentParser
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from approvals.bench.context import Bench


@dataclass(frozen=True)
class Option:
    """A command-line option of a scenario. Scenarios may share one (the same flag, type,
    default and action); its help then says what it means to each."""

    flag: str
    help: str
    type: Callable[[str], Any] | None = None
    default: Any = None
    action: str | None = None

    @property
    def spec(self) -> dict[str, Any]:
        if self.action:
            return {"action": self.action}
        return {"type": self.type, "default": self.default}


@dataclass(frozen=True)
class Scenario:
    name: str
    # Measures, and returns the JSON line's object.
    run: Callable[[Bench], dict]
    options: tuple[Option, ...] = ()
    # --repeat's default: the throughput runs, or the timings of a path (scale).
    repeat: int = 3
    # The workers it runs with whatever --workers says (stop: the one that is stopped).
    workers: int | None = None
    # The scripted model's pause between words (ms) unless --stream-ms gives one; None: as
    # AGENTPORTAL_SCRIPTED_STREAM_MS configures it.
    stream_ms: int | None = 0


_scenarios: dict[str, Scenario] = {}


def register(scenario: Scenario) -> Scenario:
    if scenario.name in _scenarios:
        raise ValueError(f"a bench scenario named {scenario.name} is registered already")
    _scenarios[scenario.name] = scenario
    return scenario


def scenarios() -> list[Scenario]:
    """Every scenario registered, by name."""
    return [_scenarios[name] for name in sorted(_scenarios)]


def scenario_get(name: str) -> Scenario:
    return _scenarios[name]


def options_add(parser: ArgumentParser) -> None:
    """Each option of the scenarios once, its help naming the scenarios that take it."""
    users: dict[str, list[tuple[Scenario, Option]]] = {}
    for scenario in _scenarios.values():
        for option in scenario.options:
            users.setdefault(option.flag, []).append((scenario, option))
    for flag, declared in users.items():
        specs = {repr(option.spec) for _, option in declared}
        if len(specs) > 1:
            names = ", ".join(scenario.name for scenario, _ in declared)
            raise ValueError(f"the scenarios {names} declare {flag} differently")
        parser.add_argument(
            flag,
            help="; ".join(f"{scenario.name}: {option.help}" for scenario, option in declared),
            **declared[0][1].spec,
        )
