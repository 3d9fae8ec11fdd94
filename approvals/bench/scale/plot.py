"""The scale scenario's curves as a Markdown table and as an SVG of small plots, one per hot
path, each on its own scale from zero (written by hand: no plotting library needed)."""

import math
from html import escape

PANEL_W, PANEL_H, COLUMNS = 260, 170, 3
MARGIN = {"left": 48, "right": 14, "top": 30, "bottom": 34}


def _size(point: dict) -> str:
    return f"{_short(point['shops'])} shops / {_short(point['runs'])} runs"


def _short(number: int) -> str:
    for unit, name in ((1_000_000, "M"), (1_000, "k")):
        if number >= unit and number % (unit // 10) == 0:
            return f"{number / unit:g}{name}"
    return str(number)


def curves_table(result: dict) -> str:
    points = result["sizes"]
    paths = list(points[0]["ms"])
    lines = [
        "| hot path (median ms) | " + " | ".join(_size(point) for point in points) + " | growth |",
        "|---" * (len(points) + 2) + "|",
    ]
    for path in paths:
        cells = " | ".join(f"{point['ms'][path]:.1f}" for point in points)
        lines.append(f"| {path} | {cells} | {result['growth'][path]:.2f}x |")
    lines.append("")
    lines.append(
        "Seeding: "
        + ", ".join(f"{_size(point)} in {point['seed_s']:.0f} s" for point in points)
        + "."
    )
    if result.get("rss_mb"):
        memory = ", ".join(f"{role} {mb:.1f} MB" for role, mb in sorted(result["rss_mb"].items()))
        lines.append(f"Resident memory at the largest size: {memory}.")
    over = result["over"]
    lines.append(
        f"Over {result['within']:g}x: {', '.join(over)}."
        if over
        else f"Every hot path within {result['within']:g}x."
    )
    return "\n".join(lines) + "\n"


def curves_svg(result: dict) -> str:
    points = result["sizes"]
    paths = list(points[0]["ms"])
    rows = -(-len(paths) // COLUMNS)
    width, height = PANEL_W * COLUMNS, PANEL_H * rows + 24
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="10">',
        f'<rect width="{width}" height="{height}" fill="white"/>',
        f'<text x="8" y="{height - 8}" fill="#555">x: finished runs (log scale); '
        "y: median ms. Red: grew more than "
        f"{result['within']:g}x.</text>",
    ]
    for index, path in enumerate(paths):
        x0, y0 = PANEL_W * (index % COLUMNS), PANEL_H * (index // COLUMNS)
        parts += _panel(path, points, result["growth"][path] > result["within"], x0, y0)
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def _panel(path: str, points: list[dict], over: bool, x0: int, y0: int) -> list[str]:
    left, top = x0 + MARGIN["left"], y0 + MARGIN["top"]
    inner_w = PANEL_W - MARGIN["left"] - MARGIN["right"]
    inner_h = PANEL_H - MARGIN["top"] - MARGIN["bottom"]
    values = [point["ms"][path] for point in points]
    top_value = max(values) * 1.15 or 1.0
    logs = [math.log10(point["runs"]) for point in points]
    span = (logs[-1] - logs[0]) or 1.0

    def at(index: int) -> tuple[float, float]:
        x = left + (inner_w * (logs[index] - logs[0]) / span if len(points) > 1 else inner_w / 2)
        return round(x, 1), round(top + inner_h * (1 - values[index] / top_value), 1)

    colour = "#c0392b" if over else "#2a6fb0"
    growth = values[-1] / max(values[0], 0.001)
    line = " ".join(f"{x},{y}" for x, y in map(at, range(len(points))))
    parts = [
        f'<text x="{x0 + 8}" y="{y0 + 16}" font-size="12" font-weight="bold">'
        f"{escape(path)} ({growth:.2f}x)</text>",
        f'<line x1="{left}" y1="{top + inner_h}" x2="{left + inner_w}" y2="{top + inner_h}" '
        'stroke="#999"/>',
        f'<line x1="{left}" y1="{top}" x2="{left}" y2="{top + inner_h}" stroke="#999"/>',
        f'<text x="{left - 4}" y="{top + 4}" text-anchor="end">{top_value:.0f}</text>',
        f'<text x="{left - 4}" y="{top + inner_h}" text-anchor="end">0</text>',
        f'<polyline points="{line}" fill="none" stroke="{colour}" stroke-width="2"/>',
    ]
    for index, point in enumerate(points):
        x, y = at(index)
        # The first point's figure goes right of it, clear of the axis's top figure.
        figure_x, anchor = (x + 6, "start") if index == 0 else (x, "middle")
        parts += [
            f'<circle cx="{x}" cy="{y}" r="3" fill="{colour}"/>',
            f'<text x="{figure_x}" y="{y - 6}" text-anchor="{anchor}">{values[index]:.1f}</text>',
            f'<text x="{x}" y="{top + inner_h + 14}" text-anchor="middle">'
            f"{_short(point['runs'])}</text>",
        ]
    return parts
