"""`bench --scenario streams`, small: pages held streams open while every decision was made
over HTTP."""

import pytest

from approvals.bench.scenarios import streams

pytestmark = [pytest.mark.bench, pytest.mark.django_db(transaction=True)]


def test_streams_are_held_while_the_decisions_are_made(bench, monkeypatch):
    monkeypatch.setattr(streams, "RAMP_SECONDS", 0.5)  # the pages open at once, not over 30 s

    result = bench(
        "--scenario", "streams", "--runs", "5", "--streams", "5", "--rate", "50",
        "--workers", "1", "--web-processes", "1", "--calibration-runs", "3",
    )  # fmt: skip

    assert result["scenario"] == "streams"
    assert (result["runs"], result["workers"]) == (5, 1)
    assert result["decisions"]["count"] == 5
    assert result["decisions"]["statuses"] == {"200": 5}
    held = result["streams"]
    assert (held["held"], held["web_processes"]) == (5, 1)
    assert 0 <= held["fewest_open"] <= 5
    assert held["web_cpu_percent"] >= 0
    assert result["queries_per_step"] > 0
