"""CSV tables -> a dataset: typed, cleaned, split, transformed, as plain Parquet and TFRecord shards.

Steps, all in Spark: read every field as text (PERMISSIVE, so a row with the wrong number of
fields is caught with its raw line), trim, turn ``na_values`` into missing, type the columns
(given, or inferred from the text as written: a column is ``long`` only when its numbers are
written without a decimal point or exponent, so pandas' ``127.0`` makes it ``double``; ``boolean``
when every value is true/false; numeric when most values parse), reject rows whose cells do not
parse as their column's type, split train/test by a hash of the row and the seed (reproducible,
independent of partitioning), apply the missing-value policy, fit the transform on the train
split only (category indices by frequency, means and standard deviations) and apply it to both
splits. Rejected rows are kept in ``_rejected`` with their reason; nothing is silently dropped:
``read = written + rejected + dropped``, where dropped counts rows removed by ``missing='drop'``
(or rows without a label).
"""

from __future__ import annotations

import json
import logging
import math
import pickle
import re
import time
import zlib
from contextlib import ExitStack, contextmanager, nullcontext
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from collections.abc import Iterator, Mapping, Sequence

import numpy as np

from hopsml import config
from hopsml.cluster import preflight
from hopsml.data import dataset as ds
from hopsml.data import shards as shard_io
from hopsml.data.manifest import Manifest
from hopsml.formats.example import encode_example, encode_examples
from hopsml.errors import SettingsError
from hopsml.fs import Storage
from hopsml.redact import redact_uri
from hopsml.progress import spark_progress

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa
    from pyspark.sql import Column, DataFrame, SparkSession

log = logging.getLogger(__name__)

SPLITS = ("train", "test")
MISSING_POLICIES = ("drop", "fill")
NUMERIC_TYPES = {"double": "double", "float": "double", "int": "long", "long": "long", "integer": "long",
                 "bool": "boolean", "boolean": "boolean"}
CATEGORICAL_TYPES = ("string", "category", "categorical", "str")
INTEGRAL_TYPES = ("long", "boolean")   # written as int64 (a boolean as 0/1)
# The texts pandas' read_csv takes for missing by default, and '?' (UCI's files): what pandas'
# to_csv, R's write.csv ("NA") and spreadsheets write for an empty cell.
DEFAULT_NA_VALUES = ("?", "nan", "NaN", "-nan", "-NaN", "NA", "N/A", "n/a", "NULL", "null", "None", "<NA>",
                     "#N/A", "#NA", "#N/A N/A", "-1.#IND", "-1.#QNAN", "1.#IND", "1.#QNAN")
_INTEGER_TEXT = r"^[+-]?[0-9]+$"   # a whole number as written: no decimal point, no exponent
_NUMBER_START = r"^([-+.0-9]|(?i)[+-]?(inf|nan))"   # what a number's text can begin with
_NUMBER_CODES = (43, 45, 46, *range(48, 58))   # + - . 0-9: the first character of most numbers
_WORD_CODES = (73, 78, 105, 110)   # I N i n: Infinity, NaN
_TRUE, _FALSE = ("true", "1"), ("false", "0")
_CORRUPT = "_corrupt_record"
_ESCAPED_QUOTE = '\\"'   # a quote escaped by a backslash, as Spark's CSV writer writes one
_WIDE_COLUMNS = 64   # up to this many columns the inference counts are one wide aggregate
SAMPLE_ROWS = 10_000   # the first rows, whose text the types are guessed from (then checked on every row)
_REASON = "_reason"   # why a row is rejected; NULL for a row that is not
_FIELDS = "_fields"   # a rejected row's fields as read
_SPLIT = "_split"
_SHARD = "_shard"
_ROW_HASH = "_row_hash"
_SAMPLED = "_sampled"   # the row is in the median sample
_USABLE = "_usable"     # the row is written (not rejected, nor dropped for a missing value)
_UNKNOWN = -1  # index of a category the train split never saw


def sanitize(name: str) -> str:
    """A column name that is a Python identifier (petastorm builds namedtuples from them).

    >>> sanitize("education-num"), sanitize(" hours per week "), sanitize("2nd")
    ('education_num', 'hours_per_week', 'c_2nd')
    """
    text = re.sub(r"\W+", "_", name.strip()).strip("_") or "column"
    return "c_" + text if text[0].isdigit() else text


@dataclass(frozen=True)
class TableOptions:
    """How a CSV becomes a dataset; validates itself."""

    label: str
    header: bool = True
    columns: tuple[str, ...] | None = None
    schema: Mapping[str, str] | None = None
    na_values: tuple[str, ...] = DEFAULT_NA_VALUES
    missing: str = "drop"
    categorical: tuple[str, ...] | None = None
    exclude: tuple[str, ...] | None = None
    one_hot: bool = False
    standardize: bool = False
    test_fraction: float = 0.2
    seed: int = 0
    shards: int | None = None
    delimiter: str = ","
    skip_rows: int = 0
    strict: bool = False
    overwrite: bool = False
    compression: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.missing not in MISSING_POLICIES:
            raise SettingsError(f"missing={self.missing!r}: use 'drop' (remove rows with a missing "
                                "value) or 'fill' (train mean / most frequent category)")
        if not 0.0 <= float(self.test_fraction) < 1.0:
            raise SettingsError(f"test_fraction={self.test_fraction!r} must be in [0, 1)")
        if isinstance(self.skip_rows, bool) or not isinstance(self.skip_rows, int) or self.skip_rows < 0:
            raise SettingsError(f"skip_rows={self.skip_rows!r} must be a whole number of lines, 0 or more")
        if self.shards is not None and int(self.shards) < 1:
            raise SettingsError(f"shards={self.shards!r} must be at least 1")
        for name, kind in (self.schema or {}).items():
            if kind.lower() not in NUMERIC_TYPES and kind.lower() not in CATEGORICAL_TYPES:
                raise SettingsError(f"schema type {kind!r} of column {name!r}: use one of "
                                    f"{', '.join(sorted(NUMERIC_TYPES))} or 'string'")


def _source(spark: SparkSession, src: str, options: TableOptions) -> Any:
    """What the CSV reader reads: the path, or with ``skip_rows`` the lines of every file after its
    first ``skip_rows`` (preamble lines before the header, as in scikit-learn's CSV files)."""
    if not options.skip_rows:
        return src
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    lines = spark.read.text(src).select(F.input_file_name().alias("file"),
                                        F.monotonically_increasing_id().alias("at"), "value")
    number = F.row_number().over(Window.partitionBy("file").orderBy("at"))
    kept = lines.withColumn("line", number).where(F.col("line") > F.lit(options.skip_rows))
    return kept.sortWithinPartitions("file", "at").select("value").rdd.map(lambda row: row[0])


def _column_names(spark: SparkSession, src: Any, options: TableOptions, multiline: bool = False,
                  escape: str = '"') -> list[str]:
    if options.columns:
        return list(options.columns)
    local = _local_file(src)
    if local is not None and options.header:
        return _header_of(local, options.delimiter, escape)
    probe = spark.read.csv(src, header=options.header, sep=options.delimiter, quote='"', escape=escape,
                           multiLine=multiline)
    return [name.strip().lstrip("\ufeff").strip() for name in probe.columns]


def _local_file(src: Any) -> str | None:
    """The path of ``src`` when it is one plain local file (not a folder, glob or URI), else None."""
    import os
    from urllib.parse import urlparse

    if not isinstance(src, str) or any(ch in src for ch in "*?[{"):
        return None
    scheme = urlparse(src).scheme
    path = urlparse(src).path if scheme == "file" else src if scheme == "" or len(scheme) == 1 else None
    return path if path is not None and os.path.isfile(os.path.expanduser(path)) else None


def _header_of(path: str, delimiter: str, escape: str) -> list[str]:
    """The column names of a local CSV file's header line, named as Spark's CSV reader names them (an empty
    name is ``_c<i>``, names that repeat, ignoring case, get their position appended), without a Spark job:
    at 500 rows that job was a tenth of the prepare.

    >>> import tempfile, os
    >>> path = os.path.join(tempfile.mkdtemp(), "t.csv")
    >>> _ = open(path, "w", encoding="utf-8-sig").write('"",a,"b, c",A\\n1,2,3,4\\n')
    >>> _header_of(path, ",", '"')
    ['_c0', 'a1', 'b, c', 'A3']
    """
    import csv
    import os

    with open(os.path.expanduser(path), encoding="utf-8-sig", newline="") as lines:
        if escape == '"':
            reader = csv.reader(lines, delimiter=delimiter, quotechar='"', doublequote=True)
        else:
            reader = csv.reader(lines, delimiter=delimiter, quotechar='"', doublequote=False, escapechar=escape)
        header = next(reader, [])
    names = [field.strip() or f"_c{i}" for i, field in enumerate(header)]
    seen: dict[str, int] = {}
    for name in names:
        seen[name.lower()] = seen.get(name.lower(), 0) + 1
    return [f"{name}{i}" if seen[name.lower()] > 1 and not name.startswith("_c") else name
            for i, name in enumerate(names)]


