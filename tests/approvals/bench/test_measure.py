"""What the benchmark's scenarios share: a throughput run repeated reports its spread."""

from approvals.bench.measure import with_spread


def test_repeated_runs_report_the_median_runs_figures_and_the_spread_of_all():
    # given three runs of one benchmark, the second one stalled
    runs = [
        {"runs_per_s": 400.0, "queued_to_done_ms": {"p50": 900.0}},
        {"runs_per_s": 200.0, "queued_to_done_ms": {"p50": 2500.0}},
        {"runs_per_s": 380.0, "queued_to_done_ms": {"p50": 1000.0}},
    ]

    # when
    result = with_spread(runs, "runs_per_s")

    # then the figures are the median run's, and the stall shows in the spread
    assert result["runs_per_s"] == 380.0
    assert result["queued_to_done_ms"] == {"p50": 1000.0}
    assert result["runs_per_s_spread"] == {
        "each": [400.0, 200.0, 380.0],
        "min": 200.0,
        "median": 380.0,
        "max": 400.0,
        "spread_pct": 52.6,
    }


def test_a_single_run_has_no_spread():
    result = with_spread([{"runs_per_s": 250.0}], "runs_per_s")

    assert result["runs_per_s_spread"]["spread_pct"] == 0.0
    assert result["runs_per_s"] == 250.0
