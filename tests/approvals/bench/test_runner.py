"""A scenario as the command runs it: the scripted model's word streaming is pinned, in this
process and for the processes the bench starts, and the common options are checked."""

import os

import pytest
from django.conf import settings
from django.core.management import CommandError

from approvals.bench.registry import Scenario
from approvals.bench.runner import bench_run


def _run(scenario: Scenario, **given) -> dict:
    options = {
        "runs": 5,
        "workers": 2,
        "calibration_runs": 3,
        "timeout": 60.0,
        "log": os.devnull,
        "repeat": None,
        "stream_ms": None,
        "options": {"waiting": 7},
        "say": lambda line: None,
    }
    return bench_run(scenario, **{**options, **given})


def _seen(bench) -> dict:
    """What a scenario finds while it runs."""
    return {
        "scripted_stream_ms": settings.AGENTPORTAL["SCRIPTED_STREAM_MS"],
        "processes_env": bench.processes.env,
        "workers": bench.workers,
        "repeat": bench.repeat,
        "options": bench.options,
    }


@pytest.fixture
def streaming(settings):
    """The scripted model configured to write a word every 20 ms, as it is by default."""
    settings.AGENTPORTAL = {**settings.AGENTPORTAL, "SCRIPTED_STREAM_MS": 20}


def test_the_scripted_model_answers_at_once_in_the_bench_and_its_processes(streaming):
    seen = _run(Scenario(name="probe", run=_seen))

    assert seen["scripted_stream_ms"] == 0
    assert seen["processes_env"] == {"AGENTPORTAL_SCRIPTED_STREAM_MS": "0"}
    # and once the bench is done, the setting is the configured one again
    assert settings.AGENTPORTAL["SCRIPTED_STREAM_MS"] == 20


def test_stream_ms_asks_for_another_pause(streaming):
    seen = _run(Scenario(name="probe", run=_seen), stream_ms=5)

    assert seen["scripted_stream_ms"] == 5
    assert seen["processes_env"] == {"AGENTPORTAL_SCRIPTED_STREAM_MS": "5"}


def test_a_scenario_may_keep_the_configured_streaming(streaming):
    keeps = Scenario(name="probe", run=_seen, stream_ms=None)

    assert _run(keeps)["processes_env"] == {"AGENTPORTAL_SCRIPTED_STREAM_MS": "20"}
    assert _run(keeps, stream_ms=0)["processes_env"] == {"AGENTPORTAL_SCRIPTED_STREAM_MS": "0"}


def test_a_scenario_gets_its_own_options_its_repeat_and_its_fixed_workers():
    seen = _run(Scenario(name="probe", run=_seen, repeat=15, workers=1))

    assert seen["options"] == {"waiting": 7}
    assert seen["repeat"] == 15
    assert seen["workers"] == 1
    assert _run(Scenario(name="probe", run=_seen), repeat=2)["repeat"] == 2


@pytest.mark.parametrize(
    ("given", "refusal"),
    [
        ({"runs": 0}, "--runs, --workers and --calibration-runs must be at least 1"),
        ({"workers": 0}, "--runs, --workers and --calibration-runs must be at least 1"),
        ({"calibration_runs": 0}, "--runs, --workers and --calibration-runs must be at least 1"),
        ({"repeat": -1}, "--repeat must be at least 1"),
        ({"stream_ms": -1}, "--stream-ms must be 0 or more"),
    ],
)
def test_common_options_out_of_range_are_refused_before_anything_runs(given, refusal):
    ran = []

    with pytest.raises(CommandError, match=refusal):
        _run(Scenario(name="probe", run=ran.append), **given)
    assert ran == []