def field_names(raw_names: Sequence[str]) -> list[str]:
    """The dataset's field names of the header names: identifiers, a nameless column (R's row
    names, pandas' index) named by its position.

    >>> field_names(["", "sepal length (cm)", "od280/od315", "größe"])
    ['column_0', 'sepal_length_cm', 'od280_od315', 'größe']
    """
    return [sanitize(n) if n.strip() else f"column_{i}" for i, n in enumerate(raw_names)]


def _read_text(spark: SparkSession, src: Any, names: list[str], options: TableOptions,
               multiline: bool = False, escape: str = '"') -> DataFrame:
    """Every field as text. Quotes are doubled inside quoted fields (RFC 4180: pandas, Excel, R), or
    with ``escape='\\'`` escaped by a backslash (Spark's own CSV writer); ``multiline`` reads quoted
    fields that hold line breaks (each file then in one task)."""
    from pyspark.sql.types import StringType, StructField, StructType

    schema = StructType([StructField(n, StringType()) for n in names] + [StructField(_CORRUPT, StringType())])
    return spark.read.csv(src, schema=schema, header=options.header, sep=options.delimiter, quote='"',
                          escape=escape, multiLine=multiline, mode="PERMISSIVE", columnNameOfCorruptRecord=_CORRUPT,
                          ignoreLeadingWhiteSpace=True, ignoreTrailingWhiteSpace=True, nullValue=None,
                          enforceSchema=True)


def _parse(name: str, kind: str) -> Column:
    """Column ``name`` (trimmed text) as ``kind``: :func:`_parse_sql` as a Column."""
    from pyspark.sql import functions as F

    return F.expr(_parse_sql(name, kind))


def _parse_sql(name: str, kind: str) -> str:
    """Column ``name`` (trimmed text) as ``kind`` ('double', 'long' or 'boolean'), NULL where the text
    does not parse: a plain cast fails the whole job on Spark 4, whose ANSI mode is on by default.
    A ``long`` is read as its text says: ``127.0`` and ``1e3`` are the whole numbers 127 and 1000,
    ``127.5`` does not parse; a ``boolean`` is 1 for true/1 and 0 for false/0 (any case).

    Only text that can be a number reaches Spark's ``try_cast``: a cast that fails throws and catches an
    exception inside the JVM (about 5 us a cell here), so a category column cast as double, or pandas'
    ``127.0`` cast as long, cost more than the rest of the pass. The expressions are SQL text: built
    from Column objects, each part a call into the JVM, they took seconds of a prepare's driver time."""
    text = _sql_name(name)
    if kind == "boolean":
        return (f"CASE WHEN lower({text}) IN {_sql_tuple(_TRUE)} THEN 1L "
                f"WHEN lower({text}) IN {_sql_tuple(_FALSE)} THEN 0L END")
    number = f"CASE WHEN {_maybe_number_sql(text)} THEN try_cast({text} AS double) END"
    if kind == "long":
        return (f"CASE WHEN {text} RLIKE {_sql_text(_INTEGER_TEXT)} THEN try_cast({text} AS long) "
                f"WHEN ({number}) = floor({number}) AND abs({number}) < {2.0 ** 63!r}D "
                f"THEN cast(({number}) AS long) END")
    return number


def _maybe_number_sql(text: str) -> str:
    """False for text that cannot parse as a number: not starting with a digit, sign or point, and not one
    of the words Spark reads as a number (Infinity, NaN). The first character's code decides, and a
    pattern only for text starting with i or n: a pattern on every cell took a quarter of the typed pass."""
    return (f"(ascii({text}) IN {_sql_tuple(_NUMBER_CODES)} OR (ascii({text}) IN {_sql_tuple(_WORD_CODES)} "
            f"AND {text} RLIKE {_sql_text(_NUMBER_START)}))")


def _sql_name(name: str) -> str:
    """A column name quoted for SQL text."""
    return "`" + name.replace("`", "``") + "`"


def _sql_text(value: str) -> str:
    """A string literal for SQL text.

    >>> print(_sql_text("a'b\\\\c"))
    'a\\'b\\\\c'
    """
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _sql_tuple(values: Sequence[Any]) -> str:
    return "(" + ", ".join(_sql_text(v) if isinstance(v, str) else str(v) for v in values) + ")"


def _is_number(text: str) -> bool:
    """Whether a header name is a number (a preamble line's count, not a column's name).

    >>> _is_number("150"), _is_number("4.0"), _is_number("Weight"), _is_number("")
    (True, True, False, False)
    """
    try:
        float(text)
    except ValueError:
        return False
    return True


def _one_row(frame: DataFrame) -> Any:
    """The row of a global aggregate (which always has one)."""
    row = frame.first()
    if row is None:
        raise ds.DatasetError("Spark returned no row for a global aggregate; rerun the job")
    return row


@dataclass
class _Inference:
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


def _counts_long(frame: DataFrame, names: list[str], kinds: list[str]) -> dict[int, Any]:
    """Per column (by index; -1 the well-formed rows, -2 the malformed ones) the counts that type
    inference needs, from one (column, text) row per cell: an aggregate of a few functions whatever
    the number of columns (one function per column and check took minutes to generate code for at
    1,000 columns)."""
    from pyspark.sql import functions as F

    well_formed = F.col(_CORRUPT).isNull()
    marker = [F.struct(F.lit(-1).alias("c"), F.lit("").alias("k"), F.lit(None).cast("string").alias("t"))]
    # every column, a category too: the CSV reader flags a row with too few fields only when it
    # parses every field (with columns pruned it pads the row)
    cells = [F.struct(F.lit(i).alias("c"), F.lit(kind).alias("k"), F.col(n).alias("t"))
             for i, (n, kind) in enumerate(zip(names, kinds))]
    malformed = F.struct(F.lit(-2).alias("c"), F.lit("").alias("k"), F.col(_CORRUPT).alias("t"))
    long_form = frame.select(F.explode(F.when(well_formed, F.array(*marker, *cells))
                                       .otherwise(F.array(malformed))).alias("cell")).select("cell.c", "cell.k", "cell.t")
    text, kind = F.col("t"), F.col("k")
    number = _parse("t", "double")
    bad = text.isNotNull() & (
        F.when(kind.isin("infer", "double"), number.isNull())
        .when(kind == "long", _parse("t", "long").isNull())
        .when(kind == "boolean", _parse("t", "boolean").isNull())
        .otherwise(F.lit(False)))
    return {row["c"]: row.asDict() for row in long_form.groupBy("c").agg(
        F.count(F.lit(1)).alias("rows"), F.count(text).alias("n"), F.count(number).alias("num"),
        F.count(F.when(text.rlike(_INTEGER_TEXT) & _parse("t", "long").isNotNull(), F.lit(1))).alias("int"),
        F.count(F.when(F.lower(text).isin("true", "false"), F.lit(1))).alias("bool"),
        F.count(F.when(bad, F.lit(1))).alias("bad"),
        F.first(F.when(bad, text), ignorenulls=True).alias("sample"),
        F.count(F.when(text.contains('"'), F.lit(1))).alias("quoted"),
        F.count(F.when(text.contains(_ESCAPED_QUOTE), F.lit(1))).alias("escaped")).collect()}


def _counts_wide(frame: DataFrame, names: list[str], kinds: list[str]) -> dict[int, Any]:
    """The counts of :func:`_counts_long` as one global aggregate with a few functions per column:
    no row per cell to make and group (at 1M rows of 12 columns the long form took most of the
    read step). For tables up to ``_WIDE_COLUMNS`` columns, where the generated code stays small.
    Every column is referenced, so the CSV reader parses whole rows and flags malformed ones."""
    corrupt = _sql_name(_CORRUPT)
    well = f"{corrupt} IS NULL"
    every = "concat_ws(" + ", ".join(["'\\n'", *[_sql_name(n) for n in names]]) + ")"
    parts = [f"count(CASE WHEN {well} THEN 1 END) AS `rows_-1`",
             f"count(CASE WHEN NOT {well} THEN 1 END) AS `rows_-2`",
             f"count(CASE WHEN NOT {well} AND instr({corrupt}, '\"') > 0 THEN 1 END) AS `quoted_-2`",
             f"count(CASE WHEN instr(CASE WHEN {well} THEN {every} ELSE {corrupt} END, "
             f"{_sql_text(_ESCAPED_QUOTE)}) > 0 THEN 1 END) AS escaped"]
    for i, (name, kind) in enumerate(zip(names, kinds)):
        text = _sql_name(name)
        parts.append(f"count(CASE WHEN {well} THEN {text} END) AS n_{i}")
        if kind == "string":
            continue
        number = _parse_sql(name, "double")
        whole = f"{text} RLIKE {_sql_text(_INTEGER_TEXT)} AND ({_parse_sql(name, 'long')}) IS NOT NULL"
        parsed = number if kind == "infer" else _parse_sql(name, kind)
        bad = f"{well} AND {text} IS NOT NULL AND ({parsed}) IS NULL"
        parts += [f"count(CASE WHEN {well} THEN {number} END) AS num_{i}",
                  f"count(CASE WHEN {well} AND {whole} THEN 1 END) AS int_{i}",
                  f"count(CASE WHEN {well} AND lower({text}) IN ('true', 'false') THEN 1 END) AS bool_{i}",
                  f"count(CASE WHEN {bad} THEN 1 END) AS bad_{i}",
                  f"first(CASE WHEN {bad} THEN {text} END, true) AS sample_{i}"]
    row = _one_row(frame.selectExpr(*parts)).asDict()
    out: dict[int, Any] = {-1: {"rows": row["rows_-1"], "escaped": row["escaped"]},
                           -2: {"rows": row["rows_-2"], "quoted": row["quoted_-2"]}}
    for i in range(len(kinds)):
        out[i] = {key: row.get(f"{key}_{i}", 0) for key in ("n", "num", "int", "bool", "bad", "sample")}
        out[i]["rows"] = row["rows_-1"]
        out[i]["sample"] = row.get(f"sample_{i}")
    return out


