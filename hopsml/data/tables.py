"""CSV tables -> a dataset: typed, cleaned, split, transformed, as plain Parquet and TFRecord shards.

Steps, all in Spark: read every field as text (PERMISSIVE, so a row with the wrong number of
fields is caught with its raw line), trim, turn ``na_values`` into missing, type the columns
(given, or inferred: numeric when most non-missing values parse as numbers), reject rows whose
numeric cells do not parse, split train/test by a hash of the row and the seed (reproducible,
independent of partitioning), apply the missing-value policy, fit the transform on the train
split only (category indices by frequency, means and standard deviations) and apply it to both
splits. Rejected rows are kept in ``_rejected`` with their reason; nothing is silently dropped:
``read = written + rejected + dropped``, where dropped counts rows removed by ``missing='drop'``
(or rows without a label).
"""

from __future__ import annotations

import json
import logging
import re
import time
from contextlib import ExitStack, nullcontext
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterator, Mapping, Optional, Sequence

import numpy as np

from hopsml import config
from hopsml.data import dataset as ds
from hopsml.data import shards as shard_io
from hopsml.data.tfrecord import encode_example
from hopsml.errors import SettingsError
from hopsml.fs import Storage, redact_uri
from hopsml.progress import spark_progress

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa
    from pyspark.sql import Column, DataFrame, SparkSession

log = logging.getLogger(__name__)

SPLITS = ("train", "test")
MISSING_POLICIES = ("drop", "fill")
NUMERIC_TYPES = {"double": "double", "float": "double", "int": "long", "long": "long", "integer": "long"}
CATEGORICAL_TYPES = ("string", "category", "categorical", "str")
_CORRUPT = "_corrupt_record"
_SPLIT = "_split"
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
    columns: Optional[tuple[str, ...]] = None
    schema: Optional[Mapping[str, str]] = None
    na_values: tuple[str, ...] = ("?",)
    missing: str = "drop"
    categorical: Optional[tuple[str, ...]] = None
    one_hot: bool = False
    standardize: bool = False
    test_fraction: float = 0.2
    seed: int = 0
    shards: Optional[int] = None
    delimiter: str = ","
    overwrite: bool = False
    compression: Optional[str] = None
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.missing not in MISSING_POLICIES:
            raise SettingsError(f"missing={self.missing!r}: use 'drop' (remove rows with a missing "
                                "value) or 'fill' (train mean / most frequent category)")
        if not 0.0 <= float(self.test_fraction) < 1.0:
            raise SettingsError(f"test_fraction={self.test_fraction!r} must be in [0, 1)")
        if self.shards is not None and int(self.shards) < 1:
            raise SettingsError(f"shards={self.shards!r} must be at least 1")
        for name, kind in (self.schema or {}).items():
            if kind.lower() not in NUMERIC_TYPES and kind.lower() not in CATEGORICAL_TYPES:
                raise SettingsError(f"schema type {kind!r} of column {name!r}: use one of "
                                    f"{', '.join(sorted(NUMERIC_TYPES))} or 'string'")
        if self.header is False and not self.columns:
            pass  # Spark names them _c0, _c1, ...; the label may be given as such a name


def _column_names(spark: "SparkSession", src: str, options: TableOptions) -> list[str]:
    if options.columns:
        return list(options.columns)
    probe = spark.read.option("header", options.header).option("sep", options.delimiter).csv(src)
    return [name.strip() for name in probe.columns]


def _read_text(spark: "SparkSession", src: str, names: list[str], options: TableOptions) -> "DataFrame":
    from pyspark.sql.types import StringType, StructField, StructType

    schema = StructType([StructField(n, StringType()) for n in names] + [StructField(_CORRUPT, StringType())])
    return spark.read.csv(src, schema=schema, header=options.header, sep=options.delimiter,
                          mode="PERMISSIVE", columnNameOfCorruptRecord=_CORRUPT,
                          ignoreLeadingWhiteSpace=True, ignoreTrailingWhiteSpace=True, nullValue=None,
                          enforceSchema=True)


def _number(name: str, kind: str) -> "Column":
    """Column ``name`` as ``kind`` ('double', 'long'), NULL where a value does not parse: a plain
    cast fails the whole job on Spark 4, whose ANSI mode is on by default."""
    from pyspark.sql import functions as F

    return F.expr(f"try_cast(`{name}` AS {kind})")


