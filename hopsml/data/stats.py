"""Dataset statistics, as Facets Overview shows them: per column and per split, count, missing,
min, max, mean, median, std, zeros, distinct and top values, with a histogram; for images the
class balance and the sizes before resizing.

Written as ``stats.json`` and as a self-contained HTML page (inline CSS and SVG, no scripts) with
the splits side by side; :func:`show` displays it in a notebook. Table statistics are computed by
Spark and by the pass that writes the shards; image statistics from the per-partition reports of the
image job. Importable without pyspark.
"""

from __future__ import annotations

import html
import math
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from hopsml import config

TOP_VALUES = 10
BINS = 10
# The median of a column is taken from about this many of its values (a sample of the rows chosen by their
# hash, all of them in a smaller table): 50,000 values put the median within about 1% of a standard deviation
# of the table's. A wide table's sample has fewer rows: MEDIAN_VALUES values in all.
MEDIAN_SAMPLE = 50_000
MEDIAN_VALUES = 2_000_000


# --- plain-python summaries --------------------------------------------------------------------
def numeric_summary(values: Iterable[float], missing: int = 0) -> dict[str, Any]:
    """Statistics of numbers held in memory (image sizes, tests)."""
    array = np.asarray(values if isinstance(values, np.ndarray) else list(values), dtype=np.float64)
    out: dict[str, Any] = {"count": int(array.size), "missing": int(missing)}
    if array.size == 0:
        return out
    out.update(min=float(array.min()), max=float(array.max()), mean=float(array.mean()),
               median=float(np.median(array)),
               std=float(array.std(ddof=1)) if array.size > 1 else 0.0,
               zeros=int((array == 0).sum()), distinct=int(np.unique(array).size))
    counts, edges = np.histogram(array, bins=_edges(out["min"], out["max"]))
    out["histogram"] = {"edges": [float(e) for e in edges], "counts": [int(c) for c in counts]}
    return out


def categorical_summary(counts: Mapping[Any, int], missing: int = 0) -> dict[str, Any]:
    """Statistics of a categorical column from its value counts."""
    ordered = sorted(counts.items(), key=lambda kv: (-kv[1], str(kv[0])))
    return {"count": int(sum(counts.values())), "missing": int(missing), "distinct": len(counts),
            "top": [[str(value), int(n)] for value, n in ordered[:TOP_VALUES]]}


def _edges(low: float, high: float) -> list[float]:
    if high <= low:
        return [low - 0.5, high + 0.5]
    step = (high - low) / BINS
    return [low + i * step for i in range(BINS)] + [high]


# --- images ------------------------------------------------------------------------------------
def image_stats(splits: Mapping[str, Sequence[Mapping[str, Any]]], labels: Sequence[str],
                rejected: Mapping[str, int] | None = None) -> dict[str, Any]:
    """Statistics of an image dataset, per split, from the image job's partition reports.

    ``splits`` maps each split name to the reports of its rows (labels, modes and formats
    counted; widths and heights before resizing listed); ``rejected`` counts rejection reasons.
    """
    names = list(splits)
    columns: dict[str, dict[str, Any]] = {
        name: {"name": name, "type": kind, "splits": {}} for name, kind in (
            ("label", "categorical"), ("width before resize", "numeric"),
            ("height before resize", "numeric"), ("mode", "categorical"), ("format", "categorical"))}
    rows: dict[str, int] = {}
    balance: dict[str, dict[str, int]] = {}
    for split, reports in splits.items():
        label_counts = Counter({label: 0 for label in labels})
        modes: Counter = Counter()
        formats: Counter = Counter()
        widths: list[int] = []
        heights: list[int] = []
        for report in reports:
            label_counts.update(report["labels"])
            modes.update(report["modes"])
            formats.update(report["formats"])
            widths += report["widths"]
            heights += report["heights"]
        columns["label"]["splits"][split] = categorical_summary(label_counts)
        columns["width before resize"]["splits"][split] = numeric_summary(widths)
        columns["height before resize"]["splits"][split] = numeric_summary(heights)
        columns["mode"]["splits"][split] = categorical_summary(modes)
        columns["format"]["splits"][split] = categorical_summary(formats)
        rows[split] = len(widths)
        balance[split] = dict(label_counts)
    return {"kind": "images", "splits": names, "rows": rows, "class_balance": balance,
            "rejected": dict(rejected or {}), "columns": list(columns.values())}