def _infer_types(frame: DataFrame, names: list[str], options: TableOptions) -> _Inference:
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
    counter = _counts_wide if len(names) <= _WIDE_COLUMNS else _counts_long
    per_column = counter(frame, names, kinds)
    empty: dict[str, Any] = {"rows": 0, "n": 0, "num": 0, "int": 0, "bool": 0, "bad": 0, "sample": None, "quoted": 0,
                             "escaped": 0}
    stats = {n: per_column.get(i, empty) for i, n in enumerate(names)}
    present = {n: int(stats[n]["n"] or 0) for n in names}
    for name in todo:
        types[name] = _decide(present[name], int(stats[name]["num"] or 0), int(stats[name]["int"] or 0),
                              int(stats[name]["bool"] or 0))
    failures = {n: int(stats[n]["bad"] or 0) for n in names
                if types[n] != "string" and (n not in todo or types[n] != "boolean")}
    samples = {n: stats[n]["sample"] for n in failures if stats[n]["sample"] is not None}
    rows, bad_rows = per_column.get(-1, empty), per_column.get(-2, empty)
    escaped = sum(int(counts.get("escaped") or 0) for counts in per_column.values())
    return _Inference(types, int(rows["rows"]) + int(bad_rows["rows"]), int(bad_rows["rows"]),
                      int(bad_rows["quoted"]), escaped, failures, samples, present)


def _decide(present: int, numeric: int, whole: int, boolean: int) -> str:
    """A column's type from the counts of its values: ``boolean`` when every value is true/false,
    numeric when most values parse as numbers (the others are then rejected), ``long`` when every such
    number is written as a whole number without a decimal point or exponent, else ``double``."""
    if present and boolean == present:
        return "boolean"
    if present and numeric * 2 > present:
        return "long" if whole == numeric else "double"
    return "string"


def _parse_strict(name: str, kind: str) -> str:
    """Column ``name`` as ``kind`` (SQL text), NULL unless its text is written as that type: ``127.0`` is
    not a ``long`` and ``1`` not a ``boolean``. A type guessed from the first rows is checked so, on every row."""
    text = _sql_name(name)
    if kind == "long":
        return f"try_cast({text} AS long)"   # whole numbers as written: no point, no exponent
    if kind == "boolean":
        return f"CASE WHEN lower({text}) = 'true' THEN 1L WHEN lower({text}) = 'false' THEN 0L END"
    return _parse_sql(name, kind)


@dataclass
class _Read:
    """One reading of the CSV text: the rows typed and cached, and what the reading told."""

    parsed: DataFrame    # kept columns typed, _CORRUPT, _REASON, _ROW_HASH, _SPLIT (cached)
    rejected: DataFrame  # the rejected rows: _REASON, _CORRUPT, _FIELDS (read again from the text)
    names: list[str]     # the kept columns: features and label
    all_names: list[str]   # every column, those left out too (a rejected row's _FIELDS)
    label: str
    inference: _Inference
    source_names: dict[str, str]
    left_out: dict[str, str]
    raw: DataFrame       # every field as text
    multiline: bool
    escape: str


def _usable_sql(kept: Sequence[str], label: str, missing: str, types: Mapping[str, str]) -> str:
    """SQL condition of the typed rows to write: not rejected, with a label, and (missing='drop') with
    every feature, a NaN counting as missing there (as in Spark's dropna, which writing uses). For tables
    up to ``_WIDE_COLUMNS`` columns."""
    features = [n for n in kept if n != label] if missing == "drop" else []
    return " AND ".join([f"{_REASON} IS NULL", f"{_sql_name(label)} IS NOT NULL",
                         *[f"{_sql_name(n)} IS NOT NULL" + (f" AND NOT isnan({_sql_name(n)})" if types[n] == "double" else "")
                           for n in features]])


def _summarized(kept: Sequence[str], label: str, types: Mapping[str, str]) -> list[str]:
    """The columns the statistics summarize as numbers: the numeric features, and a numeric label."""
    return [n for n in kept if n != label and types[n] != "string"] + ([label] if types[label] != "string" else [])


class _Typing:
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
        inferred columns as their text is written (:func:`_parse_strict`), so :meth:`check` sees
        every value that does not fit the guessed type."""
        from pyspark.sql import functions as F

        text = {n: f"_text_{i}" for i, n in enumerate(self.names)}   # each column's text, beside its value
        corrupt = _sql_name(_CORRUPT)
        values = [_sql_name(n) if types[n] == "string" else
                  f"{_parse_strict(n, types[n]) if strict and n in self.inferred else _parse_sql(n, types[n])} "
                  f"AS {_sql_name(n)}" for n in self.kept]
        both = cleaned.selectExpr(*[f"{_sql_name(n)} AS {text[n]}" for n in self.names], *values, corrupt)
        # one flat CASE (a nested one per column overflows the planner's stack at 1,000 columns); the first
        # failing column names the reason. It reads the values computed below it: testing the parse again
        # inside the CASE made the whole pass take twice as long
        whens = [f"WHEN {corrupt} IS NOT NULL THEN 'malformed row (wrong number of fields)'"]
        for n in self.kept:
            if types[n] == "string":
                continue
            reason = _sql_text(f"unparsable {'boolean' if types[n] == 'boolean' else 'number'} in column {n}")
            if types[n] == "long":   # a plain cast: only failed values get here (with _parse's guard, the guard
                # was computed for every row's text, and the pass took twice as long)
                reason = (f"CASE WHEN try_cast({text[n]} AS double) IS NOT NULL THEN "
                          f"{_sql_text(f'not a whole number in column {n}')} ELSE {reason} END")
            whens.append(f"WHEN {text[n]} IS NOT NULL AND {_sql_name(n)} IS NULL THEN {reason}")
        left_out = [text[n] for n in self.names if n not in self.kept]
        if left_out:   # never true, but it makes the CSV reader parse the columns left out: with columns
            # pruned, it pads a row that has too few fields instead of flagging it
            whens.append(f"WHEN length(concat_ws('', {', '.join(left_out)})) < 0 THEN 'never'")
        reasoned = both.selectExpr("*", f"CASE {' '.join(whens)} END AS {_REASON}")
        # a rejected row's fields as read: not cached with the rows (a column of them, even one no row
        # filled, made filling the cache twice as slow), read again from the text when there are any
        rejected = reasoned.where(f"{_REASON} IS NOT NULL").selectExpr(
            _REASON, corrupt, "array(" + ", ".join(text[n] for n in self.names) + f") AS {_FIELDS}")
        typed = reasoned.selectExpr(*[_sql_name(n) for n in self.kept], corrupt, _REASON)
        # one hash of the row's values as read decides its split (its low digits) and its shard (its high
        # 32 bits, see _write_shards): the values are turned into text once
        hashed = typed.withColumn(_ROW_HASH, _row_hash(self.kept, self.options.seed))
        bucket = F.pmod(F.col(_ROW_HASH), F.lit(1_000_000)) / F.lit(1_000_000.0)
        split = F.when(bucket < F.lit(self.options.test_fraction), "test").otherwise("train")
        return hashed.withColumn(_SPLIT, split).cache(), rejected

    def check(self, parsed: DataFrame, rejected: DataFrame, types: Mapping[str, str]) -> _Inference | None:
        """What the typed rows of ``parse(..., types)`` tell, in the job that fills the cache (and one
        over the rejected rows, if any): the rows read and malformed, per column the values present and
        failing, and per split the statistics' numeric aggregates of the rows to write (their job saved).
        None when every row's text gives an inferred column another type than ``types``."""
        from pyspark.sql import functions as F

        from hopsml.data import stats

        corrupt = _sql_name(_CORRUPT)
        well, escaped_quote = f"{corrupt} IS NULL", _sql_text(_ESCAPED_QUOTE)
        ok = f"{well} AND {_REASON} IS NULL"
        escaped = " OR ".join([f"(NOT {well} AND instr({corrupt}, {escaped_quote}) > 0)",
                               *[f"({ok} AND instr({_sql_name(n)}, {escaped_quote}) > 0)"
                                 for n in self.kept if types[n] == "string"]])
        parts = ["count(1) AS rows", f"count(CASE WHEN NOT {well} THEN 1 END) AS malformed",
                 f"count(CASE WHEN NOT {well} AND instr({corrupt}, '\"') > 0 THEN 1 END) AS quoted",
                 f"count(CASE WHEN {well} AND {_REASON} IS NOT NULL THEN 1 END) AS failing",
                 f"count(CASE WHEN {escaped} THEN 1 END) AS escaped"]
        for i, n in enumerate(self.kept):
            parts.append(f"count(CASE WHEN {well if types[n] == 'string' else ok} THEN {_sql_name(n)} END) AS n_{i}")
            if types[n] == "string" and n in self.inferred:
                parts += [f"count(CASE WHEN {well} THEN {_parse_sql(n, 'double')} END) AS num_{i}",
                          f"count(CASE WHEN {well} AND lower({_sql_name(n)}) IN ('true', 'false') THEN 1 END) "
                          f"AS bool_{i}"]
        # grouped by split and by whether the row is written: the counts add up over the groups, and the
        # statistics' numeric aggregates of the written rows come with them (a condition inside each
        # aggregate instead made the pass cost as much as the two jobs it joined)
        label = sanitize(self.options.label)
        numeric = _summarized(self.kept, label, types)
        aggregates = len(numeric) <= stats.WIDE_COLUMNS
        count_names = [part.rsplit(" AS ", 1)[1] for part in parts]
        if aggregates:
            parts += stats.numeric_aggregate_sql(numeric, prefix="stat_")
        usable = f"({_usable_sql(self.kept, label, self.options.missing, types)}) AS {_USABLE}"
        groups = (parsed.selectExpr(f"`{_SPLIT}`", usable, *[f"`{c}`" for c in parsed.columns if c != _SPLIT])
                  .groupBy(_SPLIT, _USABLE).agg(*[F.expr(part) for part in parts]).collect())
        row = {name: sum(int(group[name] or 0) for group in groups) for name in count_names}
        aggregated = [triple for group in groups if group[_USABLE] for triple in stats.split_aggregates(
            group[_SPLIT], group.asDict(), numeric, prefix="stat_")] if aggregates else None
        failing: dict[int, Any] = {}
        if row["failing"]:   # the rejected rows' text, counted as the inference counts it
            fields = rejected.where(well).selectExpr(
                *[f"{_FIELDS}[{i}] AS {_sql_name(n)}" for i, n in enumerate(self.names)], f"CAST(NULL AS string) AS {corrupt}")
            kinds = [types[n] if n in self.kept else "string" for n in self.names]
            failing = (_counts_wide if len(self.names) <= _WIDE_COLUMNS else _counts_long)(fields, self.names, kinds)
        nothing = {"n": 0, "num": 0, "int": 0, "bool": 0, "bad": 0, "sample": None}
        present: dict[str, int] = {}
        failures: dict[str, int] = {}
        samples: dict[str, str] = {}
        for i, n in enumerate(self.kept):
            found, counts = int(row[f"n_{i}"]), failing.get(self.names.index(n)) or nothing
            kind = types[n]
            if kind == "string":
                present[n] = found
                if n in self.inferred and _decide(found, row[f"num_{i}"], 0, row[f"bool_{i}"]) != "string":
                    return None
                continue
            present[n] = found + int(counts["n"] or 0)
            if n in self.inferred:   # the values that parsed are numbers (or booleans) as written
                numbers = int(counts["num"] or 0) + (found if kind != "boolean" else 0)
                whole = int(counts["int"] or 0) + (found if kind == "long" else 0)
                boolean = int(counts["bool"] or 0) + (found if kind == "boolean" else 0)
                if _decide(present[n], numbers, whole, boolean) != kind:
                    return None
                if kind == "boolean":
                    continue
            failures[n] = int(counts["bad"] or 0)
            if counts["sample"] is not None:
                samples[n] = str(counts["sample"])
        escaped_failing = int((failing.get(-1) or {}).get("escaped") or 0)
        return _Inference(dict(types), int(row["rows"]), int(row["malformed"]), int(row["quoted"]),
                          int(row["escaped"]) + escaped_failing, failures, samples, present, aggregated)