def _infer_types(frame: "DataFrame", names: list[str], options: TableOptions) -> dict[str, str]:
    """'double', 'long' or 'string' per column: given, else numeric when most values parse."""
    from pyspark.sql import functions as F

    given = {sanitize(k): v.lower() for k, v in (options.schema or {}).items()}
    forced = {sanitize(c) for c in options.categorical or ()}
    todo = [n for n in names if n not in given and n not in forced]
    types: dict[str, str] = {}
    for name in names:
        if name in given:
            types[name] = NUMERIC_TYPES.get(given[name], "string")
        elif name in forced:
            types[name] = "string"
    if todo:
        aggs = []
        for name in todo:
            number = _number(name, "double")
            aggs += [F.count(name).alias(f"{name}__n"), F.count(number).alias(f"{name}__num"),
                     F.sum((number.isNotNull() & (number != F.floor(number))).cast("long")).alias(f"{name}__frac")]
        row = frame.where(F.col(_CORRUPT).isNull()).agg(*aggs).first().asDict()
        for name in todo:
            present, numeric = row[f"{name}__n"] or 0, row[f"{name}__num"] or 0
            if present and numeric * 2 > present:
                types[name] = "double" if (row[f"{name}__frac"] or 0) else "long"
            else:
                types[name] = "string"
    return types


def prepare_table(src: str, dataset: str, *, label: str, header: bool = True,
                  columns: Optional[Sequence[str]] = None, schema: Optional[Mapping[str, str]] = None,
                  na_values: Sequence[str] = ("?",), missing: str = "drop",
                  categorical: Optional[Sequence[str]] = None, one_hot: bool = False,
                  standardize: bool = False, test_fraction: float = 0.2, seed: int = 0,
                  shards: Optional[int] = None, delimiter: str = ",", overwrite: bool = False,
                  compression: Optional[str] = None, spark: "SparkSession | None" = None,
                  settings: config.Settings | None = None) -> ds.DatasetSummary:
    """Turn the CSV file(s) ``src`` into the dataset ``dataset`` with train and test splits.

    Writes parquet/<split>/ (plain Parquet: one column per feature, a ``features`` float32 vector
    and ``label``), tfrecord/<split>/part-*.tfrecord (tf.train.Example with the same names),
    transform.json (the fitted transform, for serving), labels.json (a categorical label's
    classes), _rejected/ (malformed rows with their reason), stats.json and stats.html.
    """
    from hopsml import session

    options = TableOptions(label=label, header=header, columns=tuple(columns) if columns else None,
                           schema=dict(schema) if schema else None, na_values=tuple(na_values),
                           missing=missing, categorical=tuple(categorical) if categorical else None,
                           one_hot=one_hot, standardize=standardize, test_fraction=float(test_fraction),
                           seed=int(seed), shards=shards, delimiter=delimiter, overwrite=overwrite,
                           compression=compression)
    settings = settings or config.load()
    spark = spark or session.get_or_create(settings)
    session.check_session(settings, spark)  # also for a session passed in
    storage = Storage(settings.root)
    started = time.perf_counter()
    job = _TableJob(spark, storage, settings, src, dataset, options)
    with ds.staged(storage, settings.project, dataset, options.overwrite) as stage, \
            spark_progress(spark.sparkContext, f"prepare table '{dataset}'"):
        summary = job.run(stage)
        summary.seconds = time.perf_counter() - started
        summary.uri = storage.uri(ds.DatasetDir.of(settings.project, dataset).path)
        manifest = storage.read_json(stage.manifest)
        manifest["seconds"] = round(summary.seconds, 3)
        storage.write_json(stage.manifest, manifest)
    log.info("%s", summary)
    return summary


