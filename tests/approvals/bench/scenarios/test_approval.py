"""`bench --scenario approval`, small: every refund was approved over HTTP and completed."""

import pytest

from approvals.models import Approval
from runs.models import AgentRun, RunStatus

pytestmark = [pytest.mark.bench, pytest.mark.django_db(transaction=True)]


def test_approval_decides_each_refund_over_http_and_reports_the_decisions(bench):
    result = bench(
        "--scenario", "approval", "--runs", "5", "--workers", "1", "--calibration-runs", "3",
    )  # fmt: skip

    assert result["scenario"] == "approval"
    assert (result["runs"], result["workers"]) == (5, 1)
    assert result["runs_per_s"] > 0
    assert result["decisions"]["count"] == 5
    assert result["decisions"]["statuses"] == {"200": 5}
    assert result["decisions"]["p50_ms"] <= result["decisions"]["p95_ms"]
    assert result["queries_per_step"] > 0
    completed = AgentRun.objects.filter(merchant__slug="bench-shop", status=RunStatus.COMPLETED)
    assert completed.count() == 5
    approvals = Approval.objects.filter(merchant__slug="bench-shop")
    assert approvals.filter(decided_by_policy=False).count() == 5
