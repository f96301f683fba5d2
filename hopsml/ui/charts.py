"""Charts as server-rendered SVG: metric-vs-step lines, parallel coordinates, overlaid histograms
and bars. Every text that reaches the markup is escaped; colours are presentation attributes, so a
strict Content-Security-Policy (no inline styles, no inline scripts) still draws them.

>>> svg = line_chart({"loss": [(0, 1.0), (1, 0.5)]}, title="loss")
>>> svg.count("<polyline"), 'data-points="2"' in svg
(1, True)
>>> "&lt;b&gt;" in line_chart({"<b>": [(0, 1.0)]})
True
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from markupsafe import Markup, escape

PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
           "#bcbd22", "#17becf")
SPLIT_COLOURS = {"train": "#1f77b4", "test": "#ff7f0e", "validation": "#2ca02c"}


def colour(index: int) -> str:
    return PALETTE[index % len(PALETTE)]


def _num(value: Any) -> float | None:
    """A finite float, or None (records write NaN and infinities as strings)."""
    if isinstance(value, bool):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def fmt(value: object) -> str:
    """A number as a short label."""
    number = _num(value)
    if number is None:
        return "-" if value is None else str(value)
    if number == int(number) and abs(number) < 1e9:
        return str(int(number))
    return f"{number:.4g}"


def _scale(low: float, high: float, out_low: float, out_high: float):
    span = high - low or 1.0
    return lambda v: out_low + (v - low) / span * (out_high - out_low)


def _text(x: float, y: float, text: object, anchor: str = "start", size: int = 11, fill: str = "#444") -> str:
    return (f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" fill="{fill}" text-anchor="{anchor}">'
            f"{escape(str(text))}</text>")


def _title(text: object) -> str:
    """An SVG <title> (the tooltip): the whole text composed first, then escaped once, so no part of it (a metric
    name, a search's optimization key, a trial's label) can close the element and add markup after it."""
    return f"<title>{escape(str(text))}</title>"


def _frame(width: int, height: int, kind: str, points: int, title: str | None, body: list[str]) -> Markup:
    head = (f'<svg xmlns="http://www.w3.org/2000/svg" class="chart {kind}" data-points="{points}" '
            f'width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img">')
    label = _title(title) if title else ""
    return Markup(head + label + "".join(body) + "</svg>")


def line_chart(series: Mapping[str, Sequence[tuple[Any, Any]]], title: str | None = None, width: int = 420,
               height: int = 220, dashed: Sequence[str] = (), x_label: str = "step",
               x_range: tuple[float, float] | None = None) -> Markup:
    """Lines of (x, value) per series name on shared axes, with a legend; `dashed` series drawn dashed; the x
    axis is named `x_label` (a step, by default) and spans at least `x_range` (charts that share a time axis)."""
    clean = {name: [(x, y) for x, y in ((_num(a), _num(b)) for a, b in pts) if x is not None and y is not None]
             for name, pts in series.items()}
    colours = {name: colour(index) for index, name in enumerate(series)}  # same run, same colour in every chart
    clean = {name: sorted(pts) for name, pts in clean.items() if pts}
    total = sum(len(p) for p in clean.values())
    left, right, top, bottom = 52, 12, 22 if title else 10, 34 + 14 * min(len(clean), 8)
    body: list[str] = []
    if title:
        body.append(_text(width / 2, 14, title, "middle", 12, "#222"))
    if not clean:
        body.append(_text(width / 2, height / 2, "no values", "middle"))
        return _frame(width, height, "line", 0, title, body)
    xs = [x for pts in clean.values() for x, _ in pts]
    ys = [y for pts in clean.values() for _, y in pts]
    x0, x1, y0, y1 = min(xs), max(xs), min(ys), max(ys)
    if x_range is not None:
        x0, x1 = min(x0, x_range[0]), max(x1, x_range[1])
    if y0 == y1:
        y0, y1 = y0 - 0.5, y1 + 0.5
    plot_bottom = height - bottom
    sx = _scale(x0, x1 if x1 > x0 else x0 + 1, left, width - right)
    sy = _scale(y0, y1, plot_bottom, top)
    body.append(f'<rect x="{left}" y="{top}" width="{width - left - right}" height="{plot_bottom - top}" '
                'fill="#fafafa" stroke="#ccc"/>')
    for frac in (0.0, 0.5, 1.0):
        value = y0 + frac * (y1 - y0)
        body.append(_text(left - 4, sy(value) + 4, fmt(value), "end", 10))
    body.append(_text(left, plot_bottom + 13, fmt(x0), "start", 10))
    body.append(_text(width - right, plot_bottom + 13, fmt(x1), "end", 10))
    body.append(_text((left + width - right) / 2, plot_bottom + 13, x_label, "middle", 10, "#888"))
    for index, (name, pts) in enumerate(clean.items()):
        stroke = colours[name]
        dash = ' stroke-dasharray="5 3"' if name in dashed else ""
        coords = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in pts)
        body.append(f'<polyline class="series" data-name="{escape(name)}" points="{coords}" fill="none" '
                    f'stroke="{stroke}" stroke-width="1.8"{dash}>{_title(name)}</polyline>')
        for x, y in pts if len(pts) <= 40 else pts[-1:]:
            body.append(f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="2.2" fill="{stroke}">'
                        f"{_title(f'{name} {x_label} {fmt(x)}: {fmt(y)}')}</circle>")
        if index < 8:
            y = plot_bottom + 28 + 14 * index
            body.append(f'<line x1="{left}" y1="{y - 4}" x2="{left + 16}" y2="{y - 4}" stroke="{stroke}" '
                        f'stroke-width="2"{dash}/>')
            body.append(_text(left + 20, y, name, size=10))
    return _frame(width, height, "line", total, title, body)


def _metric_colour(frac: float) -> str:
    """The parallel-coordinates colour of a trial: 0 the worst metric (violet), 1 the best (green)."""
    return f"rgb({int(200 - 170 * frac)},{int(120 + 40 * frac)},{int(220 - 150 * frac)})"


def _label(x: float, y: float, text: object, anchor: str = "start", size: int = 10, fill: str = "#444") -> str:
    """A text drawn over lines: a white halo around the glyphs keeps it readable where a line crosses."""
    return (f'<text class="label" x="{x:.1f}" y="{y:.1f}" font-size="{size}" fill="{fill}" text-anchor="{anchor}" '
            f'stroke="#fff" stroke-width="3" stroke-linejoin="round" paint-order="stroke">{escape(str(text))}</text>')


def _log_ticks(low: float, high: float) -> list[float]:
    """The powers of ten within [low, high] (at most 6), else just the ends."""
    first, last = math.ceil(math.log10(low) - 1e-9), math.floor(math.log10(high) + 1e-9)
    decades = [10.0 ** e for e in range(first, last + 1)]
    return decades if 0 < len(decades) <= 6 else [low, high]


def parallel_coordinates(rows: Sequence[Mapping[str, Any]], axes: Sequence[str], metric: str,
                         direction: str = "max", width: int = 640, height: int = 290,
                         log_axes: Sequence[str] = ()) -> Markup:
    """One polyline per trial across one axis per hyperparameter and a last axis for the metric;
    the best trial drawn thick, early-stopped ones dashed, failed ones (no metric) grey; the axes in
    `log_axes` (a search's log_scale) on a log scale when all their values are positive. Axis names and
    ticks are drawn over the lines, and a legend below says what the colours and strokes mean.

    Each row: {"params": {...}, "metric": float|None, "state": str, "label": str}.

    >>> svg = parallel_coordinates([{"params": {"lr": 0.001}, "metric": 0.5, "state": "FINISHED", "label": "a"},
    ...                             {"params": {"lr": 0.1}, "metric": 0.9, "state": "FINISHED", "label": "b"}],
    ...                            ["lr"], "accuracy", log_axes=["lr"])
    >>> 'data-axis="lr" data-scale="log"' in svg, svg.count('class="swatch"')
    (True, 5)
    """
    names = list(axes) + [metric]
    left, right, top, bottom = 40, 60, 28, 58
    body: list[str] = []
    if not rows or not names:
        body.append(_text(width / 2, height / 2, "no trials", "middle"))
        return _frame(width, height, "parallel", 0, f"hyperparameters vs {metric}", body)

    def value(row: Mapping[str, Any], axis: str) -> Any:
        return row.get("metric") if axis == metric and axis not in row.get("params", {}) else row["params"].get(axis)

    gap = (width - left - right) / max(len(names) - 1, 1)
    positions: dict[str, Any] = {}
    labels: list[str] = []   # drawn after the lines, so that no line covers them
    for index, axis in enumerate(names):
        values = [value(r, axis) for r in rows]
        numbers = [n for n in map(_num, values) if n is not None]
        x = left + index * gap
        scale = "cat"
        if numbers and len(numbers) == len([v for v in values if v is not None]):
            low, high = min(numbers), max(numbers)
            if axis in log_axes and axis != metric and low > 0 and high > low:
                scale = "log"
                to_y = _scale(math.log10(low), math.log10(high), height - bottom, top)
                positions[axis] = ("num", lambda v, to_y=to_y: to_y(math.log10(v)) if v > 0 else None, low, high)
                ticks: list[tuple[Any, str]] = [(t, fmt(t)) for t in _log_ticks(low, high)]
            else:
                scale = "linear"
                positions[axis] = ("num", _scale(low, high if high > low else low + 1, height - bottom, top), low, high)
                ticks = [(low, fmt(low)), (high, fmt(high))] if high > low else [(low, fmt(low))]
        else:
            cats = sorted({str(v) for v in values if v is not None})
            step = (height - bottom - top) / max(len(cats) - 1, 1)
            mapping = {c: height - bottom - i * step for i, c in enumerate(cats)}
            positions[axis] = ("cat", mapping)
            ticks = [(c, c) for c in cats]
        body.append(f'<line class="axis" data-axis="{escape(axis)}" data-scale="{scale}" x1="{x:.1f}" y1="{top}" '
                    f'x2="{x:.1f}" y2="{height - bottom}" stroke="#999"/>')
        labels.append(_label(x, top - 10, axis + (" (log)" if scale == "log" else ""), "middle", 11, "#222"))
        for tick, text in ticks:
            y = positions[axis][1](tick) if positions[axis][0] == "num" else positions[axis][1][tick]
            labels.append(_label(x + 4, y + 4, text, fill="#555"))

    def y_of(axis: str, raw: object) -> float | None:
        kind = positions[axis]
        if raw is None:
            return None
        if kind[0] == "num":
            number = _num(raw)
            return None if number is None else kind[1](number)
        return kind[1].get(str(raw))

    scored = [r for r in rows if _num(r.get("metric")) is not None]
    pick = max if direction.lower() == "max" else min
    best = pick(scored, key=lambda r: _num(r["metric"]) or 0.0) if scored else None
    metric_pos = positions[metric]
    graded = metric_pos[0] == "num" and metric_pos[3] > metric_pos[2]
    drawn = 0
    for row in sorted(rows, key=lambda r: r is best):
        pts = []
        for index, axis in enumerate(names):
            y = y_of(axis, value(row, axis))
            if y is not None:
                pts.append(f"{left + index * gap:.1f},{y:.1f}")
        if not pts:
            continue
        drawn += 1
        m = _num(row.get("metric"))
        if m is None:
            stroke = "#bbb"
        elif graded:
            frac = (m - metric_pos[2]) / (metric_pos[3] - metric_pos[2])
            stroke = _metric_colour(frac if direction.lower() == "max" else 1 - frac)
        else:
            stroke = colour(0)
        dash = ' stroke-dasharray="5 3"' if row.get("state") == "EARLY_STOPPED" else ""
        widthpx = 3.2 if row is best else 1.6
        tip = f"{row.get('label')}: {metric} {fmt(row.get('metric'))} ({row.get('state')})"
        body.append(f'<polyline class="trial" data-state="{escape(str(row.get("state")))}" points="{" ".join(pts)}" '
                    f'fill="none" stroke="{stroke}" stroke-width="{widthpx}"{dash}>'
                    f"{_title(tip)}</polyline>")
    body += labels
    body.append(_legend(metric, direction, metric_pos if graded else None, left, height - 22))
    return _frame(width, height, "parallel", drawn, f"hyperparameters vs {metric}", body)


def _legend(metric: str, direction: str, metric_pos: Any, x: float, y: float) -> str:
    """Below the chart: the colour scale from the worst to the best metric, then the strokes."""
    items = ['<g class="legend">']
    if metric_pos is not None:
        low, high = metric_pos[2], metric_pos[3]
        worst, best = (low, high) if direction.lower() == "max" else (high, low)
        items.append(_text(x, y + 9, f"{metric} {fmt(worst)}", size=10))
        x += 12 + 6 * len(f"{metric} {fmt(worst)}")
        for step in range(5):
            frac = step / 4
            items.append(f'<rect class="swatch" x="{x + step * 14:.1f}" y="{y}" width="14" height="10" '
                         f'fill="{_metric_colour(frac)}">{_title(f"{metric} {fmt(worst + frac * (best - worst))}")}'
                         '</rect>')
        x += 5 * 14 + 4
        items.append(_text(x, y + 9, f"{fmt(best)} (best)", size=10))
        x += 12 + 6 * len(f"{fmt(best)} (best)")
    strokes = (("best", _metric_colour(1.0), "3.2", ""), ("stopped early", "#777", "1.6", ' stroke-dasharray="5 3"'),
               ("failed", "#bbb", "1.6", ""))
    for text, stroke, width, dash in strokes:
        items.append(f'<line x1="{x:.1f}" y1="{y + 5}" x2="{x + 18:.1f}" y2="{y + 5}" stroke="{stroke}" '
                     f'stroke-width="{width}"{dash}/>')
        items.append(_text(x + 22, y + 9, text, size=10))
        x += 30 + 6 * len(text)
    items.append("</g>")
    return "".join(items)


def histograms(parts: Mapping[str, tuple[Sequence[float], Sequence[int]]], title: str | None = None,
               width: int = 300, height: int = 120) -> Markup:
    """Histograms of several splits overlaid on one x axis: each split's own bins (`parts` maps a split
    to its (edges, counts)), bar heights as the split's share of rows per unit of x, so a small test
    split compares with a large train split even where their bins differ.

    >>> svg = histograms({"train": ([0, 1, 2], [3, 1]), "test": ([0, 2, 4], [1, 1])})
    >>> svg.count('class="bar"'), 'data-points="4"' in svg
    (4, True)
    """
    bars: list[tuple[str, int, float, float, float, int]] = []   # split, index, x0, x1, density, count
    for index, (split, (edges, counts)) in enumerate(parts.items()):
        total = sum(counts) or 1
        for b, count in enumerate(counts[: len(edges) - 1]):
            lo, hi = _num(edges[b]), _num(edges[b + 1])
            if lo is None or hi is None:
                continue
            bars.append((split, index, lo, hi, count / total / ((hi - lo) or 1.0), int(count)))
    left, right, top, bottom = 6, 6, 6, 28
    body: list[str] = []
    if not bars:
        body.append(_text(width / 2, height / 2, "no values", "middle"))
        return _frame(width, height, "histogram", 0, title, body)
    x_low, x_high = min(b[2] for b in bars), max(b[3] for b in bars)
    sx = _scale(x_low, x_high if x_high > x_low else x_low + 1, left, width - right)
    peak = max(b[4] for b in bars) or 1.0
    plot_h = height - top - bottom
    for split, index, lo, hi, density, count in bars:
        fill = SPLIT_COLOURS.get(split, colour(index + 3))
        h = density / peak * plot_h
        x0, x1 = sx(lo), sx(hi)
        share = density * ((hi - lo) or 1.0)
        body.append(f'<rect class="bar" x="{x0 + 1:.1f}" y="{top + plot_h - h:.1f}" width="{max(x1 - x0 - 2, 1):.1f}" '
                    f'height="{h:.1f}" fill="{fill}" fill-opacity="0.45" stroke="{fill}">'
                    f"{_title(f'{split} [{fmt(lo)}, {fmt(hi)}): {share:.1%} ({count})')}</rect>")
    body.append(_text(left, height - bottom + 12, fmt(x_low), size=10))
    body.append(_text(width - right, height - bottom + 12, fmt(x_high), "end", 10))
    body += _split_legend(list(parts), left, height, ' fill-opacity="0.6"')
    return _frame(width, height, "histogram", len(bars), title, body)


def _split_legend(splits: Sequence[str], x: float, height: float, extra: str = "") -> list[str]:
    """A swatch and the name of each split along the bottom edge, in the splits' colours."""
    items = []
    for index, split in enumerate(splits):
        fill = SPLIT_COLOURS.get(split, colour(index + 3))
        items.append(f'<rect x="{x}" y="{height - 10}" width="10" height="8" fill="{fill}"{extra}/>')
        items.append(_text(x + 13, height - 2, split, size=10))
        x += 20 + 7 * len(split)
    return items