class _TableJob:
    """The steps of :func:`prepare_table`, sharing the parsed input between them."""

    def __init__(self, spark: "SparkSession", storage: Storage, settings: config.Settings, src: str,
                 name: str, options: TableOptions) -> None:
        self.spark, self.storage, self.settings = spark, storage, settings
        self.src, self.name, self.options = src, name, options

    def run(self, stage: ds.DatasetDir) -> ds.DatasetSummary:
        from pyspark.sql import functions as F

        from hopsml.data import stats as stats_mod

        opts = self.options
        raw_names = _column_names(self.spark, self.src, opts)
        names = [sanitize(n) for n in raw_names]
        if len(set(names)) != len(names):
            raise ds.DatasetError(f"columns {raw_names} are not distinct once made identifiers "
                                  f"({names}); give distinct names with columns=[...]")
        label = sanitize(opts.label)
        if label not in names:
            raise ds.DatasetError(f"label column {opts.label!r} is not among the columns {raw_names}; "
                                  "pass label= one of them (or columns=[...] for a file without header)")
        text = _read_text(self.spark, self.src, names, opts).cache()
        try:
            read = text.count()
            if read == 0:
                raise ds.DatasetError(f"{redact_uri(self.src)!r} has no data rows; check the path and header=")
            na = [v.strip() for v in opts.na_values] + [""]
            cleaned = text.select(*[F.when(F.col(n).isin(na), F.lit(None)).otherwise(F.col(n)).alias(n)
                                    for n in names], F.col(_CORRUPT))
            types = _infer_types(cleaned, names, opts)
            return self._run_typed(stage, cleaned, names, label, types, read, stats_mod)
        finally:
            text.unpersist()

    def _run_typed(self, stage: ds.DatasetDir, cleaned: "DataFrame", names: list[str], label: str,
                   types: dict[str, str], read: int, stats_mod: Any) -> ds.DatasetSummary:
        from pyspark.sql import functions as F

        opts = self.options
        numeric = [n for n in names if types[n] != "string"]
        reasons = F.lit(None).cast("string")
        for n in reversed(numeric):  # the first unparsable column names the reason
            reasons = F.when(F.col(n).isNotNull() & _number(n, "double").isNull(),
                             F.lit(f"unparsable number in column {n}")).otherwise(reasons)
        reasons = F.when(F.col(_CORRUPT).isNotNull(), F.lit("malformed row (wrong number of fields)")
                         ).otherwise(reasons)
        checked = cleaned.withColumn("_reason", reasons)
        rejected = checked.where(F.col("_reason").isNotNull())
        self.storage.makedirs(stage.rejected)
        (rejected.select(F.col("_reason").alias("reason"), F.col(_CORRUPT).alias("line"),
                         F.to_json(F.struct(*names)).alias("fields"))
         .coalesce(1).mapInPandas(_JsonLinesWriter(self.storage, stage.rejected), "rows long").collect())
        rejected_reasons = {r["_reason"]: r["count"] for r in rejected.groupBy("_reason").count().collect()}

        typed = checked.where(F.col("_reason").isNull()).select(
            *[_number(n, "double" if types[n] == "double" else "long").alias(n) if n in numeric
              else F.col(n) for n in names])
        hashed = F.xxhash64(F.lit(opts.seed), *[F.coalesce(F.col(n).cast("string"), F.lit("\x00")) for n in names])
        bucket = F.pmod(hashed, F.lit(1_000_000)) / F.lit(1_000_000.0)
        split = typed.withColumn(_SPLIT, F.when(bucket < F.lit(opts.test_fraction), "test").otherwise("train")).cache()
        try:
            return self._write(stage, split, names, label, types, read, rejected_reasons, stats_mod)
        finally:
            split.unpersist()

    def _write(self, stage: ds.DatasetDir, split: "DataFrame", names: list[str], label: str,
               types: dict[str, str], read: int, rejected_reasons: dict[str, int],
               stats_mod: Any) -> ds.DatasetSummary:
        from pyspark.sql import functions as F
        from pyspark.sql.pandas.types import to_arrow_schema

        opts = self.options
        features = [n for n in names if n != label]
        numeric = [n for n in features if types[n] != "string"]
        categorical = [n for n in features if types[n] == "string"]
        label_numeric = types[label] != "string"

        stats = stats_mod.table_stats(split, _SPLIT, SPLITS, numeric + ([label] if label_numeric else []),
                                      categorical + ([] if label_numeric else [label]))
        stats["rejected"] = rejected_reasons
        stats["types"] = types

        usable = split.where(F.col(label).isNotNull())
        if opts.missing == "drop":
            usable = usable.dropna(subset=features) if features else usable
        train = usable.where(F.col(_SPLIT) == "train")

        # fit on the train split only
        means, stds, fills, categories = {}, {}, {}, {}
        if numeric:
            row = train.agg(*[F.mean(n).alias(f"{n}__mean") for n in numeric]).first().asDict()
            means = {n: float(row[f"{n}__mean"]) if row[f"{n}__mean"] is not None else 0.0 for n in numeric}
        indexed = categorical + ([] if label_numeric else [label])
        if indexed:  # every category list in one job
            cells = [F.struct(F.lit(n).alias("c"), F.col(n).alias("v")) for n in indexed]
            counted = (train.select(F.explode(F.array(*cells)).alias("cell")).where(F.col("cell.v").isNotNull())
                       .groupBy("cell.c", "cell.v").count().collect())
            for n in indexed:
                mine = [r for r in counted if r["c"] == n]
                categories[n] = [r["v"] for r in sorted(mine, key=lambda r: (-r["count"], r["v"]))]
        if opts.missing == "fill":
            fills = {n: means[n] for n in numeric}
            fills.update({n: categories[n][0] for n in categorical if categories[n]})
            usable = usable.fillna({n: (v if types[n] != "long" else int(round(v))) for n, v in fills.items()})
        if numeric:  # as an imputer followed by a scaler: spread of the (filled) train split
            row = usable.where(F.col(_SPLIT) == "train").agg(
                *[F.stddev_pop(n).alias(n) for n in numeric]).first().asDict()
            stds = {n: float(row[n]) if row[n] else 1.0 for n in numeric}

        # transform
        out_cols, feature_exprs, feature_names, fields = [], [], [], {}
        for n in features:
            if n in numeric:
                expr = F.col(n).cast("double")
                if opts.standardize:
                    expr = (expr - F.lit(means[n])) / F.lit(stds[n])
                out_cols.append(expr.alias(n))
                feature_exprs.append(F.col(n).cast("float"))
                feature_names.append(n)
                fields[n] = {"dtype": "float64", "shape": []}
            else:
                index = _index_expr(n, categories[n])
                if opts.one_hot:
                    for i, _ in enumerate(categories[n]):
                        col = f"{n}_{i}"
                        out_cols.append((index == F.lit(i)).cast("float").alias(col))
                        feature_exprs.append(F.col(col))
                        feature_names.append(col)
                        fields[col] = {"dtype": "float32", "shape": []}
                else:
                    out_cols.append(index.alias(n))
                    feature_exprs.append(F.col(n).cast("float"))
                    feature_names.append(n)
                    fields[n] = {"dtype": "int32", "shape": []}
        if label_numeric:
            out_cols.append(F.col(label).cast("long" if types[label] == "long" else "double").alias("label"))
            fields["label"] = {"dtype": "int64" if types[label] == "long" else "float64", "shape": []}
        else:
            out_cols.append(_index_expr(label, categories[label]).alias("label"))
            fields["label"] = {"dtype": "int32", "shape": []}
        transformed = usable.select(*out_cols, F.col(_SPLIT))
        transformed = transformed.select("*", F.array(*feature_exprs).alias("features") if feature_exprs
                                         else F.array().cast("array<float>").alias("features"))
        fields["features"] = {"dtype": "float32", "shape": [len(feature_names)]}
        for name, spec in fields.items():
            spec["tfrecord"] = name

        splits_meta, shard_count = {}, 0
        found = {r[_SPLIT]: r["count"] for r in transformed.groupBy(_SPLIT).count().collect()}
        counts = {split_name: int(found.get(split_name, 0)) for split_name in SPLITS}
        for split_name in SPLITS:
            part = transformed.where(F.col(_SPLIT) == split_name).drop(_SPLIT)
            rows = counts[split_name]
            if rows == 0:
                continue
            wanted = self.options.shards or max(self.settings.num_workers,
                                                self.spark.sparkContext.defaultParallelism)
            wanted = max(1, min(wanted, rows))
            shard_count = max(shard_count, wanted)
            writer = _TableShardWriter(self.storage, stage, split_name, wanted, self.options.compression,
                                       to_arrow_schema(part.schema))
            self.storage.makedirs(stage.parquet(split_name))
            shipped = sum(row.rows for row in part.repartition(wanted).mapInPandas(writer, "rows long").collect())
            if shipped != rows:
                raise ds.DatasetError(f"split {split_name!r}: the tasks wrote {shipped} rows of {rows}; rerun the job")
            _fill_missing_shards(self.storage, stage.tfrecord(split_name), wanted, self.options.compression)
            splits_meta[split_name] = {"rows": rows, "parquet": f"{ds.PARQUET}/{split_name}",
                                       "tfrecord": f"{ds.TFRECORD}/{split_name}", "shards": wanted}
        written = sum(counts.values())
        rejected = sum(rejected_reasons.values())
        dropped = read - written - rejected
        transform = {"label": {"column": label, "source_name": opts.label, "type": types[label],
                               "classes": None if label_numeric else categories[label]},
                     "columns": [{"name": n, "type": types[n]} for n in names],
                     "numeric": {n: {"mean": means[n], "std": stds[n], "standardized": opts.standardize}
                                 for n in numeric},
                     "categorical": {n: {"categories": categories[n], "unknown_index": _UNKNOWN,
                                         "one_hot": opts.one_hot} for n in categorical},
                     "missing": {"policy": opts.missing, "fill": fills, "na_values": list(opts.na_values)},
                     "features": feature_names}
        self.storage.write_json(stage.transform, transform)
        if not label_numeric:
            self.storage.write_json(stage.labels, {"labels": categories[label]})
        self.storage.write_json(stage.stats_json, stats)
        self.storage.write_text(stage.stats_html, stats_mod.render_html(stats, title=self.name))
        self.storage.write_json(stage.manifest, {
            "format_version": ds.FORMAT_VERSION, "kind": "table", "name": self.name, "created": ds.now(),
            "source": redact_uri(self.src), "options": {k: v for k, v in opts.__dict__.items() if k != "extra"},
            "fields": fields, "default_fields": ["features", "label"], "label_field": "label",
            "labels": None if label_numeric else categories[label], "splits": splits_meta,
            "counts": {"read": read, "written": written, "rejected": rejected, "dropped": dropped},
            "rejected_reasons": rejected_reasons})
        return ds.DatasetSummary(name=self.name, kind="table", uri="", read=read, written=written,
                                 rejected=rejected, dropped=dropped, splits=counts, shards=shard_count,
                                 rejected_reasons=rejected_reasons)


