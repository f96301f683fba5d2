"""The typed pass: text to typed rows with each row's reason for rejection, its hash and its split, and what
those rows tell."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from hopsml.data.tables.inference import Inference, counts_long, counts_wide
from hopsml.data.tables.options import (
    CORRUPT,
    FIELDS,
    REASON,
    ROW_HASH,
    SPLIT,
    USABLE,
    WIDE_COLUMNS,
    TableOptions,
    sanitize,
)
from hopsml.data.tables.parsing import ESCAPED_QUOTE, decide, parse_sql, parse_strict, sql_name, sql_text

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame


@dataclass
class Read:
    """One reading of the CSV text: the rows typed and cached, and what the reading told."""

    parsed: DataFrame    # kept columns typed, CORRUPT, REASON, ROW_HASH, SPLIT (cached)
    rejected: DataFrame  # the rejected rows: REASON, CORRUPT, FIELDS (read again from the text)
    names: list[str]     # the kept columns: features and label
    all_names: list[str]   # every column, those left out too (a rejected row's FIELDS)
    label: str
    inference: Inference
    source_names: dict[str, str]
    left_out: dict[str, str]
    raw: DataFrame       # every field as text
    multiline: bool
    escape: str


def usable_sql(kept: Sequence[str], label: str, missing: str, types: Mapping[str, str]) -> str:
    """SQL condition of the typed rows to write: not rejected, with a label, and (missing='drop') with
    every feature, a NaN counting as missing there (as in Spark's dropna, which writing uses). For tables
    up to ``WIDE_COLUMNS`` columns."""
    features = [n for n in kept if n != label] if missing == "drop" else []
    return " AND ".join([f"{REASON} IS NULL", f"{sql_name(label)} IS NOT NULL",
                         *[f"{sql_name(n)} IS NOT NULL"
                           + (f" AND NOT isnan({sql_name(n)})" if types[n] == "double" else "") for n in features]])


def summarized_columns(kept: Sequence[str], label: str, types: Mapping[str, str]) -> list[str]:
    """The columns the statistics summarize as numbers: the numeric features, and a numeric label."""
    return [n for n in kept if n != label and types[n] != "string"] + ([label] if types[label] != "string" else [])


class Typing:
    """How the text of a table becomes typed rows, and what the typed rows tell of the types: one cached
    frame with each row's values, why it is rejected (if it is), its hash and its split."""

    def __init__(self, names: list[str], kept: list[str], options: TableOptions) -> None:
        self.names, self.kept, self.options = names, kept, options
        given = {sanitize(k) for k in options.schema or {}} | {sanitize(c) for c in options.categorical or ()}
        self.inferred = {n for n in names if n not in given}

    def parse(self, cleaned: DataFrame, types: Mapping[str, str], strict: bool = True
              ) -> tuple[DataFrame, DataFrame]:
        """The typed rows, cached (filled by the first job that reads them), and the rejected rows with
        their reasons and their fields as read (not cached). ``strict`` parses the
        inferred columns as their text is written (:func:`parse_strict`), so :meth:`check` sees
        every value that does not fit the guessed type."""
        from pyspark.sql import functions as F

        text = {n: f"_text_{i}" for i, n in enumerate(self.names)}   # each column's text, beside its value
        corrupt = sql_name(CORRUPT)
        values = [sql_name(n) if types[n] == "string" else
                  f"{parse_strict(n, types[n]) if strict and n in self.inferred else parse_sql(n, types[n])} "
                  f"AS {sql_name(n)}" for n in self.kept]
        both = cleaned.selectExpr(*[f"{sql_name(n)} AS {text[n]}" for n in self.names], *values, corrupt)
        # one flat CASE (a nested one per column overflows the planner's stack at 1,000 columns); the first
        # failing column names the reason. It reads the values computed below it: testing the parse again
        # inside the CASE made the whole pass take twice as long
        whens = [f"WHEN {corrupt} IS NOT NULL THEN 'malformed row (wrong number of fields)'"]
        for n in self.kept:
            if types[n] == "string":
                continue
            reason = sql_text(f"unparsable {'boolean' if types[n] == 'boolean' else 'number'} in column {n}")
            if types[n] == "long":   # a plain cast: only failed values get here (with parse's guard, the guard
                # was computed for every row's text, and the pass took twice as long)
                reason = (f"CASE WHEN try_cast({text[n]} AS double) IS NOT NULL THEN "
                          f"{sql_text(f'not a whole number in column {n}')} ELSE {reason} END")
            whens.append(f"WHEN {text[n]} IS NOT NULL AND {sql_name(n)} IS NULL THEN {reason}")
        left_out = [text[n] for n in self.names if n not in self.kept]
        if left_out:   # never true, but it makes the CSV reader parse the columns left out: with columns
            # pruned, it pads a row that has too few fields instead of flagging it
            whens.append(f"WHEN length(concat_ws('', {', '.join(left_out)})) < 0 THEN 'never'")
        reasoned = both.selectExpr("*", f"CASE {' '.join(whens)} END AS {REASON}")
        # a rejected row's fields as read: not cached with the rows (a column of them, even one no row
        # filled, made filling the cache twice as slow), read again from the text when there are any
        rejected = reasoned.where(f"{REASON} IS NOT NULL").selectExpr(
            REASON, corrupt, "array(" + ", ".join(text[n] for n in self.names) + f") AS {FIELDS}")
        typed = reasoned.selectExpr(*[sql_name(n) for n in self.kept], corrupt, REASON)
        # one hash of the row's values as read decides its split (its low digits) and its shard (its high
        # 32 bits, see _write_shards): the values are turned into text once
        hashed = typed.withColumn(ROW_HASH, row_hash_column(self.kept, self.options.seed))
        bucket = F.pmod(F.col(ROW_HASH), F.lit(1_000_000)) / F.lit(1_000_000.0)
        split = F.when(bucket < F.lit(self.options.test_fraction), "test").otherwise("train")
        return hashed.withColumn(SPLIT, split).cache(), rejected

    def check(self, parsed: DataFrame, rejected: DataFrame, types: Mapping[str, str]) -> Inference | None:
        """What the typed rows of ``parse(..., types)`` tell, in the job that fills the cache (and one
        over the rejected rows, if any): the rows read and malformed, per column the values present and
        failing, and per split the statistics' numeric aggregates of the rows to write (their job saved).
        None when every row's text gives an inferred column another type than ``types``."""
        from pyspark.sql import functions as F

        from hopsml.data import stats

        corrupt = sql_name(CORRUPT)
        well, escaped_quote = f"{corrupt} IS NULL", sql_text(ESCAPED_QUOTE)
        ok = f"{well} AND {REASON} IS NULL"
        escaped = " OR ".join([f"(NOT {well} AND instr({corrupt}, {escaped_quote}) > 0)",
                               *[f"({ok} AND instr({sql_name(n)}, {escaped_quote}) > 0)"
                                 for n in self.kept if types[n] == "string"]])
        parts = ["count(1) AS rows", f"count(CASE WHEN NOT {well} THEN 1 END) AS malformed",
                 f"count(CASE WHEN NOT {well} AND instr({corrupt}, '\"') > 0 THEN 1 END) AS quoted",
                 f"count(CASE WHEN {well} AND {REASON} IS NOT NULL THEN 1 END) AS failing",
                 f"count(CASE WHEN {escaped} THEN 1 END) AS escaped"]
        for i, n in enumerate(self.kept):
            parts.append(f"count(CASE WHEN {well if types[n] == 'string' else ok} THEN {sql_name(n)} END) AS n_{i}")
            if types[n] == "string" and n in self.inferred:
                parts += [f"count(CASE WHEN {well} THEN {parse_sql(n, 'double')} END) AS num_{i}",
                          f"count(CASE WHEN {well} AND lower({sql_name(n)}) IN ('true', 'false') THEN 1 END) "
                          f"AS bool_{i}"]
        # grouped by split and by whether the row is written: the counts add up over the groups, and the
        # statistics' numeric aggregates of the written rows come with them (a condition inside each
        # aggregate instead made the pass cost as much as the two jobs it joined)
        label = sanitize(self.options.label)
        numeric = summarized_columns(self.kept, label, types)
        aggregates = len(numeric) <= stats.WIDE_COLUMNS
        count_names = [part.rsplit(" AS ", 1)[1] for part in parts]
        if aggregates:
            parts += stats.numeric_aggregate_sql(numeric, prefix="stat_")
        usable = f"({usable_sql(self.kept, label, self.options.missing, types)}) AS {USABLE}"
        groups = (parsed.selectExpr(f"`{SPLIT}`", usable, *[f"`{c}`" for c in parsed.columns if c != SPLIT])
                  .groupBy(SPLIT, USABLE).agg(*[F.expr(part) for part in parts]).collect())
        row = {name: sum(int(group[name] or 0) for group in groups) for name in count_names}
        aggregated = [triple for group in groups if group[USABLE] for triple in stats.split_aggregates(
            group[SPLIT], group.asDict(), numeric, prefix="stat_")] if aggregates else None
        failing: dict[int, Any] = {}
        if row["failing"]:   # the rejected rows' text, counted as the inference counts it
            fields = rejected.where(well).selectExpr(
                *[f"{FIELDS}[{i}] AS {sql_name(n)}" for i, n in enumerate(self.names)],
                f"CAST(NULL AS string) AS {corrupt}")
            kinds = [types[n] if n in self.kept else "string" for n in self.names]
            failing = (counts_wide if len(self.names) <= WIDE_COLUMNS else counts_long)(fields, self.names, kinds)
        nothing = {"n": 0, "num": 0, "int": 0, "bool": 0, "bad": 0, "sample": None}
        present: dict[str, int] = {}
        failures: dict[str, int] = {}
        samples: dict[str, str] = {}
        for i, n in enumerate(self.kept):
            found, counts = int(row[f"n_{i}"]), failing.get(self.names.index(n)) or nothing
            kind = types[n]
            if kind == "string":
                present[n] = found
                if n in self.inferred and decide(found, row[f"num_{i}"], 0, row[f"bool_{i}"]) != "string":
                    return None
                continue
            present[n] = found + int(counts["n"] or 0)
            if n in self.inferred:   # the values that parsed are numbers (or booleans) as written
                numbers = int(counts["num"] or 0) + (found if kind != "boolean" else 0)
                whole = int(counts["int"] or 0) + (found if kind == "long" else 0)
                boolean = int(counts["bool"] or 0) + (found if kind == "boolean" else 0)
                if decide(present[n], numbers, whole, boolean) != kind:
                    return None
                if kind == "boolean":
                    continue
            failures[n] = int(counts["bad"] or 0)
            if counts["sample"] is not None:
                samples[n] = str(counts["sample"])
        escaped_failing = int((failing.get(-1) or {}).get("escaped") or 0)
        return Inference(dict(types), int(row["rows"]), int(row["malformed"]), int(row["quoted"]),
                          int(row["escaped"]) + escaped_failing, failures, samples, present, aggregated)


def row_hash_column(columns: Sequence[str], seed: int) -> Column:
    """A hash of a row's typed values: the same whatever the partitioning. Of the values themselves, not
    their text (turning every number into text took a quarter of the typed pass); a missing value adds
    nothing, so two rows that differ only in where a value is missing may share a split."""
    from pyspark.sql import functions as F

    return F.xxhash64(F.lit(seed), *[F.col(n) for n in columns])