def prepare_table(src: str, dataset: str, *, label: str, header: bool = True,
                  columns: Sequence[str] | None = None, schema: Mapping[str, str] | None = None,
                  na_values: Sequence[str] = DEFAULT_NA_VALUES, missing: str = "drop",
                  categorical: Sequence[str] | None = None, exclude: Sequence[str] | None = None,
                  one_hot: bool = False, standardize: bool = False, test_fraction: float = 0.2, seed: int = 0,
                  shards: int | None = None, delimiter: str = ",", skip_rows: int = 0,
                  strict: bool = False, overwrite: bool = False,
                  compression: str | None = None, spark: SparkSession | None = None,
                  settings: config.Settings | None = None) -> ds.DatasetSummary:
    """Turn the CSV file(s) ``src`` into the dataset ``dataset`` with train and test splits.

    Writes parquet/<split>/ (plain Parquet: one column per feature, a ``features`` float32 vector
    and ``label``), tfrecord/<split>/part-*.tfrecord (tf.train.Example with the same names),
    transform.json (the fitted transform, for serving), labels.json (a categorical label's
    classes), _rejected/ (malformed rows with their reason), stats.json and stats.html (of the
    rows as written, before the transform). ``skip_rows`` drops lines before the header of each
    file; ``strict`` fails instead of rejecting rows. A table whose every row is rejected fails.
    ``exclude`` names columns that are not features (ids, free text); a column without a name in the
    header (R's row names, a pandas index written with the frame) is left out too, unless it is the label.
    """
    from hopsml import session

    options = TableOptions(label=label, header=header, columns=tuple(columns) if columns else None,
                           schema=dict(schema) if schema else None, na_values=tuple(na_values),
                           missing=missing, categorical=tuple(categorical) if categorical else None,
                           exclude=tuple(exclude) if exclude else None, one_hot=one_hot, standardize=standardize, test_fraction=float(test_fraction),
                           seed=int(seed), shards=shards, delimiter=delimiter, skip_rows=skip_rows,
                           strict=strict, overwrite=overwrite, compression=compression)
    settings = settings or config.load()
    storage = Storage(settings.root)
    ds.check_writable(storage, settings.project, dataset, options.overwrite)  # before Spark starts
    _check_source(src)
    spark = spark or session.get_or_create(settings)
    session.check_session(settings, spark)  # also for a session passed in
    started = time.perf_counter()
    job = _TableJob(spark, storage, settings, src, dataset, options)
    with _collected(), ds.staged(storage, settings.project, dataset, options.overwrite) as stage, \
            spark_progress(spark.sparkContext, f"prepare table '{dataset}'", steps=_TableJob.STEPS) as progress:
        job.progress = progress
        with _prepare_conf(spark):
            summary = job.run(stage)
        del job   # its DataFrames go before the collection
        summary.seconds = time.perf_counter() - started
        summary.uri = storage.uri(ds.DatasetDir.of(settings.project, dataset).path)
        manifest = Manifest.read(storage, stage.manifest)
        manifest.seconds = round(summary.seconds, 3)
        manifest.write(storage, stage.manifest)
    log.info("%s", summary)
    return summary


# Session settings for the duration of a prepare, restored after it: Spark's cache of the typed rows
# without its compression, which made filling it take half again as long (the numbers of a table hardly
# compress); Arrow batches of 100,000 rows to the shard writers, not 10,000 (a batch's fixed costs in the
# writer, and one Parquet row group per batch)
_PREPARE_CONF = {"spark.sql.inMemoryColumnarStorage.compressed": "false",
                 "spark.sql.execution.arrow.maxRecordsPerBatch": "100000",
                 # whole-stage code of a method over HotSpot's 8000 bytes is never JIT-compiled, and the check
                 # pass of a few dozen columns made one that Janino compiled into a class the JVM refused
                 # (VerifyError, 34 float and 2 whole-number columns): such plans run as separate operators
                 "spark.sql.codegen.hugeMethodLimit": "8000"}


@contextmanager
def _collected() -> Iterator[None]:
    """A full garbage collection of Python's objects after the prepare: py4j's handles of the JVM's
    DataFrames sit in reference cycles, which only the cyclic collector frees, and until it does the JVM
    keeps each DataFrame's plans (a 31-column prepare's were 20 MiB). A driver that prepared tables in a
    row held them for a dozen prepares, until Python happened to collect."""
    import gc

    try:
        yield
    finally:
        gc.collect()


@contextmanager
def _prepare_conf(spark: SparkSession) -> Iterator[None]:
    before = {key: spark.conf.get(key, None) for key in _PREPARE_CONF}
    for key, value in _PREPARE_CONF.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key, old in before.items():
            if old is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, old)


def _check_source(src: str) -> None:
    """A local path that does not exist fails here, before Spark starts (a URI is left to Spark)."""
    import os
    from urllib.parse import urlparse

    scheme = urlparse(src).scheme
    if scheme in ("", "file") and len(scheme) != 1:  # not a Windows drive letter
        path = urlparse(src).path if scheme == "file" else src
        if not any(ch in path for ch in "*?[{") and not os.path.exists(os.path.expanduser(path)):
            raise ds.DatasetError(f"{redact_uri(src)!r} does not exist; give a CSV file or a folder of CSV files")


