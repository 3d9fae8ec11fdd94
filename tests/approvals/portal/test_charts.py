"""The dashboard's charts: bars and lines in proportion to their figures, on a scale with a
round top, and their figures in a table."""

import pytest

from approvals.portal import charts


@pytest.mark.parametrize(
    ("value", "top"),
    [(0, 1), (0.4, 1), (1, 1), (7, 10), (12, 20), (21, 25), (37, 50), (600, 1000), (1200, 2000)],
)
def test_the_scale_tops_at_the_next_round_figure(value, top):
    assert charts.nice_ceiling(value) == top


@pytest.mark.parametrize(("value", "top"), [(0, 2), (1, 2), (3, 4), (7, 10), (37, 40), (101, 200)])
def test_a_scale_of_counts_halves_to_a_whole_number(value, top):
    assert charts.nice_ceiling(value, charts.COUNT_STEPS) == top


def test_stacked_bars_stand_on_each_other_in_proportion():
    # given two days, the second with 3 of one series and 2 of another (scale top 5)
    chart = charts.stacked_bars(
        slug="s",
        title="t",
        summary="",
        columns=["Mon", "Tue"],
        series=[("Approved", [0, 3]), ("Rejected", [1, 2])],
    )

    # then no bar for a zero, and the day's bars make up its whole height, 3 under 2
    first, second, third = chart.bars
    full = charts.HEIGHT - charts.BOTTOM - charts.TOP
    assert (first.label, first.height) == ("Mon: 1 rejected", pytest.approx(full / 5))
    assert (second.label, second.height) == ("Tue: 3 approved", pytest.approx(full * 3 / 5))
    assert third.y + third.height == pytest.approx(second.y)
    assert second.y + second.height == pytest.approx(charts.HEIGHT - charts.BOTTOM)
    assert [tick.text for tick in chart.y_ticks] == ["0", "2.5", "5"]
    assert chart.table_rows == [["Mon", "0", "1"], ["Tue", "3", "2"]]


def test_a_line_skips_the_columns_without_a_figure():
    chart = charts.lines(
        slug="l",
        title="t",
        summary="",
        columns=["w1", "w2", "w3"],
        series=[("Median", [30, None, 90])],
        unit=charts.duration_label,
    )

    [line] = chart.lines
    assert [label for _, _, label in line.dots] == ["w1: 30 s (median)", "w3: 1.5 min (median)"]
    assert len(line.points.split()) == 2
    assert chart.table_rows[1] == ["w2", ""]


@pytest.mark.parametrize(
    ("seconds", "text"), [(4, "4 s"), (59.4, "59 s"), (150, "2.5 min"), (7200, "2 h")]
)
def test_durations_read_in_the_unit_that_fits(seconds, text):
    assert charts.duration_label(seconds) == text


def test_a_month_of_days_labels_at_most_six_of_them():
    chart = charts.stacked_bars(
        slug="m", title="t", summary="", columns=[str(day) for day in range(30)], series=[]
    )

    assert [tick.text for tick in chart.x_ticks] == ["0", "5", "10", "15", "20", "25"]


@pytest.mark.parametrize(
    ("longest", "scale"),
    [(0, ("seconds", 1)), (119, ("seconds", 1)), (600, ("minutes", 60)), (9000, ("hours", 3600))],
)
def test_durations_are_drawn_in_the_unit_of_the_longest(longest, scale):
    assert charts.duration_scale(longest) == scale
