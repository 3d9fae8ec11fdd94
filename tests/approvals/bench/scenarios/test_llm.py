"""`bench --scenario llm`, small: the runs called the stub through the real openai client,
and the answers' deltas were listened to."""

import pytest
from django.db import connection

pytestmark = [pytest.mark.bench, pytest.mark.django_db(transaction=True)]


@pytest.fixture(autouse=True)
def _not_on_sqlite(db):
    if connection.vendor == "sqlite":
        pytest.skip(
            "the scenario waits to hear a probe on the delta channel, and SQLite's file channel "
            "writes only to runs that have a file (runs.delta_channels.FileChannel), never the "
            "probe"
        )


def test_llm_runs_call_the_stub_and_report_the_slots_and_deltas(bench):
    result = bench(
        "--scenario", "llm", "--runs", "5", "--workers", "1", "--calibration-runs", "3",
        "--repeat", "1", "--shops", "1", "--capacity", "5", "--model-latency", "0.05",
    )  # fmt: skip

    assert result["scenario"] == "llm"
    assert (result["runs"], result["workers"]) == (5, 1)
    assert result["runs_per_s"] > 0
    assert result["runs_per_s_spread"]["each"] == [result["runs_per_s"]]
    assert (result["shops"], result["capacity"], result["model_latency_s"]) == (1, 5, 0.05)
    assert result["model_calls"] == 10  # a tool call, then the answer
    assert 1 <= result["max_in_flight"] <= 5
    assert result["ideal_runs_per_s"] == 50.0  # 5 slots, two calls of 0.05 s a run
    assert result["stream_deltas"] is True
    assert 0 <= result["first_delta_runs"] <= 5
    assert result["rss_mb"] and all(mb > 0 for mb in result["rss_mb"])
