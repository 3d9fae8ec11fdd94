"""Charts drawn on the server as SVG: the geometry of stacked bars and of lines, which
templates/portal/_chart.html draws. No script runs in the page, so the content security policy
stays as strict as the other pages', and each chart is followed by its figures in a table."""

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import date
from decimal import Decimal

# The drawing's own units: the SVG scales to its box, so on a 390 px phone a unit is about
# 0.75 px and the labels stay at least 10 px tall.
WIDTH, HEIGHT = 480, 220
LEFT, RIGHT, TOP, BOTTOM = 44, 8, 12, 30
# The height the scale spans.
SPAN = HEIGHT - BOTTOM - TOP
MOST_X_LABELS = 6
# Colours told apart by people with the common colour blindness (Okabe and Ito's palette),
# each at least 3:1 against white.
PALETTE = ("#0072b2", "#009e73", "#d55e00", "#cc79a7", "#b8860b", "#56b4e9", "#6b7480")

Number = int | float | Decimal


@dataclass(frozen=True)
class Bar:
    x: float
    y: float
    width: float
    height: float
    fill: str
    label: str


@dataclass(frozen=True)
class Line:
    points: str
    stroke: str
    label: str
    dots: list[tuple[float, float, str]]


@dataclass(frozen=True)
class Tick:
    at: float
    text: str


@dataclass
class Chart:
    """A chart with a name the page's headings and the SVG's title use, what it says in one
    sentence (its description), and its series' names and colours for the legend."""

    slug: str
    title: str
    summary: str
    legend: list[tuple[str, str]]
    bars: list[Bar] = field(default_factory=list)
    lines: list[Line] = field(default_factory=list)
    x_ticks: list[Tick] = field(default_factory=list)
    # The figures drawn, as a table: a row a column of the chart, a cell a series.
    table_head: list[str] = field(default_factory=list)
    table_rows: list[list[str]] = field(default_factory=list)
    y_ticks: list[Tick] = field(default_factory=list)
    width: int = WIDTH
    height: int = HEIGHT
    left: int = LEFT
    bottom: float = HEIGHT - BOTTOM
    right: float = WIDTH - RIGHT


# The tops of a scale, times a power of ten; a scale of counts halves to a whole number.
STEPS = (1, 2, 2.5, 5, 10)
COUNT_STEPS = (2, 4, 10)


def nice_ceiling(value: float, steps: Sequence[float] = STEPS) -> float:
    """The smallest of `steps` times a power of ten at or above `value` (the first step for
    nothing)."""
    if value <= 0:
        return steps[0]
    power = 10 ** len(str(int(value))) / 10 if value >= 1 else 1
    for step in steps:
        if value <= step * power:
            return step * power
    return 10 * power


def _y_ticks(top: float) -> list[Tick]:
    """Plain figures: the chart's title says their unit, and a 390 px phone has no room for
    it on each tick."""
    return [
        Tick(at=HEIGHT - BOTTOM - SPAN * share, text=f"{top * share:g}") for share in (0, 0.5, 1)
    ]


def _x_ticks(labels: Sequence[str], slot: float) -> list[Tick]:
    every = max(1, -(-len(labels) // MOST_X_LABELS))
    return [
        Tick(at=LEFT + slot * (n + 0.5), text=text)
        for n, text in enumerate(labels)
        if n % every == 0
    ]


def day_label(day: date) -> str:
    return day.strftime("%b %-d")


def _frame(slug, title, summary, columns, series, unit, top) -> tuple[Chart, float]:
    """The chart without its marks: axes on a scale up to `top`, legend, and the figures as a
    table (a row a column, a cell a series); and the width of a column's slot."""
    slot = (WIDTH - LEFT - RIGHT) / max(len(columns), 1)
    chart = Chart(
        slug=slug,
        title=title,
        summary=summary,
        legend=[(name, PALETTE[n % len(PALETTE)]) for n, (name, _) in enumerate(series)],
        x_ticks=_x_ticks(columns, slot),
        y_ticks=_y_ticks(top),
        table_head=["", *(name for name, _ in series)],
        table_rows=[
            [text, *("" if values[n] is None else unit(float(values[n])) for _, values in series)]
            for n, text in enumerate(columns)
        ],
    )
    return chart, slot


def stacked_bars(
    *,
    slug: str,
    title: str,
    summary: str,
    columns: Sequence[str],
    series: Sequence[tuple[str, Sequence[Number]]],
    unit: Callable[[float], str] = lambda value: f"{value:g}",
    counts: bool = False,
) -> Chart:
    """One bar a column, each series stacked on the ones before it, in `series`' order; the
    scale of `counts` has whole figures only."""
    totals = [sum(float(values[n]) for _, values in series) for n in range(len(columns))]
    top = nice_ceiling(max(totals, default=0), COUNT_STEPS if counts else STEPS)
    chart, slot = _frame(slug, title, summary, columns, series, unit, top)
    for column, text in enumerate(columns):
        base = HEIGHT - BOTTOM
        for n, (name, values) in enumerate(series):
            value = float(values[column])
            if value <= 0:
                continue
            height = SPAN * value / top
            base -= height
            chart.bars.append(
                Bar(
                    x=round(LEFT + slot * column + slot * 0.15, 2),
                    y=round(base, 2),
                    width=round(slot * 0.7, 2),
                    height=round(height, 2),
                    fill=PALETTE[n % len(PALETTE)],
                    label=f"{text}: {unit(value)} {name.lower()}",
                )
            )
    return chart


def lines(
    *,
    slug: str,
    title: str,
    summary: str,
    columns: Sequence[str],
    series: Sequence[tuple[str, Sequence[Number | None]]],
    unit: Callable[[float], str] = lambda value: f"{value:g}",
) -> Chart:
    """One line a series over the columns; a column with no value breaks no line, it is
    skipped."""
    found = [float(value) for _, values in series for value in values if value is not None]
    top = nice_ceiling(max(found, default=0))
    chart, slot = _frame(slug, title, summary, columns, series, unit, top)
    for n, (name, values) in enumerate(series):
        dots = [
            (
                round(LEFT + slot * (column + 0.5), 2),
                round(HEIGHT - BOTTOM - SPAN * float(value) / top, 2),
                f"{columns[column]}: {unit(float(value))} ({name.lower()})",
            )
            for column, value in enumerate(values)
            if value is not None
        ]
        chart.lines.append(
            Line(
                points=" ".join(f"{x},{y}" for x, y, _ in dots),
                stroke=PALETTE[n % len(PALETTE)],
                label=name,
                dots=dots,
            )
        )
    return chart


def duration_scale(longest: float) -> tuple[str, int]:
    """The unit to draw durations up to `longest` seconds in, and its length in seconds."""
    if longest >= 2 * 3600:
        return "hours", 3600
    if longest >= 120:
        return "minutes", 60
    return "seconds", 1


def duration_label(seconds: float) -> str:
    """12 -> "12 s", 150 -> "2.5 min", 7200 -> "2 h"."""
    if seconds < 60:
        return f"{seconds:.0f} s"
    if seconds < 3600:
        return f"{seconds / 60:.3g} min"
    return f"{seconds / 3600:.3g} h"
