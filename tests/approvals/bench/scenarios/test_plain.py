"""`bench --scenario plain`, small: its figures are there and the runs completed."""

import pytest
from django.db import connection

from runs.models import AgentRun, RunStatus

pytestmark = [pytest.mark.bench, pytest.mark.django_db(transaction=True)]


def test_plain_runs_through_the_cluster_and_reports_its_figures(bench):
    result = bench(
        "--scenario", "plain", "--runs", "5", "--workers", "1", "--calibration-runs", "3",
        "--repeat", "1",
    )  # fmt: skip

    assert result["scenario"] == "plain"
    assert result["database"] == connection.vendor
    assert (result["runs"], result["workers"]) == (5, 1)
    assert result["runs_per_s"] > 0
    assert result["runs_per_s_spread"]["each"] == [result["runs_per_s"]]
    assert result["steps_per_s"] >= result["runs_per_s"]
    assert 0 <= result["queued_to_done_ms"]["p50"] <= result["queued_to_done_ms"]["p95"]
    assert result["queries_per_step"] > 0
    assert result["commits_per_run"] > 0
    completed = AgentRun.objects.filter(merchant__slug="bench-shop", status=RunStatus.COMPLETED)
    assert completed.count() == 5
