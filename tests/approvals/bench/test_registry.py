"""The bench's scenarios by name: the command offers what is registered, and an option two
scenarios share is offered once."""

from argparse import ArgumentParser

import pytest

from approvals.bench import registry
from approvals.bench.registry import Option, Scenario
from approvals.management.commands.bench import Command


def _measured(bench) -> dict:
    return {}


@pytest.fixture
def empty_registry(monkeypatch):
    monkeypatch.setattr(registry, "_scenarios", {})


def test_the_command_offers_every_registered_scenario():
    parser = Command().create_parser("manage.py", "bench")
    scenario = next(action for action in parser._actions if action.dest == "scenario")

    assert scenario.choices == [
        "approval",
        "auto_approval",
        "llm",
        "plain",
        "plan",
        "scale",
        "stop",
        "streams",
    ]
    assert scenario.choices == [s.name for s in registry.scenarios()]


def test_an_option_shared_by_scenarios_is_added_once_and_says_what_it_means_to_each(
    empty_registry,
):
    registry.register(
        Scenario(name="one", run=_measured, options=(Option("--rate", "runs a second", float),))
    )
    registry.register(
        Scenario(
            name="two",
            run=_measured,
            options=(
                Option("--rate", "decisions a second", float),
                Option("--quick", "skip the slow part", action="store_true"),
            ),
        )
    )
    parser = ArgumentParser()

    registry.options_add(parser)

    assert vars(parser.parse_args([])) == {"rate": None, "quick": False}
    assert vars(parser.parse_args(["--rate", "2.5", "--quick"])) == {"rate": 2.5, "quick": True}
    rate = next(action for action in parser._actions if action.dest == "rate")
    assert rate.help == "one: runs a second; two: decisions a second"


def test_scenarios_declaring_one_option_differently_are_refused(empty_registry):
    registry.register(
        Scenario(name="one", run=_measured, options=(Option("--rate", "a", float, 0.0),))
    )
    registry.register(
        Scenario(name="two", run=_measured, options=(Option("--rate", "b", float, 20.0),))
    )

    with pytest.raises(ValueError, match="one, two declare --rate differently"):
        registry.options_add(ArgumentParser())


def test_a_name_is_registered_once(empty_registry):
    registry.register(Scenario(name="one", run=_measured))

    with pytest.raises(ValueError, match="named one is registered already"):
        registry.register(Scenario(name="one", run=_measured))
    assert [s.name for s in registry.scenarios()] == ["one"]
