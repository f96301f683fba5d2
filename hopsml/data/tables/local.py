"""A small table prepared in this process, without Spark: the same typing, split, statistics, transform and
shard files as the Spark job (:mod:`hopsml.data.tables.job`), at a fraction of its fixed cost (a 500-row
table's Spark jobs took seconds; its rows take milliseconds).

Only input whose every reading is certain is taken: one local file of plain delimited text (no quote
character, ``\\n`` or ``\\r\\n`` line ends, UTF-8) with every row as wide as the header, values Spark would
parse as this module does, and no row to reject. Anything else (quoted fields, malformed or rejected rows,
numbers written as ``1.5f``, ``0x1p3``, ``Infinity``, a table with no row left) goes to Spark, which reads
it as it always has; :meth:`LocalTableJob.of` says why in the log.

Bit for bit: the rows are hashed with Spark's xxhash64 (:mod:`~hopsml.data.tables.row_hash`), so each lands
in the same split and shard; each shard's rows come in file order in one Arrow batch, as the Spark job's
single-task read gives them, so the Parquet and TFRecord files (and their fingerprints) are the same bytes.
The numeric aggregates follow Spark's own algorithms in row order (the sum for ``avg``, Welford's update
for ``stddev_samp``): equal to Spark's while Spark reads the file as one partition, which it does for a
file up to ``spark.sql.files.openCostInBytes`` (4 MiB) whatever its parallelism. A larger file Spark sums
per partition, and the last bits of a mean or standard deviation (so of a standardized feature) could
differ: it goes to Spark.
"""

from __future__ import annotations

import logging
import math
import os
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from hopsml import config
from hopsml.data import dataset as ds
from hopsml.data.tables.csv import _local_file, header_names
from hopsml.data.tables.inference import Inference
from hopsml.data.tables.job import _TableJob
from hopsml.data.tables.options import (
    INTEGRAL_TYPES,
    NUMERIC_TYPES,
    SAMPLED,
    SHARD,
    SPLIT,
    SPLITS,
    TableOptions,
    sanitize,
)
from hopsml.data.tables.parsing import decide
from hopsml.data.tables.row_hash import row_hashes
from hopsml.data.tables.transform import Transform
from hopsml.data.tables.writers import TableShardWriter
from hopsml.fs import Storage

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

_WHITESPACE = "".join(chr(c) for c in range(1, 33))   # what Spark's CSV reader trims around a field
_DECIMAL = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?\Z")
_INTEGER = re.compile(r"[+-]?[0-9]+\Z")
# text Spark's cast reads as a number that this module does not: a float suffix, hex, the special words
_OTHER_NUMBER = re.compile(r"[+-]?(([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?[fFdD]|0[xX].*|"
                           r"(?i:inf|infinity|nan))\Z")
# Spark reads a file up to spark.sql.files.openCostInBytes (4 MiB) as one partition, whatever its parallelism: then
# its sums run in file order, as here
ONE_PARTITION_BYTES = 4 << 20
# the Spark job's Arrow batches to its shard writers (prepare.py's session settings): up to this many rows a task's
# shards get their rows in one batch, so each Parquet file has one row group, as here
ONE_BATCH_ROWS = 100_000
_LONG_MIN, _LONG_MAX = -(1 << 63), (1 << 63) - 1
_LOCAL_MASTER = re.compile(r"local(\[(?P<threads>\*|[0-9]+)(,[0-9]+)?\])?\Z")


class NotSmall(Exception):
    """The table is not one this module reads with certainty: Spark prepares it (the message says why)."""


def _number(text: str) -> float | None:
    """The double Spark's ``try_cast`` gives ``text``, None where it gives NULL; NotSmall where unsure."""
    if _DECIMAL.match(text):
        value = float(text)
        if math.isinf(value):
            raise NotSmall(f"the number {text!r} overflows a double")
        return value
    if _OTHER_NUMBER.match(text):
        raise NotSmall(f"the value {text!r} is a number only to Java's parser")
    return None


def _whole(text: str) -> int | None:
    """The long of a whole number written without point or exponent (Spark's ``try_cast(... AS long)``)."""
    if not _INTEGER.match(text):
        return None
    value = int(text)
    return value if _LONG_MIN <= value <= _LONG_MAX else None