_HINT = ("if the file has no header line, pass --no-header --columns name1,name2,... (header=False, "
         "columns=[...]); if lines come before the header (scikit-learn's CSV files start with one), pass "
         "--skip-rows N (skip_rows=N); check --delimiter (delimiter=) too")


class _TableJob:
    """The steps of :func:`prepare_table`, sharing the parsed input between them."""

    STEPS = 6   # read, reject, statistics, fit, write, finish: the progress display's fixed total

    def __init__(self, spark: SparkSession, storage: Storage, settings: config.Settings, src: str,
                 name: str, options: TableOptions) -> None:
        self.spark, self.storage, self.settings = spark, storage, settings
        self.src, self.name, self.options = src, name, options
        self.progress: Any = None
        self.source_names: dict[str, str] = {}
        self.left_out: dict[str, str] = {}    # field name -> why it is not a feature
        # the Python tasks (the writers) check their executor's stack before they run
        self.checks = preflight.Preflight(preflight.driver_stack() if settings.check_versions else None, {})

    def _step(self, name: str) -> None:
        if self.progress is not None:
            self.progress.step(name)

    def run(self, stage: ds.DatasetDir) -> ds.DatasetSummary:
        try:
            return self._run(stage)
        except Exception as exc:  # an executor with another stack is named; anything else goes on up
            sc = self.spark.sparkContext
            preflight.explain_failure(sc, exc, self.checks, sc.defaultParallelism)
            raise

    def _run(self, stage: ds.DatasetDir) -> ds.DatasetSummary:
        from hopsml.data import stats as stats_mod

        self._step("read")
        source = _source(self.spark, self.src, self.options)
        read = self._read(source, multiline=False)
        try:
            read = self._reread(source, read)
            self._adopt(read)
            if read.inference.read == 0:
                raise ds.DatasetError(f"{redact_uri(self.src)!r} has no data rows; check the path and header=")
            self._check_given_types(read.names, read.inference)
            return self._run_typed(stage, read, stats_mod)
        finally:
            read.parsed.unpersist()

    def _reread(self, source: Any, read: _Read) -> _Read:
        """``read``, or a reading of the text with other options that leaves fewer rows malformed: each file
        whole (quoted fields that hold line breaks), quotes escaped by a backslash (Spark's CSV writer), a
        first field that the header does not name (R's write.table)."""
        opts = self.options

        def better(other: _Read | None, keep: bool, why: str) -> _Read:
            if other is None:
                return read
            if not keep:
                other.parsed.unpersist()
                return read
            read.parsed.unpersist()
            log.info("%s: %s", redact_uri(self.src), why)
            return other

        if read.inference.malformed_quoted and isinstance(source, str):
            # a quoted field holds a line break (or a row its quote): read each file whole instead
            multi = self._read(source, multiline=True)
            read = better(multi, multi.inference.malformed < read.inference.malformed,
                          "quoted fields span lines; read each file whole")
        if read.inference.escaped and isinstance(source, str):
            # Spark's CSV writer escapes a quote inside a field with a backslash, not by doubling it
            again = self._read(source, read.multiline, escape="\\")
            read = better(again, again.inference.escaped < read.inference.escaped
                          and again.inference.malformed <= read.inference.malformed,
                          "quotes inside fields are escaped with a backslash; read so")
        inference = read.inference
        if (inference.read and inference.malformed == inference.read and opts.header and not opts.columns
                and not any(_is_number(raw) for raw in read.source_names.values())):
            # R's write.table: the header is one name short of every row, whose first field is its row name
            # (pandas reads that column as the index). A "header" of numbers is a preamble line instead, as
            # scikit-learn's CSV files start with one: that stays an error whose hint names --skip-rows
            try:
                named: _Read | None = self._read(source, read.multiline, read.escape, row_names=True)
            except ds.DatasetError:   # e.g. no feature column would be left: the rows stay rejected
                named = None
            read = better(named, named is not None and named.inference.malformed < inference.malformed,
                          "the header is one name short of the rows: their first field is a row name, left out")
        return read

    def _adopt(self, read: _Read) -> None:
        self.source_names, self.left_out, self._raw = read.source_names, read.left_out, read.raw

    def _read(self, source: Any, multiline: bool, escape: str = '"', row_names: bool = False) -> _Read:
        """The table typed, cached (every later step reads it), with its names and what the reading
        told (:class:`_Inference`). With ``row_names`` every row starts with a field the header does
        not name (left out as a nameless column).

        The types are inferred from the first ``SAMPLE_ROWS`` rows, then checked on every row in the
        pass that fills the cache: a column that the rest of the table types otherwise is typed again
        from all of its text, so the types are those that every row gives, without a pass of their own."""

        opts = self.options
        raw_names = _column_names(self.spark, source, opts, multiline, escape)
        if row_names:
            raw_names = ["_c0", *[name if name != f"_c{i}" else f"_c{i + 1}" for i, name in enumerate(raw_names)]]
        names = field_names(raw_names)
        if len(set(names)) != len(names):
            raise ds.DatasetError(f"columns {raw_names} are not distinct once made identifiers "
                                  f"({names}); give distinct names with columns=[...]")
        label = sanitize(opts.label)
        if label not in names:
            raise ds.DatasetError(f"label column {opts.label!r} is not among the columns {raw_names}; "
                                  "pass label= one of them (or columns=[...] for a file without header)")
        raw = _read_text(self.spark, source, names, opts, multiline, escape)
        left_out = self._left_out(names, raw_names, label)
        na = sorted({v.strip() for v in opts.na_values} | {""})
        quoted = [_sql_name(n) for n in names]
        trimmed = raw.selectExpr(*[f"trim({n}) AS {n}" for n in quoted], _sql_name(_CORRUPT))   # trimmed once
        cleaned = trimmed.selectExpr(*[f"CASE WHEN {n} IN {_sql_tuple(na)} THEN NULL ELSE {n} END AS {n}"
                                       for n in quoted], _sql_name(_CORRUPT))
        kept = [n for n in names if n not in left_out]
        table = _Typing(names, kept, opts)
        inference = None
        if len(names) <= _WIDE_COLUMNS:
            guess = _infer_types(cleaned.limit(SAMPLE_ROWS), names, opts).types
            parsed, rejected = table.parse(cleaned, guess)
            inference = table.check(parsed, rejected, guess)
            if inference is None:   # the first rows misled
                parsed.unpersist()
        if inference is None:   # the types of every row's text, from a pass of its own (also when a typed
            # pass checking 1,000 columns would cost more than it saves)
            inference = _infer_types(cleaned, names, opts)
            parsed, rejected = table.parse(cleaned, inference.types, strict=False)
        for name in left_out:
            inference.failures.pop(name, None)
        return _Read(parsed, rejected, kept, names, label, inference, dict(zip(names, raw_names)), left_out, raw, multiline,
                     escape)

    def _left_out(self, names: list[str], raw_names: list[str], label: str) -> dict[str, str]:
        """The columns that are not features, and why: those named in exclude=, and those the header
        gives no name (Spark calls the i-th `_c<i>`): R's row names, a pandas index, row numbers that
        a model must not learn from."""
        opts = self.options
        wanted = {sanitize(e): e for e in opts.exclude or ()}
        unknown = [e for n, e in wanted.items() if n not in names]
        if unknown:
            raise ds.DatasetError(f"exclude= names {unknown}, which are not among the columns {raw_names}")
        if label in wanted:
            raise ds.DatasetError(f"exclude= names the label column {opts.label!r}; leave it out of exclude=")
        left = {n: "excluded" for n in wanted}
        if opts.header and not opts.columns:
            left.update({n: f"the header gives column {i + 1} no name: row names or an index" for i, (n, raw) in
                         enumerate(zip(names, raw_names)) if raw == f"_c{i}" and n != label and n not in left})
        if left and len(left) >= len(names) - 1:
            raise ds.DatasetError(f"no feature column is left once {sorted(left)} are left out; "
                                  "name fewer columns in exclude=")
        return left

    def _described(self, name: str, kind: str | None = None) -> str:
        source = self.source_names.get(name, name)
        text = repr(source) if source == name else f"{source!r} (field {name!r})"
        return f"column {text}" + (f" of type {kind}" if kind else "")

    def _check_given_types(self, names: list[str], inference: _Inference) -> None:
        """A column given a type by schema= whose values mostly do not parse as it fails here, with
        one of the values, before any row is rejected or dropped: the type is wrong, not the rows."""
        given = {sanitize(k) for k in self.options.schema or {}}
        for name in names:
            bad, present = inference.failures.get(name, 0), inference.present.get(name, 0)
            if name in given and bad and bad * 2 >= present:
                raise ds.DatasetError(
                    f"{bad} of the {present} values of {self._described(name, inference.types[name])} "
                    f"(given by schema=) do not parse as {inference.types[name]}, e.g. "
                    f"{inference.samples.get(name)!r}; give the column another type in schema= "
                    "(or 'string' for categories), or fix the values")

    def _first_rejected(self, stage: ds.DatasetDir, limit: int = 3) -> str:
        lines: list[str] = []
        for rel in sorted(self.storage.ls(stage.rejected)):
            for line in self.storage.read_text(rel).splitlines():
                row = json.loads(line)
                lines.append(f"  {row.get('line') or row.get('fields')!s}: {row.get('reason')}")
                if len(lines) >= limit:
                    return "\n".join(lines)
        return "\n".join(lines)

    def _worst_column(self, inference: _Inference) -> str:
        """The column whose values failed to parse most often, with one of them and its type."""
        if not any(inference.failures.values()):
            return ""
        name = max(inference.failures, key=lambda n: inference.failures[n])
        kind = inference.types[name]
        return (f"{inference.failures[name]} values of {self._described(name, kind)} do not parse as "
                f"{kind}, e.g. {inference.samples.get(name)!r}. ")

    def _run_typed(self, stage: ds.DatasetDir, read: _Read, stats_mod: Any) -> ds.DatasetSummary:
        from pyspark.sql import functions as F

        opts = self.options
        names, label, inference, parsed = read.names, read.label, read.inference, read.parsed
        self._step("reject malformed rows")
        self.storage.makedirs(stage.rejected)
        rejected_reasons: dict[str, int] = {}
        if inference.malformed or any(inference.failures.values()):   # else no row is rejected: no pass
            fields = "to_json(named_struct(" + ", ".join(f"{_sql_text(n)}, {_FIELDS}[{i}]" for i, n in
                                                         enumerate(read.all_names)) + "))"
            for row in (read.rejected.selectExpr(f"{_REASON} AS reason", f"{_sql_name(_CORRUPT)} AS line", f"{fields} AS fields")
                        .repartition(1).mapInPandas(preflight.guard(_JsonLinesWriter(self.storage, stage.rejected),
                                                                    self.checks), "reason string, rows long")
                        .collect()):
                rejected_reasons[row["reason"]] = rejected_reasons.get(row["reason"], 0) + row["rows"]
        total_rejected = sum(rejected_reasons.values())
        if total_rejected == inference.read:
            raise ds.RejectedInputError(
                f"all {inference.read} rows of {redact_uri(self.src)!r} were rejected, so dataset {self.name!r} "
                f"was not written. {self._worst_column(inference)}The columns were taken to be {names}; the first "
                f"rejected rows:\n{self._first_rejected(stage)}\n{_HINT}")
        if opts.strict and total_rejected:
            raise ds.RejectedInputError(
                f"{total_rejected} of {inference.read} rows were rejected and strict=True, so dataset {self.name!r} "
                f"was not written; {self._worst_column(inference)}The first:\n{self._first_rejected(stage)}\n"
                "Fix these rows, or run without --strict to keep them in _rejected")

        typed = parsed.where(F.col(_REASON).isNull())
        usable = typed.where(F.col(label).isNotNull())   # the rows as written (before missing values are filled):
        features = [n for n in names if n != label]      # those of _usable_sql (whose chain of 1,000 ANDs
        if opts.missing == "drop" and features:          # overflows the planner's stack)
            usable = usable.dropna(subset=features)
        return self._write(stage, usable.select(*names, _SPLIT, _ROW_HASH), names, label, inference,
                           rejected_reasons, stats_mod, kept=typed)

    def _emptied(self, kept: DataFrame, names: list[str], label: str, types: dict[str, str]) -> str:
        """Which column emptied the most rows (missing in them), and a text of it taken as missing:
        asked only when no row is left, so that the error can name it."""
        from pyspark.sql import functions as F

        counted = [label] + ([n for n in names if n != label] if self.options.missing == "drop" else [])
        row = _one_row(kept.agg(F.count(F.lit(1)).alias("__rows"),
                       *[F.count(F.when(F.col(n).isNull(), F.lit(1))).alias(n) for n in counted]))
        name = max(counted, key=lambda n: row[n] or 0)
        if not row[name]:
            return ""
        na = sorted({v.strip() for v in self.options.na_values} | {""})
        raw = F.trim(F.col(name))
        sample = self._raw.where(F.col(_CORRUPT).isNull() & (raw.isNull() | raw.isin(na))).select(
            F.coalesce(raw, F.lit("")).alias("v")).first()
        shown = f", e.g. the text {sample['v']!r}" if sample is not None else ""
        return (f"{self._described(name, types[name])} is missing in {row[name]} of {row['__rows']} rows"
                f"{shown} (empty or one of na_values). ")

    def _fit(self, aggregates: dict[str, dict[str, Any]], value_counts: dict[tuple[str, str], dict[str, int]],
             numeric: list[str], indexed: list[str], types: dict[str, str]
             ) -> tuple[dict[str, float], dict[str, float], dict[str, Any], dict[str, list[str]]]:
        """Means, standard deviations (of the filled values under missing='fill'), fill values and
        category lists of the train split, from what the statistics collected: no pass of its own."""
        opts = self.options
        train = aggregates.get("train", {})
        means: dict[str, float] = {}
        stds: dict[str, float] = {}
        fills: dict[str, Any] = {}
        for n in numeric:
            mean = train.get(f"{n}__mean")
            means[n] = float(mean) if mean is not None else 0.0
        if opts.missing == "fill":
            fills = {n: means[n] for n in numeric}
        total = int(train.get("__rows") or 0)
        for n in numeric:   # as an imputer followed by a scaler: spread of the (filled) train split
            present = int(train.get(f"{n}__count") or 0)
            sample_std = train.get(f"{n}__std")
            sample_std = float(sample_std) if sample_std is not None and math.isfinite(sample_std) else 0.0
            squares = sample_std ** 2 * (present - 1) if present > 1 else 0.0
            fill = fills.get(n)
            if fill is not None and types[n] in INTEGRAL_TYPES:
                fill = float(int(round(fill)))
            missing = total - present if fill is not None else 0
            if present + missing == 0:
                stds[n] = 1.0
                continue
            centre = (present * means[n] + missing * (fill or 0.0)) / (present + missing)
            squares += present * (means[n] - centre) ** 2 + missing * ((fill or 0.0) - centre) ** 2
            std = math.sqrt(max(squares, 0.0) / (present + missing))
            stds[n] = std if std > 1e-12 * max(1.0, abs(means[n])) else 1.0
        categories = {n: [v for v, _ in sorted(value_counts.get(("train", n), {}).items(),
                                               key=lambda kv: (-kv[1], kv[0]))] for n in indexed}
        return means, stds, fills, categories

    def _write(self, stage: ds.DatasetDir, usable: DataFrame, names: list[str], label: str,
               inference: _Inference, rejected_reasons: dict[str, int], stats_mod: Any,
               kept: DataFrame) -> ds.DatasetSummary:
        opts = self.options
        types, read = inference.types, inference.read
        features = [n for n in names if n != label]
        numeric = [n for n in features if types[n] != "string"]
        categorical = [n for n in features if types[n] == "string"]
        label_numeric = types[label] != "string"

        self._step("statistics")
        summarized = _summarized(names, label, types)
        stats, aggregates, value_counts = stats_mod.table_stats_and_counts(   # the rest: by the writers
            usable, _SPLIT, SPLITS, summarized, categorical + ([] if label_numeric else [label]),
            aggregated=inference.aggregated)
        stats["rejected"] = rejected_reasons
        stats["types"] = types
        for column in stats["columns"]:   # the header's own words, beside the field name
            column["source_name"] = self.source_names.get(column["name"], column["name"])
        counts = {split_name: int(stats["rows"].get(split_name, 0)) for split_name in SPLITS}
        written = sum(counts.values())
        if written == 0:
            raise ds.DatasetError(f"none of the {read} rows of {redact_uri(self.src)!r} is left to write: every "
                                  "row without a label or (with missing='drop') with a missing value was dropped. "
                                  f"{self._emptied(kept, names, label, types)}Pass missing='fill' (--missing "
                                  "fill), or check na_values and the label column")

        self._step("fit the transform")
        indexed = categorical + ([] if label_numeric else [label])
        means, stds, fills, categories = self._fit(aggregates, value_counts, numeric, indexed, types)
        if opts.missing == "fill":
            fills.update({n: categories[n][0] for n in categorical if categories[n]})

        # the transform's outputs; the shard writers apply it to the typed rows (see _Transform)
        feature_names: list[str] = []
        fields: dict[str, dict[str, Any]] = {}
        for n in features:
            if n in numeric:
                feature_names.append(n)
                fields[n] = {"dtype": "float64", "shape": []}
            elif opts.one_hot:
                for i, _ in enumerate(categories[n]):
                    feature_names.append(f"{n}_{i}")
                    fields[f"{n}_{i}"] = {"dtype": "float32", "shape": []}
            else:
                feature_names.append(n)
                fields[n] = {"dtype": "int32", "shape": []}
        label_kind = ("long" if types[label] in INTEGRAL_TYPES else "double") if label_numeric else "index"
        fields["label"] = {"dtype": {"long": "int64", "double": "float64", "index": "int32"}[label_kind], "shape": []}
        fields["features"] = {"dtype": "float32", "shape": [len(feature_names)]}
        for name, spec in fields.items():
            spec["tfrecord"] = name
        transform_rows = _Transform(
            features=features, label=label, label_kind=label_kind, one_hot=opts.one_hot,
            scale={n: ((means[n], stds[n]) if opts.standardize else None) for n in numeric},
            categories={n: categories[n] for n in indexed}, dtypes={n: spec["dtype"] for n, spec in fields.items()},
            fills={n: (int(round(v)) if types[n] in INTEGRAL_TYPES else v) for n, v in fills.items()})
        edges = {column["name"]: next((entry["histogram"]["edges"] for entry in column["splits"].values()
                                       if "histogram" in entry), None)
                 for column in stats["columns"] if column["name"] in summarized}

        self._step("write shards")
        splits_meta, shard_count, sketches = self._write_shards(
            stage, usable, counts, transform_rows, edges, stats_mod.median_fraction(written, len(summarized)))
        stats_mod.add_sketches(stats, sketches)
        shard_count = max(shard_count, 0)
        rejected = sum(rejected_reasons.values())
        dropped = read - written - rejected
        self._step("finish")
        transform = {"label": {"column": label, "source_name": opts.label, "type": types[label],
                               "classes": None if label_numeric else categories[label]},
                     "columns": [{"name": n, "type": types[n], "source_name": self.source_names.get(n, n)}
                                 for n in names],
                     "numeric": {n: {"mean": means[n], "std": stds[n], "standardized": opts.standardize}
                                 for n in numeric},
                     "categorical": {n: {"categories": categories[n], "unknown_index": _UNKNOWN,
                                         "one_hot": opts.one_hot} for n in categorical},
                     "missing": {"policy": opts.missing, "fill": fills, "na_values": list(opts.na_values)},
                     "features": feature_names, "left_out": self._left_out_sources()}
        self.storage.write_json(stage.transform, transform)
        if not label_numeric:
            self.storage.write_json(stage.labels, {"labels": categories[label]})
        self.storage.write_json(stage.stats_json, stats)
        self.storage.write_text(stage.stats_html, stats_mod.render_html(stats, title=self.name))
        Manifest(
            kind="table", name=self.name, source=redact_uri(self.src),
            options={k: v for k, v in opts.__dict__.items() if k != "extra"},
            fields=fields, default_fields=["features", "label"], label_field="label",
            labels=None if label_numeric else categories[label], splits=splits_meta,
            counts={"read": read, "written": written, "rejected": rejected, "dropped": dropped},
            rejected_reasons=rejected_reasons).write(self.storage, stage.manifest)
        return ds.DatasetSummary(name=self.name, kind="table", uri="", read=read, written=written,
                                 rejected=rejected, dropped=dropped, splits=counts, shards=shard_count,
                                 rejected_reasons=rejected_reasons, left_out=self._left_out_sources())

    def _left_out_sources(self) -> dict[str, str]:
        """The columns left out by their header text (none for a nameless one, which Spark calls _c<i>)."""
        return {"" if why.startswith("the header gives") else self.source_names.get(n, n): why
                for n, why in self.left_out.items()}

    def _write_shards(self, stage: ds.DatasetDir, usable: DataFrame, counts: dict[str, int],
                      transform: _Transform, edges: Mapping[str, list[float] | None], sampled: float
                      ) -> tuple[dict[str, Any], int, dict[tuple[str, str], Any]]:
        """Both splits' Parquet files and TFRecord shards in one Spark job: each row gets its split's
        shard number (a hash of the row), and each task transforms and writes the shards whose rows it
        holds, sketching the numeric columns on the way (:class:`~hopsml.data.stats.NumericSketch`: their
        histograms over ``edges``, distinct values and the ``sampled`` share of rows for the medians). The
        typed rows cross the shuffle, not the transformed ones and their feature vector."""
        from pyspark.sql import functions as F

        from hopsml.data import stats

        wanted_default = self.options.shards or max(self.settings.num_workers,
                                                    self.spark.sparkContext.defaultParallelism)
        wanted = {s: max(1, min(wanted_default, rows)) for s, rows in counts.items() if rows}
        row_hash = F.shiftright(F.col(_ROW_HASH), 32)   # bits the split (the hash's low digits) does not decide
        shard = F.lit(0)
        for split_name, count in wanted.items():
            shard = F.when(F.col(_SPLIT) == split_name, F.pmod(row_hash, F.lit(count))).otherwise(shard)
        # the median sample: rows by bits of their hash that neither the split nor the shard reads
        in_sample = (F.lit(True) if sampled >= 1.0 else
                     F.pmod(F.shiftright(F.col(_ROW_HASH), 12), F.lit(1 << 20)) < F.lit(int(sampled * (1 << 20))))
        keyed = usable.select(*transform.inputs(), F.col(_SPLIT), shard.cast("int").alias(_SHARD),
                              in_sample.alias(_SAMPLED))
        writer = _TableShardWriter(self.storage, stage, wanted, self.options.compression, transform, edges,
                                   stats.values_kept(len(edges)))
        for split_name in wanted:
            self.storage.makedirs(stage.parquet(split_name))
        shipped: dict[str, int] = {}
        sketches: dict[tuple[str, str], Any] = {}
        for row in (keyed.repartition(sum(wanted.values()), _SPLIT, _SHARD)
                    .mapInArrow(preflight.guard(writer, self.checks), "split string, rows long, sketches binary")
                    .collect()):
            shipped[row["split"]] = shipped.get(row["split"], 0) + row["rows"]
            for column, sketch in pickle.loads(zlib.decompress(row["sketches"])).items():
                if (row["split"], column) in sketches:
                    sketches[(row["split"], column)].merge(sketch)
                else:
                    sketches[(row["split"], column)] = sketch
        splits_meta = {}
        for split_name, count in wanted.items():
            if shipped.get(split_name, 0) != counts[split_name]:
                raise ds.DatasetError(f"split {split_name!r}: the tasks wrote {shipped.get(split_name, 0)} rows "
                                      f"of {counts[split_name]}; rerun the job")
            _fill_missing_shards(self.storage, stage.tfrecord(split_name), count, self.options.compression)
            splits_meta[split_name] = {"rows": counts[split_name], "parquet": f"{ds.PARQUET}/{split_name}",
                                       "tfrecord": f"{ds.TFRECORD}/{split_name}", "shards": count}
        return splits_meta, max(wanted.values(), default=0), sketches


