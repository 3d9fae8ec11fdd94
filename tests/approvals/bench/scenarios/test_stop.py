"""`bench --scenario stop`, small: each stop was answered and its worker let go."""

import pytest

from runs.models import AgentRun, RunStatus

pytestmark = [pytest.mark.bench, pytest.mark.django_db(transaction=True)]


def test_stop_stops_a_run_in_a_slow_call_each_time_with_one_worker(bench):
    result = bench("--scenario", "stop", "--runs", "5", "--calibration-runs", "3")

    assert result["scenario"] == "stop"
    # One worker whatever --workers says: the run queued behind must wait for the stopped one.
    assert (result["runs"], result["workers"]) == (5, 1)
    assert result["stops"]["count"] == 5
    assert 0 <= result["stops"]["request_ms"]["p50"] <= result["stops"]["request_ms"]["p95"]
    assert 0 <= result["stops"]["abandon_ms"]["p50"] <= result["stops"]["abandon_ms"]["p95"]
    runs = AgentRun.objects.filter(merchant__slug="bench-shop")
    assert runs.filter(status=RunStatus.CANCELLED).count() == 5
    assert runs.filter(status=RunStatus.COMPLETED).count() == 5