def category_bars(counts: Mapping[str, Sequence[Sequence[Any]]], width: int = 300, limit: int = 10) -> Markup:
    """Top values of a categorical column per split as grouped horizontal bars of shares."""
    order: list[str] = []
    shares: dict[str, dict[str, float]] = {}
    for split, pairs in counts.items():
        total = sum(int(n) for _, n in pairs) or 1
        shares[split] = {str(v): int(n) / total for v, n in pairs}
        order += [str(v) for v, _ in pairs if str(v) not in order]
    order = order[:limit]
    row_h = 8 * max(len(shares), 1) + 4
    height = row_h * len(order) + 20
    label_w = 90
    body: list[str] = []
    peak = max((s for d in shares.values() for s in d.values()), default=0) or 1
    for i, value in enumerate(order):
        y = 4 + i * row_h
        body.append(_text(label_w - 4, y + row_h / 2 + 3, value[:14], "end", 10))
        for j, (split, d) in enumerate(shares.items()):
            share = d.get(value, 0.0)
            fill = SPLIT_COLOURS.get(split, colour(j + 3))
            w = share / peak * (width - label_w - 40)
            body.append(f'<rect class="bar" x="{label_w}" y="{y + j * 8}" width="{w:.1f}" height="7" fill="{fill}">'
                        f"{_title(f'{split} {value}: {share:.1%}')}</rect>")
    body += _split_legend(list(shares), label_w, height)
    return _frame(width, height, "bars", len(order), None, body)
