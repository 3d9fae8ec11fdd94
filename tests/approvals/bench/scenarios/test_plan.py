"""`bench --scenario plan`, small: every plan was confirmed and approved over HTTP, and the
reconcile sweep moved the hundred runs whose plans changed."""

import pytest

pytestmark = [pytest.mark.bench, pytest.mark.django_db(transaction=True)]


def test_plan_confirms_and_approves_each_plan_and_reports_the_reconcile_sweep(bench):
    # --waiting 100: the sweep changes a hundred plans
    result = bench(
        "--scenario", "plan", "--runs", "5", "--workers", "1", "--calibration-runs", "3",
        "--waiting", "100",
    )  # fmt: skip

    assert result["scenario"] == "plan"
    assert (result["runs"], result["workers"]) == (5, 1)
    assert result["runs_per_s"] > 0
    assert result["plans"]["approved"] == 5
    for phase in ("confirm", "decide"):
        assert result["plans"][phase]["count"] == 5
        assert result["plans"][phase]["statuses"] == {"200": 5}
    reconcile = result["reconcile"]
    assert (reconcile["waiting"], reconcile["changed"]) == (100, 100)
    assert reconcile["queries"] > reconcile["idle_pass_queries"] > 0
    assert result["queries_per_step"] > 0