@dataclass
class _Text:
    """A table's cleaned text: per column its values (None: missing), in file order."""

    raw_names: list[str]
    values: list[list[str | None]]   # per column
    rows: int


def read_text(path: str, options: TableOptions, max_rows: int) -> _Text:
    """Every field's text as Spark's CSV reader and the job's cleaning give it (trimmed; empty and na_values
    missing), or NotSmall."""
    if len(options.delimiter) != 1:
        raise NotSmall("the delimiter is not one character")
    if os.path.getsize(path) > ONE_PARTITION_BYTES:
        raise NotSmall("the file is over 4 MiB, which Spark reads as several partitions (whose sums differ)")
    with open(path, "rb") as handle:
        data = handle.read()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise NotSmall(f"the file is not UTF-8 ({exc.reason})") from None
    if '"' in text:
        raise NotSmall("the file holds quotes")
    if "\r" in text.replace("\r\n", ""):
        raise NotSmall("a line ends in a lone carriage return")
    if "\x00" in text:
        raise NotSmall("the file holds NUL characters")
    lines = text.replace("\r\n", "\n").split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    lines = lines[options.skip_rows:]
    if text.startswith("\ufeff") and (options.skip_rows or not options.header):
        raise NotSmall("a byte order mark starts a data line")
    if options.header:
        if not lines or not lines[0].strip(_WHITESPACE + "\ufeff"):
            raise NotSmall("the header line is empty")
        header, lines = lines[0].lstrip("\ufeff"), lines[1:]
    delimiter = options.delimiter
    if options.columns:
        raw_names = list(options.columns)
    elif options.header:
        raw_names = header_names(header.split(delimiter))
    else:
        first = next((line for line in lines if line), "")
        raw_names = [f"_c{i}" for i in range(len(first.split(delimiter)))]
    width = len(raw_names)
    na = {v.strip() for v in options.na_values} | {""}
    values: list[list[str | None]] = [[] for _ in range(width)]
    rows = 0
    for line in lines:
        if not line:
            continue   # Spark skips empty lines
        fields = line.split(delimiter)
        if len(fields) != width:
            raise NotSmall("a row has another number of fields than the header")
        rows += 1
        if rows > max_rows:
            raise NotSmall(f"the table has more than {max_rows} rows (small_table_rows)")
        if rows > ONE_BATCH_ROWS:
            raise NotSmall(f"the table has more than {ONE_BATCH_ROWS} rows, which Spark's shard writers get in "
                           "several batches (a Parquet row group each)")
        for column, field in zip(values, fields):
            field = field.strip(_WHITESPACE)
            column.append(None if field in na else field)
    return _Text(raw_names, values, rows)


def _typed(texts: list[str | None], kind: str, inferred: bool) -> tuple[np.ndarray, np.ndarray]:
    """A column's values as ``kind`` (Spark's parse of the job's typed pass) and which are present; NotSmall
    where a present value would not parse (the row would be rejected)."""
    present = np.array([t is not None for t in texts], bool)
    if kind == "string":
        return np.array(texts, object), present
    out: list[Any] = []
    for text in texts:
        if text is None:
            out.append(0)
            continue
        value: Any
        if kind == "boolean":
            lowered = text.lower()
            trues, falses = (("true",), ("false",)) if inferred else (("true", "1"), ("false", "0"))
            value = 1 if lowered in trues else 0 if lowered in falses else None
        elif kind == "long":
            value = _whole(text)
            if value is None and not inferred and not _INTEGER.match(text):
                number = _number(text)
                value = int(number) if number is not None and number == math.floor(number) \
                    and abs(number) < 2.0 ** 63 else None
        else:
            value = _number(text)
        if value is None:
            raise NotSmall(f"the value {text!r} does not parse as {kind}: its row would be rejected")
        out.append(value)
    return np.array(out, np.float64 if kind == "double" else np.int64), present