def _row_hash(columns: Sequence[str], seed: int) -> Column:
    """A hash of a row's typed values: the same whatever the partitioning. Of the values themselves, not
    their text (turning every number into text took a quarter of the typed pass); a missing value adds
    nothing, so two rows that differ only in where a value is missing may share a split."""
    from pyspark.sql import functions as F

    return F.xxhash64(F.lit(seed), *[F.col(n) for n in columns])


_ARROW_TYPES = {"float64": "float64", "float32": "float32", "int32": "int32", "int64": "int64"}


@dataclass(frozen=True)
class _Transform:
    """The fitted transform as the shard writers apply it to Arrow batches of typed rows, with Arrow's
    compute functions: each number as a double (standardized: ``(x - mean) / std``), each category as its
    train index (-1 for one the train split never saw, or missing) or one-hot floats, the label, and the
    ``features`` vector of float32. The same numbers Spark's casts give, in the same order as
    ``transform.json`` names them."""

    features: list[str]                                # the feature columns, in order
    label: str
    label_kind: str                                    # 'long', 'double' or 'index'
    one_hot: bool
    scale: dict[str, tuple[float, float] | None]       # numeric column -> (mean, std) when standardized
    categories: dict[str, list[str]]                   # categorical column (and label) -> train categories
    dtypes: dict[str, str]                             # output field -> dtype
    fills: dict[str, Any]                              # column -> the value its missing values take

    def inputs(self) -> list[str]:
        return [*self.features, self.label]

    def schema(self) -> pa.Schema:
        import pyarrow as pa

        return pa.schema([pa.field(name, pa.list_(pa.float32()) if name == "features" else
                                   pa.type_for_alias(_ARROW_TYPES[dtype])) for name, dtype in self.dtypes.items()])

    def _index(self, column: Any, name: str) -> Any:
        import pyarrow as pa
        import pyarrow.compute as pc

        known = pa.array(self.categories.get(name, []), type=column.type)
        return pc.fill_null(pc.index_in(column, value_set=known), -1).cast(pa.int32())

    def __call__(self, batch: pa.RecordBatch) -> pa.Table:
        import pyarrow as pa
        import pyarrow.compute as pc

        out: dict[str, Any] = {}
        vectors = []
        for name in self.features:
            column = batch.column(name)
            if name in self.fills:
                column = pc.fill_null(column, pa.scalar(self.fills[name], type=column.type))
            if name in self.scale:
                value = pc.cast(column, pa.float64(), safe=False)
                scale = self.scale[name]
                if scale is not None:
                    value = pc.divide(pc.subtract(value, scale[0]), scale[1])
                out[name] = value
                vectors.append(pc.cast(value, pa.float32(), safe=False))
            elif self.one_hot:
                index = self._index(column, name)
                for i in range(len(self.categories[name])):
                    out[f"{name}_{i}"] = pc.cast(pc.equal(index, i), pa.float32())
                    vectors.append(out[f"{name}_{i}"])
            else:
                out[name] = self._index(column, name)
                vectors.append(pc.cast(out[name], pa.float32()))
        label = batch.column(self.label)
        out["label"] = (self._index(label, self.label) if self.label_kind == "index" else
                        pc.cast(label, pa.int64() if self.label_kind == "long" else pa.float64(), safe=False))
        out["features"] = _vectors(vectors, batch.num_rows)
        return pa.Table.from_pydict(out, schema=self.schema())