# --- tables (Spark) ----------------------------------------------------------------------------
def table_stats_and_counts(frame: DataFrame, split_column: str, splits: Sequence[str], numeric: Sequence[str],
                           categorical: Sequence[str],
                           aggregated: Iterable[tuple[Any, str | None, Mapping[str, Any]]] | None = None
                           ) -> tuple[dict[str, Any], dict[str, dict[str, Any]], dict[tuple[str, str], dict[str, int]]]:
    """Statistics of a Spark DataFrame per value of ``split_column`` (values in ``splits``), with what they
    are made of: the per-split aggregates (``<column>__mean``, ``__std``, ``__count``, ``__rows`` ...) and
    every categorical value's count per (split, column), so that fitting a transform needs no further pass
    over the data. Two Spark jobs: the numeric aggregates (see :func:`_numeric_aggregates`), then the
    category counts, from one (split, column, value) row per cell. The numeric columns' histograms have
    their edges, and with their medians and distinct counts come from a pass that reads every row anyway
    (the shard writers' :class:`NumericSketch`, put in by :func:`add_sketches`): in Spark those three
    were aggregates without generated code, which took most of the statistics' time. ``aggregated``:
    the numeric aggregates of these rows, taken by an earlier pass (see :func:`numeric_aggregate_sql`),
    which saves their job."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import BooleanType, IntegralType

    kinds = {f.name: f.dataType for f in frame.schema.fields}
    integral = {c for c in numeric if isinstance(kinds.get(c), (IntegralType, BooleanType))}
    aggregated = list(_numeric_aggregates(frame, split_column, numeric) if aggregated is None else aggregated)
    value_counts: dict[tuple[str, str], dict[str, int]] = {}
    missing: dict[tuple[str, str], int] = {}
    if categorical:   # every category count in one job, a category's missing values too
        cells = [F.struct(F.lit(column).alias("c"), F.col(column).cast("string").alias("v")) for column in categorical]
        exploded = frame.select(split_column, F.explode(F.array(*cells)).alias("cell"))
        for row in exploded.groupBy(split_column, "cell.c", "cell.v").count().collect():
            key = (row[split_column], row["c"])
            if row["v"] is None:
                missing[key] = int(row["count"])
            else:
                value_counts.setdefault(key, {})[row["v"]] = int(row["count"])
    return assemble_table_stats(splits, numeric, categorical, integral, aggregated, value_counts, missing)


def assemble_table_stats(splits: Sequence[str], numeric: Sequence[str], categorical: Sequence[str],
                         integral: set[str], aggregated: Iterable[tuple[Any, str | None, Mapping[str, Any]]],
                         value_counts: dict[tuple[str, str], dict[str, int]], missing: Mapping[tuple[str, str], int]
                         ) -> tuple[dict[str, Any], dict[str, dict[str, Any]], dict[tuple[str, str], dict[str, int]]]:
    """:func:`table_stats_and_counts` of what an engine counted: the numeric aggregates per (split, column), the
    (split, column) category counts and missing values; ``integral`` columns' min and max are whole numbers."""
    rows: dict[str, dict[str, Any]] = {}
    for split, column, aggregate in aggregated:
        values = rows.setdefault(split, {})
        if column is None:
            values["__rows"] = int(aggregate["rows"])
            continue
        for stat in ("count", *_AGGREGATES):
            value = aggregate[stat]
            if column in integral and stat in ("min", "max") and value is not None:
                value = int(value)
            values[f"{column}__{stat}"] = value
        values[f"{column}__missing"] = int(aggregate["rows"]) - int(aggregate["count"])
    row_counts = {split: values.get("__rows", 0) for split, values in rows.items()}
    for (split, column), counts in value_counts.items():
        rows.setdefault(split, {})[f"{column}__count"] = sum(counts.values())
    for (split, column), count in missing.items():
        rows.setdefault(split, {})[f"{column}__missing"] = count
    tops = {key: [[value, n] for value, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:TOP_VALUES]]
            for key, counts in value_counts.items()}

    columns = []
    for column in numeric:
        lows = [rows[s][f"{column}__min"] for s in splits if s in rows and rows[s].get(f"{column}__min") is not None]
        highs = [rows[s][f"{column}__max"] for s in splits if s in rows and rows[s].get(f"{column}__max") is not None]
        low, high = min(lows, default=None), max(highs, default=None)
        edges = _edges(float(low), float(high)) if low is not None and high is not None else []
        per_split: dict[str, dict[str, Any]] = {}
        for split in splits:
            found = rows.get(split)
            if found is None:
                per_split[split] = {"count": 0, "missing": 0}
                continue
            entry = {key: _plain(found.get(f"{column}__{key}")) for key in ("count", "missing", *_AGGREGATES)}
            entry.update(count=entry["count"] or 0, missing=entry["missing"] or 0, zeros=entry["zeros"] or 0,
                         median=None, distinct=None)
            if edges:
                entry["histogram"] = {"edges": edges, "counts": [0] * (len(edges) - 1)}
            per_split[split] = entry
        columns.append({"name": column, "type": "numeric", "splits": per_split})
    for column in categorical:
        per_split = {}
        for split in splits:
            values = rows.get(split, {})
            per_split[split] = {"count": int(values.get(f"{column}__count") or 0),
                                "missing": int(values.get(f"{column}__missing") or 0),
                                "distinct": len(value_counts.get((split, column), {})),
                                "top": tops.get((split, column), [])}
        columns.append({"name": column, "type": "categorical", "splits": per_split})
    stats = {"kind": "table", "splits": list(splits), "rows": {s: int(row_counts.get(s, 0)) for s in splits},
             "columns": columns}
    return stats, rows, value_counts


