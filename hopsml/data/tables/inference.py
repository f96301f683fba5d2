"""Type inference: what one pass over the text tells of each column (numbers, whole numbers, booleans, failures)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from hopsml.data import dataset as ds
from hopsml.data.tables.options import CORRUPT, NUMERIC_TYPES, WIDE_COLUMNS, TableOptions, sanitize
from hopsml.data.tables.parsing import ESCAPED_QUOTE, INTEGER_TEXT, decide, parse, parse_sql, sql_name, sql_text

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


def one_row(frame: DataFrame) -> Any:
    """The row of a global aggregate (which always has one)."""
    row = frame.first()
    if row is None:
        raise ds.DatasetError("Spark returned no row for a global aggregate; rerun the job")
    return row


@dataclass
class Inference:
    """What one pass over the text tells: the column types, the rows read, and per column how many
    values do not parse as its type with one of them (for messages)."""

    types: dict[str, str]
    read: int
    malformed: int
    malformed_quoted: int
    escaped: int            # values (or malformed rows) holding \" : quotes escaped by a backslash
    failures: dict[str, int]
    samples: dict[str, str]
    present: dict[str, int]
    # the statistics' numeric aggregates of the rows to write, per split, when the pass took them
    aggregated: list[tuple[Any, str | None, Mapping[str, Any]]] | None = None


def counts_long(frame: DataFrame, names: list[str], kinds: list[str]) -> dict[int, Any]:
    """Per column (by index; -1 the well-formed rows, -2 the malformed ones) the counts that type
    inference needs, from one (column, text) row per cell: an aggregate of a few functions whatever
    the number of columns (one function per column and check took minutes to generate code for at
    1,000 columns)."""
    from pyspark.sql import functions as F

    well_formed = F.col(CORRUPT).isNull()
    marker = [F.struct(F.lit(-1).alias("c"), F.lit("").alias("k"), F.lit(None).cast("string").alias("t"))]
    # every column, a category too: the CSV reader flags a row with too few fields only when it
    # parses every field (with columns pruned it pads the row)
    cells = [F.struct(F.lit(i).alias("c"), F.lit(kind).alias("k"), F.col(n).alias("t"))
             for i, (n, kind) in enumerate(zip(names, kinds))]
    malformed = F.struct(F.lit(-2).alias("c"), F.lit("").alias("k"), F.col(CORRUPT).alias("t"))
    long_form = (frame.select(F.explode(F.when(well_formed, F.array(*marker, *cells))
                                        .otherwise(F.array(malformed))).alias("cell"))
                 .select("cell.c", "cell.k", "cell.t"))
    text, kind = F.col("t"), F.col("k")
    number = parse("t", "double")
    bad = text.isNotNull() & (
        F.when(kind.isin("infer", "double"), number.isNull())
        .when(kind == "long", parse("t", "long").isNull())
        .when(kind == "boolean", parse("t", "boolean").isNull())
        .otherwise(F.lit(False)))
    return {row["c"]: row.asDict() for row in long_form.groupBy("c").agg(
        F.count(F.lit(1)).alias("rows"), F.count(text).alias("n"), F.count(number).alias("num"),
        F.count(F.when(text.rlike(INTEGER_TEXT) & parse("t", "long").isNotNull(), F.lit(1))).alias("int"),
        F.count(F.when(F.lower(text).isin("true", "false"), F.lit(1))).alias("bool"),
        F.count(F.when(bad, F.lit(1))).alias("bad"),
        F.first(F.when(bad, text), ignorenulls=True).alias("sample"),
        F.count(F.when(text.contains('"'), F.lit(1))).alias("quoted"),
        F.count(F.when(text.contains(ESCAPED_QUOTE), F.lit(1))).alias("escaped")).collect()}


def counts_wide(frame: DataFrame, names: list[str], kinds: list[str]) -> dict[int, Any]:
    """The counts of :func:`counts_long` as one global aggregate with a few functions per column:
    no row per cell to make and group (at 1M rows of 12 columns the long form took most of the
    read step). For tables up to ``WIDE_COLUMNS`` columns, where the generated code stays small.
    Every column is referenced, so the CSV reader parses whole rows and flags malformed ones."""
    corrupt = sql_name(CORRUPT)
    well = f"{corrupt} IS NULL"
    every = "concat_ws(" + ", ".join(["'\\n'", *[sql_name(n) for n in names]]) + ")"
    parts = [f"count(CASE WHEN {well} THEN 1 END) AS `rows_-1`",
             f"count(CASE WHEN NOT {well} THEN 1 END) AS `rows_-2`",
             f"count(CASE WHEN NOT {well} AND instr({corrupt}, '\"') > 0 THEN 1 END) AS `quoted_-2`",
             f"count(CASE WHEN instr(CASE WHEN {well} THEN {every} ELSE {corrupt} END, "
             f"{sql_text(ESCAPED_QUOTE)}) > 0 THEN 1 END) AS escaped"]
    for i, (name, kind) in enumerate(zip(names, kinds)):
        text = sql_name(name)
        parts.append(f"count(CASE WHEN {well} THEN {text} END) AS n_{i}")
        if kind == "string":
            continue
        number = parse_sql(name, "double")
        whole = f"{text} RLIKE {sql_text(INTEGER_TEXT)} AND ({parse_sql(name, 'long')}) IS NOT NULL"
        parsed = number if kind == "infer" else parse_sql(name, kind)
        bad = f"{well} AND {text} IS NOT NULL AND ({parsed}) IS NULL"
        parts += [f"count(CASE WHEN {well} THEN {number} END) AS num_{i}",
                  f"count(CASE WHEN {well} AND {whole} THEN 1 END) AS int_{i}",
                  f"count(CASE WHEN {well} AND lower({text}) IN ('true', 'false') THEN 1 END) AS bool_{i}",
                  f"count(CASE WHEN {bad} THEN 1 END) AS bad_{i}",
                  f"first(CASE WHEN {bad} THEN {text} END, true) AS sample_{i}"]
    row = one_row(frame.selectExpr(*parts)).asDict()
    out: dict[int, Any] = {-1: {"rows": row["rows_-1"], "escaped": row["escaped"]},
                           -2: {"rows": row["rows_-2"], "quoted": row["quoted_-2"]}}
    for i in range(len(kinds)):
        out[i] = {key: row.get(f"{key}_{i}", 0) for key in ("n", "num", "int", "bool", "bad", "sample")}
        out[i]["rows"] = row["rows_-1"]
        out[i]["sample"] = row.get(f"sample_{i}")
    return out


def infer_types(frame: DataFrame, names: list[str], options: TableOptions) -> Inference:
    """Types given, else inferred from the text of the well-formed rows, in one Spark job:
    ``boolean`` when every value is true/false, numeric when most values parse as numbers (the
    others are then rejected), ``long`` when every such number is written as a whole number
    without a decimal point or exponent, else ``double``; ``string`` otherwise."""
    given = {sanitize(k): v.lower() for k, v in (options.schema or {}).items()}
    forced = {sanitize(c) for c in options.categorical or ()}
    types: dict[str, str] = {}
    for name in names:
        if name in given:
            types[name] = NUMERIC_TYPES.get(given[name], "string")
        elif name in forced:
            types[name] = "string"
    todo = [n for n in names if n not in types]
    kinds = ["infer" if n in todo else types[n] for n in names]
    counter = counts_wide if len(names) <= WIDE_COLUMNS else counts_long
    per_column = counter(frame, names, kinds)
    empty: dict[str, Any] = {"rows": 0, "n": 0, "num": 0, "int": 0, "bool": 0, "bad": 0, "sample": None, "quoted": 0,
                             "escaped": 0}
    stats = {n: per_column.get(i, empty) for i, n in enumerate(names)}
    present = {n: int(stats[n]["n"] or 0) for n in names}
    for name in todo:
        types[name] = decide(present[name], int(stats[name]["num"] or 0), int(stats[name]["int"] or 0),
                              int(stats[name]["bool"] or 0))
    failures = {n: int(stats[n]["bad"] or 0) for n in names
                if types[n] != "string" and (n not in todo or types[n] != "boolean")}
    samples = {n: stats[n]["sample"] for n in failures if stats[n]["sample"] is not None}
    rows, bad_rows = per_column.get(-1, empty), per_column.get(-2, empty)
    escaped = sum(int(counts.get("escaped") or 0) for counts in per_column.values())
    return Inference(types, int(rows["rows"]) + int(bad_rows["rows"]), int(bad_rows["rows"]),
                      int(bad_rows["quoted"]), escaped, failures, samples, present)