def _index_expr(column: str, categories: list[str]):
    """The train index of each value; unseen values (and missing ones) get -1."""
    from pyspark.sql import functions as F

    if not categories:
        return F.lit(_UNKNOWN).cast("int")
    mapping = F.create_map(*[item for i, c in enumerate(categories) for item in (F.lit(c), F.lit(i))])
    return F.coalesce(mapping[F.col(column)], F.lit(_UNKNOWN)).cast("int")


class _TableShardWriter:
    """Write a partition's rows as its Parquet file and its TFRecord shard, both through the fs
    layer, so a table lands on every root hopsml supports (S3 too, without Spark's Hadoop connectors)."""

    def __init__(self, storage: Storage, stage: ds.DatasetDir, split: str, count: int,
                 compression: Optional[str], schema: "pa.Schema") -> None:
        self.storage, self.stage, self.split = storage, stage, split
        self.count, self.compression, self.schema = count, compression, schema

    def __call__(self, batches: Iterator["pd.DataFrame"]) -> Iterator["pd.DataFrame"]:
        import pandas as pd
        import pyarrow as pa
        import pyarrow.parquet as pq

        part, rows = shard_io.partition_id(), 0
        with ExitStack() as stack:
            writer = stack.enter_context(shard_io.shard_writer(
                self.storage, self.stage.tfrecord(self.split), part, self.count, self.compression))
            parquet = None
            for frame in batches:
                if parquet is None:   # a partition with no rows writes no Parquet file
                    target = stack.enter_context(shard_io.atomic_output(
                        self.storage, ds.layout.join(self.stage.parquet(self.split), shard_io.part_name(part))))
                    parquet = stack.enter_context(pq.ParquetWriter(target, self.schema, compression="snappy"))
                parquet.write_table(pa.Table.from_pandas(frame, schema=self.schema, preserve_index=False))
                columns = {name: frame[name].tolist() for name in frame.columns}
                for i in range(len(frame)):
                    writer.write(encode_example({
                        name: (np.asarray(values[i], dtype=np.float32) if name == "features" else
                               values[i]) for name, values in columns.items() if values[i] is not None}))
                rows += len(frame)
        yield pd.DataFrame({"rows": [rows]})