def _types(names: list[str], values: Mapping[str, list[str | None]], options: TableOptions) -> dict[str, str]:
    """The job's types: given by schema= or categorical=, else inferred from every value (:func:`decide`)."""
    given = {sanitize(k): v.lower() for k, v in (options.schema or {}).items()}
    forced = {sanitize(c) for c in options.categorical or ()}
    types: dict[str, str] = {}   # given ones first, as infer_types orders them (stats.json shows them so)
    for name in names:
        if name in given:
            types[name] = NUMERIC_TYPES.get(given[name], "string")
        elif name in forced:
            types[name] = "string"
    for name in names:
        if name in types:
            continue
        present = numeric = whole = boolean = 0
        for text in values[name]:
            if text is None:
                continue
            present += 1
            if _number(text) is not None:
                numeric += 1
                whole += _whole(text) is not None
            boolean += text.lower() in ("true", "false")
        types[name] = decide(present, numeric, whole, boolean)
    return types


def aggregates(values: np.ndarray) -> dict[str, Any]:
    """count, min, max, mean, std, zeros of float64 ``values`` (present, in row order) as Spark's ``avg`` and
    ``stddev_samp`` compute them in one task: the sum in row order, Welford's update (n, mean, m2)."""
    total = 0.0
    n = 0.0
    mean = 0.0
    m2 = 0.0
    for value in values.tolist():
        total += value
        n += 1.0
        delta = value - mean
        delta_n = delta / n
        mean += delta_n
        m2 += delta * (delta - delta_n)
    count = int(values.size)
    return {"count": count, "min": float(values.min()) if count else None,
            "max": float(values.max()) if count else None, "mean": total / count if count else None,
            "std": math.sqrt(m2 / (n - 1.0)) if count > 1 else None, "zeros": int((values == 0).sum())}


def default_parallelism(settings: config.Settings, spark: SparkSession | None) -> int | None:
    """Spark's default parallelism (the default shards), from the session in use, else from a local master
    and its settings; None where only a running cluster would tell."""
    if spark is None and "pyspark" in sys.modules:
        from pyspark.sql import SparkSession

        spark = SparkSession.getActiveSession()
    if spark is not None:
        from hopsml.cluster.handle import SparkHandle

        return int(SparkHandle.of(spark).default_parallelism)
    match = _LOCAL_MASTER.match(settings.master.strip())
    if settings.remote or match is None:
        return None
    if (setting := settings.spark_conf.get("spark.default.parallelism", "")).isdigit():
        return int(setting)
    threads = match["threads"]
    return 1 if threads is None else (os.cpu_count() or 1) if threads == "*" else int(threads)