def histogram_counts(values: np.ndarray, edges: Sequence[float]) -> np.ndarray:
    """How many of ``values`` (non-missing floats) fall in each bucket of ``edges``, the last one closed
    (NaN in the first bucket)."""
    width = (edges[-1] - edges[0]) / (len(edges) - 1)
    with np.errstate(invalid="ignore"):
        bucket = np.floor((values - edges[0]) / width)
    bucket = np.clip(np.nan_to_num(bucket, nan=0.0, posinf=len(edges) - 2, neginf=0.0), 0, len(edges) - 2)
    bucket = bucket.astype(np.int64)
    return np.bincount(bucket, minlength=len(edges) - 1)


def values_kept(columns: int) -> int:
    """How many values of each of ``columns`` numeric columns a sketch keeps for an exact median: up to
    ``MEDIAN_SAMPLE``, and ``MEDIAN_VALUES`` in all."""
    return max(1, min(MEDIAN_SAMPLE, MEDIAN_VALUES // max(columns, 1)))


def median_fraction(rows: int, columns: int) -> float:
    """The share of the rows whose values make the median sample: about ``MEDIAN_SAMPLE`` rows, and no
    more than ``MEDIAN_VALUES`` values in all (a wide table's sample has fewer rows)."""
    if rows <= 0:
        return 1.0
    return min(1.0, MEDIAN_SAMPLE / rows, MEDIAN_VALUES / (rows * max(columns, 1)))


class NumericSketch:
    """One numeric column of one split as a pass over its rows sees it: the histogram's counts over fixed
    ``edges``, HyperLogLog registers for its distinct values, every value while there are at most ``keep``
    (the median and distinct count are then exact, in a small table and in a sparse column of a large one),
    and the values of the rows in the median sample. The sketches of parts of the rows merge into the
    sketch of them all."""

    def __init__(self, edges: Sequence[float] | None, keep: int = MEDIAN_SAMPLE) -> None:
        self.edges = list(edges) if edges else None
        self.counts = np.zeros(len(self.edges) - 1, np.int64) if self.edges else None
        self.registers = np.zeros(1 << HLL_BITS, np.uint8)
        self.keep = keep
        self.values: list[np.ndarray] | None = []   # every value, until there are more than keep
        self.seen = 0
        self.sample: list[np.ndarray] = []

    def add(self, values: np.ndarray, sampled: np.ndarray) -> None:
        """``values``: present values (float64); ``sampled``: which of them are in the median sample."""
        if not values.size:
            return
        if self.counts is not None and self.edges is not None:
            self.counts += histogram_counts(values, self.edges)
        _hll_add(self.registers, values)
        self._keep([values], values.size)
        chosen = values if sampled.all() else values[sampled]
        if chosen.size:
            self.sample.append(chosen)

    def _keep(self, values: list[np.ndarray] | None, count: int) -> None:
        self.seen += count
        if self.values is None or values is None or self.seen > self.keep:
            self.values = None
        else:
            self.values += values

    def merge(self, other: NumericSketch) -> None:
        if self.counts is not None and other.counts is not None:
            self.counts += other.counts
        np.maximum(self.registers, other.registers, out=self.registers)
        self._keep(other.values, other.seen)
        self.sample += other.sample

    def result(self) -> dict[str, Any]:
        """The histogram's counts, the median (the middle value, the lower one of two) and the number of
        distinct values: of every value while they were kept, else of the sample and HyperLogLog's estimate."""
        exact = self.values is not None
        parts = self.values if self.values is not None else self.sample
        pool = np.concatenate(parts) if parts else np.empty(0)
        median = float(np.partition(pool, (pool.size - 1) // 2)[(pool.size - 1) // 2]) if pool.size else None
        if exact:
            distinct = int(np.unique(np.where(np.isnan(pool), np.nan, pool)).size)
        else:
            distinct = int(round(_hll_estimate(self.registers)))
        return {"counts": None if self.counts is None else [int(n) for n in self.counts],
                "median": median, "distinct": distinct}


def add_sketches(stats: Mapping[str, Any], sketches: Mapping[tuple[str, str], NumericSketch]) -> None:
    """Put the histogram counts, medians and distinct counts of the (split, column) sketches into
    statistics made by :func:`table_stats_and_counts`."""
    for column in stats["columns"]:
        for split, entry in column["splits"].items():
            sketch = sketches.get((split, column["name"]))
            if sketch is None or column["type"] != "numeric":
                continue
            found = sketch.result()
            entry["median"], entry["distinct"] = _plain(found["median"]), found["distinct"]
            if found["counts"] is not None and "histogram" in entry:
                entry["histogram"]["counts"] = found["counts"]


HLL_BITS = 11   # 2,048 registers: distinct counts within about 2.3% (one standard error)


def _hll_add(registers: np.ndarray, values: np.ndarray) -> None:
    """Add float64 ``values`` to HyperLogLog ``registers`` (0.0 and -0.0 one value, every NaN one value)."""
    bits = np.ascontiguousarray(np.where(np.isnan(values), np.nan, values + 0.0), np.float64).view(np.uint64)
    hashed = bits ^ (bits >> np.uint64(30))   # splitmix64's finalizer: every input bit moves every output bit
    hashed *= np.uint64(0xBF58476D1CE4E5B9)
    hashed ^= hashed >> np.uint64(27)
    hashed *= np.uint64(0x94D049BB133111EB)
    hashed ^= hashed >> np.uint64(31)
    index = (hashed >> np.uint64(64 - HLL_BITS)).astype(np.intp)
    rest = (hashed << np.uint64(HLL_BITS)) | np.uint64(1 << (HLL_BITS - 1))   # never all zeros
    # the position of the first 1 bit of the rest, from its float's exponent (a value that rounds up to the
    # next power of two counts one less, rarely: the estimate does not see it)
    rank = 64 - np.frexp(rest.astype(np.float64))[1]
    np.maximum.at(registers, index, np.clip(rank + 1, 1, 64 - HLL_BITS + 1).astype(np.uint8))


def _hll_estimate(registers: np.ndarray) -> float:
    """HyperLogLog's estimate of the distinct values added, linear counting while registers are empty."""
    m = registers.size
    raw = 0.7213 / (1 + 1.079 / m) * m * m / float(np.sum(np.ldexp(1.0, -registers.astype(np.int64))))
    empty = int(np.count_nonzero(registers == 0))
    return m * math.log(m / empty) if empty and raw <= 2.5 * m else raw


_AGGREGATES = ("min", "max", "mean", "std", "zeros")
WIDE_COLUMNS = 64   # up to this many numeric columns the aggregates are one row per split


def _aggregate_sql(v: str, suffix: str, prefix: str = "") -> list[str]:
    """The aggregates of SQL expression ``v``, as SQL text (one call into the JVM each)."""
    return [f"{aggregate} AS {prefix}{name}{suffix}" for name, aggregate in (
        ("count", f"count({v})"), ("min", f"min({v})"), ("max", f"max({v})"), ("mean", f"avg({v})"),
        ("std", f"stddev_samp({v})"), ("zeros", f"count(CASE WHEN {v} = 0 THEN 1 END)"))]


def numeric_aggregate_sql(numeric: Sequence[str], where: str | None = None, prefix: str = "") -> list[str]:
    """The numeric aggregates of one split in one row, as SQL text to group by split: the rows
    (``<prefix>rows``) and each column's statistics (``<prefix><stat>_<i>``), of the rows where SQL
    condition ``where`` holds (all rows without one). A pass that groups the rows by split for its
    own counts takes them on the way (see :func:`split_aggregates`)."""
    def of(name: str) -> str:
        value = "CAST(`" + name.replace("`", "``") + "` AS double)"
        return value if where is None else f"CASE WHEN {where} THEN {value} END"

    parts = [f"count({'1' if where is None else f'CASE WHEN {where} THEN 1 END'}) AS {prefix}rows"]
    for i, column in enumerate(numeric):
        parts += _aggregate_sql(of(column), f"_{i}", prefix)
    return parts


def split_aggregates(split: Any, row: Mapping[str, Any], numeric: Sequence[str], prefix: str = ""
                     ) -> Iterator[tuple[Any, str | None, Mapping[str, Any]]]:
    """The (split, column, its aggregates) of one row of :func:`numeric_aggregate_sql`, and (split,
    None, the split's row count) first."""
    rows = row[f"{prefix}rows"]
    yield split, None, {"rows": rows}
    for i, column in enumerate(numeric):
        yield split, column, {"rows": rows, **{stat: row[f"{prefix}{stat}_{i}"] for stat in ("count", *_AGGREGATES)}}


def _numeric_aggregates(frame: DataFrame, split_column: str, numeric: Sequence[str]
                        ) -> Iterator[tuple[Any, str | None, Mapping[str, Any]]]:
    """(split, column, its aggregates) for every split and numeric column, and (split, None, the
    split's row count) once per split. Up to ``WIDE_COLUMNS`` columns one aggregate of a few
    functions per column, grouped by split: no row per cell to make and group (at 1M rows of 10
    numeric columns that long form took most of the statistics' time). Wider tables get one
    (split, column, value) row per cell: a few functions whatever the number of columns (one
    aggregate per column and statistic needs code and buffers that grow with the columns; a
    65-column table exhausted a 1 GiB driver heap)."""
    from pyspark.sql import functions as F

    if len(numeric) <= WIDE_COLUMNS:
        aggregates = [F.expr(part) for part in numeric_aggregate_sql(numeric)]
        for row in frame.groupBy(F.col(split_column).alias("s")).agg(*aggregates).collect():
            yield from split_aggregates(row["s"], row.asDict(), numeric)
        return
    # cell -1 of every row counts the rows of its split
    cells = [F.struct(F.lit(-1).alias("c"), F.lit(None).cast("double").alias("v"))]
    cells += [F.struct(F.lit(i).alias("c"), F.col(column).cast("double").alias("v"))
              for i, column in enumerate(numeric)]
    long_form = frame.select(F.col(split_column).alias("s"), F.explode(F.array(*cells)).alias("cell")).select(
        "s", "cell.c", "cell.v")
    aggregates = [F.count(F.lit(1)).alias("rows"), *[F.expr(part) for part in _aggregate_sql("v", "")]]
    for row in long_form.groupBy("s", "c").agg(*aggregates).collect():
        yield row["s"], None if row["c"] < 0 else numeric[row["c"]], row.asDict()


def _plain(value: Any) -> Any:
    if value is None:
        return None
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, (int, float)):
        return value
    return float(value)


# --- HTML --------------------------------------------------------------------------------------
_CSS = """
body{font-family:-apple-system,Segoe UI,Helvetica,Arial,sans-serif;font-size:13px;color:#222;margin:16px}
h1{font-size:18px;margin:0 0 4px} p.meta{color:#666;margin:0 0 12px}
table.hs{border-collapse:collapse;width:100%} table.hs th,table.hs td{border-top:1px solid #ddd;
padding:6px 8px;vertical-align:top;text-align:left} table.hs th{background:#f6f6f6}
td.col b{font-size:14px} td.col span{color:#888;display:block}
dl{display:grid;grid-template-columns:auto auto;gap:0 10px;margin:0 0 4px} dt{color:#666} dd{margin:0;
font-variant-numeric:tabular-nums} .warn{color:#b00}
ol.top{margin:0;padding-left:18px} ol.top li span{color:#666}
"""


def _fmt(value: object) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def _svg_bars(counts: Sequence[int], labels: Sequence[str], width: int = 220, height: int = 60) -> str:
    if not counts:
        return ""
    top = max(max(counts), 1)
    bar = width / len(counts)
    rects = []
    for i, (count, label) in enumerate(zip(counts, labels)):
        h = height * count / top
        rects.append(f'<rect x="{i * bar + 1:.1f}" y="{height - h:.1f}" width="{max(bar - 2, 1):.1f}" '
                     f'height="{h:.1f}" fill="#4a78c2"><title>{html.escape(label)}: {count}</title></rect>')
    return (f'<svg width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
            f'xmlns="http://www.w3.org/2000/svg" role="img">{"".join(rects)}</svg>')


def _cell(entry: Mapping[str, Any] | None, kind: str) -> str:
    if not entry:
        return "<td>–</td>"
    keys = (("count", "missing", "min", "max", "mean", "median", "std", "zeros", "distinct")
            if kind == "numeric" else ("count", "missing", "distinct"))
    items = []
    for key in keys:
        value = entry.get(key)
        total = (entry.get("count") or 0) + (entry.get("missing") or 0)
        warn = key == "missing" and value and total and value / total > 0.05
        items.append(f"<dt>{key}</dt><dd{' class=warn' if warn else ''}>{_fmt(value)}</dd>")
    parts = [f"<dl>{''.join(items)}</dl>"]
    if kind == "numeric" and entry.get("histogram"):
        edges = entry["histogram"]["edges"]
        labels = [f"{_fmt(edges[i])} – {_fmt(edges[i + 1])}" for i in range(len(edges) - 1)]
        parts.append(_svg_bars(entry["histogram"]["counts"], labels))
    if kind == "categorical" and entry.get("top"):
        parts.append(_svg_bars([n for _, n in entry["top"]], [v for v, _ in entry["top"]]))
        parts.append("<ol class=top>" + "".join(
            f"<li>{html.escape(v)} <span>{n}</span></li>" for v, n in entry["top"]) + "</ol>")
    return f"<td>{''.join(parts)}</td>"


def render_html(stats: Mapping[str, Any], title: str = "dataset", full_page: bool = True) -> str:
    """A self-contained HTML view of ``stats``: one row per column, one cell per split."""
    splits = list(stats.get("splits", []))
    rows = stats.get("rows", {})
    head = "".join(f"<th>{html.escape(s)} ({rows.get(s, 0)} rows)</th>" for s in splits)
    body = []
    for column in stats.get("columns", []):
        cells = "".join(_cell(column["splits"].get(s), column["type"]) for s in splits)
        source = column.get("source_name")
        shown = (f'<b>{html.escape(source)}</b><span>{html.escape(column["name"])}</span>'
                 if source and source != column["name"] else f'<b>{html.escape(column["name"])}</b>')
        body.append(f'<tr><td class=col>{shown}<span>{html.escape(column["type"])}</span></td>{cells}</tr>')
    rejected = stats.get("rejected") or {}
    meta = f"{stats.get('kind', '')} dataset"
    if rejected:
        meta += "; rejected: " + ", ".join(f"{html.escape(str(k))} {v}" for k, v in sorted(rejected.items()))
    content = (f"<h1>{html.escape(title)}</h1><p class=meta>{meta}</p>"
               f"<table class=hs><tr><th>column</th>{head}</tr>{''.join(body)}</table>")
    style = f"<style>{_CSS}</style>"
    if not full_page:
        return f'<div class="hopsml-stats">{style}{content}</div>'
    return (f"<!DOCTYPE html><html><head><meta charset=utf-8><title>{html.escape(title)} statistics"
            f"</title>{style}</head><body>{content}</body></html>\n")


class StatsView:
    """The statistics of a dataset; a notebook displays it as the HTML page."""

    def __init__(self, name: str, stats: Mapping[str, Any]) -> None:
        self.name = name
        self.stats = stats

    def _repr_html_(self) -> str:
        return render_html(self.stats, title=self.name, full_page=False)

    def __repr__(self) -> str:
        return f"StatsView({self.name!r}, {len(self.stats.get('columns', []))} columns)"


def show(dataset: str, settings: config.Settings | None = None) -> StatsView:
    """The statistics of a finished dataset, for ``display`` in a notebook (or its last line)."""
    from hopsml import config as _config
    from hopsml.data import dataset as ds
    from hopsml.fs import Storage

    settings = settings or _config.load()
    storage = Storage(settings.root)
    ddir, _ = ds.open_dataset(storage, settings.project, dataset)
    return StatsView(dataset, storage.read_json(ddir.stats_json))