class _JsonLinesWriter:
    """Stream a partition's rows into a JSON-lines file through the fs layer (any root, S3 too)."""

    def __init__(self, storage: Storage, folder: str) -> None:
        self.storage, self.folder = storage, folder

    def __call__(self, batches: Iterator["pd.DataFrame"]) -> Iterator["pd.DataFrame"]:
        import pandas as pd

        rows = 0
        rel = ds.layout.join(self.folder, shard_io.part_name(shard_io.partition_id(), ".jsonl"))
        with shard_io.atomic_output(self.storage, rel) as target, \
                (open(target, "wb") if isinstance(target, str) else nullcontext(target)) as out:
            for frame in batches:
                for row in frame.astype(object).where(frame.notna(), None).to_dict("records"):
                    out.write((json.dumps(row, default=str) + "\n").encode("utf-8"))
                    rows += 1
        yield pd.DataFrame({"rows": [rows]})


def _fill_missing_shards(storage: Storage, folder: str, count: int, compression: Optional[str]) -> None:
    """Spark may skip the Python function for an empty partition: give every shard a file."""
    from hopsml.data.tfrecord import shard_name

    for index in range(count):
        rel = ds.layout.join(folder, shard_name(index, count, compression))
        if not storage.exists(rel):
            with shard_io.shard_writer(storage, folder, index, count, compression):
                pass