class LocalTableJob(_TableJob):
    """:class:`_TableJob`'s steps on a table held in this process: its read and typing here, its statistics,
    fit, transform, shard writers, manifest and summary those of the Spark job."""

    engine = "local"
    parallelism = 1   # Spark's default parallelism, which the default shards follow

    @classmethod
    def of(cls, src: str, storage: Storage, settings: config.Settings, name: str, options: TableOptions,
           spark: SparkSession | None = None) -> LocalTableJob | None:
        """The job for ``src`` when it is a small table this module reads with certainty, else None."""
        if settings.small_table_rows <= 0:
            return None
        path = _local_file(src)
        why = "it is not one local file" if path is None else None
        parallelism = default_parallelism(settings, spark) if path is not None else None
        if path is not None and parallelism is None:
            why = "the cluster's parallelism (the default shards) is known only to a running session"
        if why is None and path is not None and parallelism is not None:
            job = cls(None, storage, settings, src, name, options)
            job.parallelism = parallelism
            try:
                job.load(os.path.expanduser(path))
                return job
            except NotSmall as exc:
                why = str(exc)
        log.info("%s is prepared by Spark: %s", name, why)
        return None

    def load(self, path: str) -> None:
        """Read, type, hash and split the rows (NotSmall where Spark must)."""
        opts = self.options
        text = read_text(path, opts, self.settings.small_table_rows)
        names, label = self._names(text.raw_names)
        self.source_names = dict(zip(names, text.raw_names))
        self.left_out = self._left_out(names, text.raw_names, label)
        if text.rows == 0:
            raise NotSmall("it has no data rows")
        kept = [n for n in names if n not in self.left_out]
        by_name = dict(zip(names, text.values))
        types = self._types = _types(names, by_name, opts)   # of the columns left out too, as Spark's
        given = {sanitize(k) for k in opts.schema or {}} | {sanitize(c) for c in opts.categorical or ()}
        typed = {n: _typed(by_name[n], types[n], n not in given) for n in kept}
        hashes = row_hashes([("string" if types[n] == "string" else "double" if types[n] == "double" else "long",
                              *typed[n]) for n in kept], opts.seed, text.rows)
        usable = typed[label][1].copy()
        if opts.missing == "drop":
            for n in kept:
                if n != label:
                    usable &= typed[n][1]
        rows = np.flatnonzero(usable)
        if not rows.size:
            raise NotSmall("no row is left to write")
        self.names, self.label, self.rows, self.read_rows = kept, label, rows, text.rows
        self.columns = {n: (values[rows], present[rows]) for n, (values, present) in typed.items()}
        self.hashes = hashes[rows]
        test = (self.hashes % 1_000_000) / 1_000_000.0 < opts.test_fraction
        self.splits = np.where(test, "test", "train")

    def run(self, stage: ds.DatasetDir) -> ds.DatasetSummary:
        from hopsml.data import stats

        self.storage.makedirs(stage.rejected)
        inference = Inference(dict(self._types), self.read_rows, 0, 0, 0, {}, {}, {})
        return self._write(stage, None, self.names, self.label, inference, {}, stats, kept=None)

    def _statistics(self, usable: Any, numeric: list[str], categorical: list[str], inference: Inference
                    ) -> tuple[dict[str, Any], dict[str, dict[str, Any]], dict[tuple[str, str], dict[str, int]]]:
        from hopsml.data import stats

        aggregated: list[tuple[Any, str | None, Mapping[str, Any]]] = []
        value_counts: dict[tuple[str, str], dict[str, int]] = {}
        missing: dict[tuple[str, str], int] = {}
        for split in SPLITS:
            of_split = self.splits == split
            rows = int(of_split.sum())
            if not rows:
                continue
            aggregated.append((split, None, {"rows": rows}))
            for n in numeric:
                values, present = self.columns[n]
                chosen = of_split & present
                aggregated.append((split, n, {"rows": rows, **aggregates(values[chosen].astype(np.float64))}))
            for n in categorical:
                values, present = self.columns[n]
                counts: dict[str, int] = {}
                for value in values[of_split & present].tolist():
                    counts[value] = counts.get(value, 0) + 1
                if counts:
                    value_counts[(split, n)] = counts
                if (absent := int((of_split & ~present).sum())):
                    missing[(split, n)] = absent
        integral = {n for n in numeric if self._types[n] in INTEGRAL_TYPES}
        return stats.assemble_table_stats(SPLITS, numeric, categorical, integral, aggregated, value_counts,
                                          missing)

    def _parallelism(self) -> int:
        return self.parallelism

    def _run_writers(self, usable: Any, wanted: Mapping[str, int], transform: Transform,
                     writer: TableShardWriter, sampled: float) -> list[Any]:
        """The writer over one Arrow batch of the rows in file order: each shard's rows as Spark's task
        gives them."""
        import pyarrow as pa

        high = self.hashes >> 32   # arithmetic, as Spark's shiftright
        shard = np.zeros(self.hashes.size, np.int32)
        for split_name, count in wanted.items():
            shard = np.where(self.splits == split_name, high % count, shard).astype(np.int32)
        in_sample = (np.ones(self.hashes.size, bool) if sampled >= 1.0 else
                     ((self.hashes >> 12) % (1 << 20)) < int(sampled * (1 << 20)))
        arrays: dict[str, Any] = {}
        for n in transform.inputs():
            values, present = self.columns[n]
            kind = self._types[n]
            if kind == "string":
                arrays[n] = pa.array(values.tolist(), pa.string(), mask=~present)
            else:
                arrays[n] = pa.array(values, pa.float64() if kind == "double" else pa.int64(), mask=~present)
        arrays[SPLIT] = pa.array(self.splits.tolist(), pa.string())
        arrays[SHARD] = pa.array(shard, pa.int32())
        arrays[SAMPLED] = pa.array(in_sample, pa.bool_())
        return [row for batch in writer(iter([pa.RecordBatch.from_pydict(arrays)])) for row in batch.to_pylist()]