def _vectors(columns: Sequence[Any], rows: int) -> Any:
    """One list<float32> value per row holding the ``columns`` (float32 Arrow arrays) side by side."""
    import pyarrow as pa

    if any(column.null_count for column in columns):   # a missing value stays missing in its vector
        values = [column.to_pylist() for column in columns]
        return pa.array([list(row) for row in zip(*values)] if values else [[]] * rows, pa.list_(pa.float32()))
    matrix = np.empty((rows, len(columns)), dtype=np.float32)
    for j, column in enumerate(columns):
        matrix[:, j] = column.to_numpy(zero_copy_only=False)
    offsets = pa.array(np.arange(rows + 1, dtype=np.int32) * len(columns))
    return pa.ListArray.from_arrays(offsets, pa.array(matrix.reshape(-1)))


class _TableShardWriter:
    """Transform and write the shards whose rows a task holds, each as its Parquet file and its TFRecord
    shard, both through the fs layer, so a table lands on every root hopsml supports (S3 too, without Spark's
    Hadoop connectors). Every (split, shard) lies in one task only: the rows are partitioned by them.
    Works on Arrow batches: the Parquet side writes them as they come, the TFRecord side encodes a
    whole group of rows with numpy (:func:`encode_examples`), row by row only where a value is null."""

    def __init__(self, storage: Storage, stage: ds.DatasetDir, counts: Mapping[str, int],
                 compression: str | None, transform: _Transform, edges: Mapping[str, list[float] | None],
                 keep: int) -> None:
        self.storage, self.stage, self.counts = storage, stage, dict(counts)
        self.compression, self.transform, self.edges = compression, transform, dict(edges)
        self.keep = keep   # values of a column kept for its exact median (NumericSketch)

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import pyarrow as pa
        import pyarrow.compute as pc
        import pyarrow.parquet as pq

        from hopsml.data.stats import NumericSketch

        rows: dict[str, int] = {}
        split_names = pa.array(list(self.counts), pa.string())
        schema = self.transform.schema()
        # dictionaries for the indices, one-hot floats and labels: a float64 column's values are mostly
        # distinct, and trying a dictionary on them took half of the Parquet writer's time
        dictionary = [name for name, dtype in self.transform.dtypes.items() if name != "features" and dtype != "float64"]
        sketches: dict[str, dict[str, NumericSketch]] = {}   # split -> column -> its rows as read
        with ExitStack() as stack:
            open_shards: dict[tuple[str, int], tuple[Any, Any]] = {}
            for batch in batches:
                if not batch.num_rows:
                    continue
                # (split, shard) as one integer per row: numpy's string ops on the keys took 29 ms a batch
                split_codes = pc.index_in(batch.column(_SPLIT), value_set=split_names).to_numpy(zero_copy_only=False)
                shard_numbers = batch.column(_SHARD).to_numpy(zero_copy_only=False).astype(np.int64)
                codes = np.unique(split_codes)
                in_sample = batch.column(_SAMPLED).to_numpy(zero_copy_only=False)
                of_split = {code: split_codes == code for code in codes} if len(codes) > 1 else {codes[0]: None}
                for column, edges in self.edges.items():   # the rows as read, before any fill
                    values = batch.column(column)
                    present = ~values.is_null().to_numpy(zero_copy_only=False)
                    numbers = values.to_numpy(zero_copy_only=False).astype(np.float64)
                    for code, rows_of_split in of_split.items():
                        kept = present if rows_of_split is None else present & rows_of_split
                        sketch = sketches.setdefault(str(split_names[int(code)]), {}).get(column)
                        if sketch is None:
                            sketch = NumericSketch(edges, self.keep)
                            sketches[str(split_names[int(code)])][column] = sketch
                        sketch.add(numbers[kept], in_sample[kept])
                part_all = self.transform(batch)
                keys = split_codes.astype(np.int64) * (1 << 32) + shard_numbers
                found, first, group_of_row = np.unique(keys, return_index=True, return_inverse=True)
                for group in np.argsort(first, kind="stable"):   # the groups in the order they come
                    key = (str(split_names[int(split_codes[first[group]])]), int(shard_numbers[first[group]]))
                    if key not in open_shards:   # a shard with no rows writes no Parquet file
                        records = stack.enter_context(shard_io.shard_writer(
                            self.storage, self.stage.tfrecord(key[0]), key[1], self.counts[key[0]],
                            self.compression))
                        target = stack.enter_context(shard_io.atomic_output(
                            self.storage, ds.layout.join(self.stage.parquet(key[0]), shard_io.part_name(key[1]))))
                        parquet = stack.enter_context(pq.ParquetWriter(target, schema, compression="snappy",
                                                                       use_dictionary=dictionary))
                        open_shards[key] = (records, parquet)
                    records, parquet = open_shards[key]
                    part = part_all if len(found) == 1 else part_all.take(np.flatnonzero(group_of_row == group))
                    parquet.write_table(part)
                    _write_examples(records, part)
                    rows[key[0]] = rows.get(key[0], 0) + part.num_rows
        yield pa.RecordBatch.from_pydict({
            "split": pa.array(list(rows), pa.string()), "rows": pa.array(list(rows.values()), pa.int64()),
            "sketches": pa.array([zlib.compress(pickle.dumps(sketches.get(split, {}), protocol=5), 1)
                                  for split in rows], pa.binary())})


