"""`bench --scenario auto_approval`, small: the refunds were approved by the policy alone."""

import pytest

from approvals.models import Approval, Refund
from runs.models import AgentRun, RunStatus

pytestmark = [pytest.mark.bench, pytest.mark.django_db(transaction=True)]


def test_auto_approval_refunds_need_nobody_and_report_the_throughput(bench):
    result = bench(
        "--scenario", "auto_approval", "--runs", "5", "--workers", "1",
        "--calibration-runs", "3", "--repeat", "1",
    )  # fmt: skip

    assert result["scenario"] == "auto_approval"
    assert (result["runs"], result["workers"]) == (5, 1)
    assert result["runs_per_s"] > 0
    assert result["runs_per_s_spread"]["each"] == [result["runs_per_s"]]
    assert result["queries_per_step"] > 0
    completed = AgentRun.objects.filter(merchant__slug="bench-shop", status=RunStatus.COMPLETED)
    assert completed.count() == 5
    approvals = Approval.objects.filter(merchant__slug="bench-shop")
    assert approvals.count() == approvals.filter(decided_by_policy=True).count() == 5
    assert Refund.objects.filter(merchant__slug="bench-shop").count() == 5