def _write_examples(records: Any, part: pa.Table) -> None:
    """The rows of ``part`` as tf.train.Example records: scalars and the ``features`` vector by
    numpy in one go; a row holding a null is written alone, without its null features."""
    import pyarrow as pa

    columns: dict[str, np.ndarray] = {}
    nulls = np.zeros(part.num_rows, dtype=bool)
    for name, column in zip(part.column_names, part.columns):
        column = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
        if column.null_count:
            nulls |= column.is_null().to_numpy(zero_copy_only=False)
        if pa.types.is_list(column.type) or pa.types.is_large_list(column.type):
            lengths = column.value_lengths().fill_null(0).to_numpy(zero_copy_only=False)
            values = column.flatten()
            width = int(lengths[0]) if len(lengths) else 0
            if values.null_count or (lengths != width).any() or column.null_count:
                return _write_examples_one_by_one(records, part)
            columns[name] = values.to_numpy(zero_copy_only=False).astype(np.float32).reshape(-1, width)
        else:
            kind = column.type
            dtype = np.float64 if pa.types.is_floating(kind) else np.int64
            columns[name] = column.fill_null(0).to_numpy(zero_copy_only=False).astype(dtype, copy=False)
    if nulls.any():
        return _write_examples_one_by_one(records, part)
    records.write_batch(*encode_examples(columns))


def _write_examples_one_by_one(records: Any, part: pa.Table) -> None:
    for row in part.to_pylist():
        records.write(encode_example({
            name: (np.asarray(value, dtype=np.float32) if name == "features" else value)
            for name, value in row.items() if value is not None}))


class _JsonLinesWriter:
    """Stream a partition's rows into a JSON-lines file through the fs layer (any root, S3 too);
    yields the number of rows per reason."""

    def __init__(self, storage: Storage, folder: str) -> None:
        self.storage, self.folder = storage, folder

    def __call__(self, batches: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        import pandas as pd

        reasons: dict[str, int] = {}
        rel = ds.layout.join(self.folder, shard_io.part_name(shard_io.partition_id(), ".jsonl"))
        with shard_io.atomic_output(self.storage, rel) as target, \
                (open(target, "wb") if isinstance(target, str) else nullcontext(target)) as out:
            for frame in batches:
                for row in frame.astype(object).where(frame.notna(), None).to_dict("records"):
                    out.write((json.dumps(row, default=str) + "\n").encode("utf-8"))
                    reasons[row["reason"]] = reasons.get(row["reason"], 0) + 1
        yield pd.DataFrame({"reason": pd.Series(list(reasons), dtype=object),
                            "rows": pd.Series(list(reasons.values()), dtype="int64")})


def _fill_missing_shards(storage: Storage, folder: str, count: int, compression: str | None) -> None:
    """Spark may skip the Python function for an empty partition: give every shard a file."""
    from hopsml.formats.tfrecord import shard_name

    for index in range(count):
        rel = ds.layout.join(folder, shard_name(index, count, compression))
        if not storage.exists(rel):
            with shard_io.shard_writer(storage, folder, index, count, compression):
                pass
