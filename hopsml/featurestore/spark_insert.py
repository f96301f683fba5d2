"""A Spark DataFrame inserted by Spark: its tasks write the Parquet files into the group's table folder and the
driver commits them to the Delta log with delta-rs. No row reaches the driver (the checks, the files a batch
updates and the statistics are Spark jobs whose results are counts, a few sample values and file names), and
no Delta jars are needed.

A batch that only adds (primary key, event time) pairs adds files. One that updates pairs already there
rewrites the files holding them (copy on write): their rows the batch does not replace, with the batch, are
written as new files, and one commit removes the old files and adds the new ones, so a reader sees the table
before or after the insert, never between. The old files stay for time travel.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import logging
import os
import shutil
import time
import urllib.parse
import uuid
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, TypeGuard

from hopsml.errors import FeatureStoreError
from hopsml.featurestore import frames
from hopsml.featurestore.table import Commit, GroupTable, logged_files, spark_reader

if TYPE_CHECKING:
    import pyarrow as pa
    from deltalake import DeltaTable
    from pyspark.sql import Column, SparkSession
    from pyspark.sql import DataFrame as SparkFrame
    from pyspark.sql.types import StructType

log = logging.getLogger(__name__)

_NULL_PARTITION = "__HIVE_DEFAULT_PARTITION__"


def is_spark(data: object) -> TypeGuard[SparkFrame]:
    return type(data).__module__.startswith("pyspark") and hasattr(data, "sparkSession")


def prepared(frame: SparkFrame, primary_key: Sequence[str], event_time: str | None, partition_key: Sequence[str],
             schema: pa.Schema | None, group: str, duplicates: str = frames.KEEP_LAST
             ) -> tuple[SparkFrame, pa.Schema, list[str]]:
    """The batch checked and in the group's schema (`schema`, None before the first insert), as frames.py checks
    an Arrow batch, by Spark jobs: (the frame, its Arrow schema, the columns it adds). A key the batch repeats
    keeps its last row in the frame's order (or refuses the batch with duplicates='refuse')."""
    import pyarrow as pa
    from pyspark.sql import functions as F
    from pyspark.sql.pandas.types import from_arrow_type

    frames.lower_names(pa.schema([pa.field(c, pa.null()) for c in frame.columns]).empty_table())
    frame = frame.toDF(*[c.lower() for c in frame.columns])
    needed = [*primary_key, *([event_time] if event_time else [])]
    missing = [c for c in needed if c not in frame.columns]
    if missing:
        raise FeatureStoreError(f"feature group {group!r}: the batch has no column {missing[0]!r} (its columns: "
                                f"{', '.join(frame.columns)})")
    # one job: the rows per key, summed into the nulls per key column and the keys seen more than once
    per_key = frame.groupBy(*needed).count()
    found = per_key.agg(*[F.sum(F.when(F.col(c).isNull(), F.col("count")).otherwise(0)).alias(c) for c in needed],
                        F.sum((F.col("count") > 1).cast("long")).alias("__repeated")).collect()[0]
    for column in needed:
        if found[column]:
            what = "event time" if column == event_time else "primary key"
            raise FeatureStoreError(f"feature group {group!r}: {what} column {column!r} is missing in "
                                    f"{found[column]} rows; every row needs one")
    if found["__repeated"]:
        first = per_key.where("count > 1").limit(1).collect()[0]
        shown = {c: first[c] for c in needed}
        what = "(primary key, event time)" if event_time else "primary key"
        if duplicates == frames.REFUSE:
            raise FeatureStoreError(f"feature group {group!r}: {found['__repeated']} keys appear more than once in "
                                    f"the batch, e.g. {shown} ({first['count']} rows); the write option "
                                    f"duplicate_keys='refuse' allows each {what} once (leave it out to keep the "
                                    "last row of each)")
        from pyspark.sql import Window

        log.warning("feature group %s: %d keys appear more than once in the batch (e.g. %s): kept the last row of "
                    "each, as Hopsworks' upsert does (write_options={'duplicate_keys': 'refuse'} refuses such a "
                    "batch)", group, found["__repeated"], shown)
        last = Window.partitionBy(*[F.col(f"`{c}`") for c in needed]).orderBy(F.col("__hopsml_row").desc())
        frame = (frame.withColumn("__hopsml_row", F.monotonically_increasing_id())
                 .withColumn("__hopsml_rank", F.row_number().over(last))
                 .where("__hopsml_rank = 1").drop("__hopsml_rank", "__hopsml_row"))
    if event_time:
        frame = frame.withColumn(event_time, _event_time(frame, event_time, group))
    given = _arrow_schema(frame.schema)
    _, added = frames.conform(given.empty_table(), schema, group)
    if schema is None:
        frames.check_partition_key(given.empty_table(), partition_key, group)
        target = given
    else:
        target = pa.schema([*schema, *[given.field(n).with_nullable(True) for n in added]])
    columns = [(F.col(f"`{f.name}`") if f.name in frame.columns else F.lit(None))
               .cast(from_arrow_type(f.type)).alias(f.name) for f in target]
    return frame.select(*columns), target, added


def _arrow_schema(schema: StructType) -> pa.Schema:
    """A Spark schema in Arrow's types, timestamps in UTC (Spark 4 asks for the zone; 3.5 takes UTC)."""
    import inspect

    from pyspark.sql.pandas.types import to_arrow_schema

    if "timezone" in inspect.signature(to_arrow_schema).parameters:
        return to_arrow_schema(schema, timezone="UTC")
    return to_arrow_schema(schema)


def _event_time(frame: SparkFrame, column: str, group: str) -> Column:
    """The event time as a timestamp column: a timestamp, a date, or int64 epoch milliseconds (frames.py)."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import DateType, IntegralType, TimestampNTZType, TimestampType

    kind = frame.schema[column].dataType
    if isinstance(kind, TimestampType):
        return F.col(column)
    if isinstance(kind, TimestampNTZType):   # naive: taken as UTC
        return F.to_utc_timestamp(F.col(column).cast("string"), "UTC")
    if isinstance(kind, DateType):
        return F.to_utc_timestamp(F.col(column).cast("timestamp_ntz").cast("string"), "UTC")
    if isinstance(kind, IntegralType):
        return F.timestamp_millis(F.col(column))
    sample = frame.where(F.col(column).isNotNull()).select(column).limit(1).collect()
    raise FeatureStoreError(f"event_time column {column!r} is {kind.simpleString()}, not a time (e.g. "
                            f"{sample[0][0] if sample else None!r}): give a timestamp, a date, or int64 epoch "
                            "milliseconds")


def write(table: GroupTable, frame: SparkFrame, schema: pa.Schema, added: Sequence[str]) -> Commit:
    """Write the batch with Spark's tasks and commit its files as one Delta commit (see the module docstring);
    the caller holds the group's lock, so the files it rewrites are the table's newest."""
    from deltalake import DeltaTable

    created = not table.exists()
    if created:   # the table's schema and partitioning (a CREATE TABLE commit, not an insert)
        DeltaTable.create(table.uri, schema=schema, partition_by=table.partition_by or None)
    try:
        return _write(table, frame, schema, added)
    except BaseException:
        if created:   # nothing was inserted: the group has no table yet, as before the call
            shutil.rmtree(os.path.join(table.uri, "_delta_log"), ignore_errors=True)
        raise


def _write(table: GroupTable, frame: SparkFrame, schema: pa.Schema, added: Sequence[str]) -> Commit:
    from deltalake import CommitProperties, DeltaTable
    from deltalake.transaction import RemoveAction
    from pyspark.sql import functions as F

    spark = frame.sparkSession
    partitions = [f.name for f in table.partitioning()]
    logged = _logged(DeltaTable(table.uri), table)   # each live file: (its path in the log, its rows)
    touched: dict[str, int] = {}                          # file -> how many of its rows the batch updates
    if logged:
        existing = table.spark(spark).select(*table.keys, F.col("_metadata.file_path").alias("__file"))
        hits = existing.join(frame.select(*table.keys), table.keys, "left_semi").groupBy("__file").count()
        touched = {_local(row["__file"]): int(row["count"]) for row in hits.collect()}
    out = frame
    if touched:
        kept = (spark_reader(spark, table.uri).schema(frame.schema).parquet(*touched)
                .join(frame.select(*table.keys), table.keys, "left_anti"))
        out = kept.unionByName(frame)
    staging = os.path.join(table.uri, f"spark-{uuid.uuid4().hex}")
    try:
        with _micros(spark):
            writer = out.write.mode("error")
            (writer.partitionBy(*partitions) if partitions else writer).parquet(staging)
        adds = _moved(staging, table.uri, partitions)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    delta = DeltaTable(table.uri)
    if added:
        from hopsml.featurestore.table import _delta_field

        delta.alter.add_columns([_delta_field(schema.field(n)) for n in added])
        delta = DeltaTable(table.uri)
    now = int(time.time() * 1000)
    removes = [RemoveAction(logged[path][0], True, now) for path in touched]
    # the new files hold the rewritten files' kept rows again: rows inserted are the difference
    inserted = sum(rows for _, rows in adds) - sum(logged[path][1] for path in touched)
    properties = CommitProperties(custom_metadata={
        "hopsml.added_columns": ",".join(added), "hopsml.operation": "SPARK INSERT",
        "hopsml.inserted": str(inserted), "hopsml.updated": str(sum(touched.values()))})
    delta.create_write_transaction([*(add for add, _ in adds), *removes], mode="append", schema=schema,
                                   partition_by=partitions or None, commit_properties=properties)
    return table.commits(1)[0]


@contextlib.contextmanager
def _micros(spark: SparkSession) -> Iterator[None]:
    """Timestamps written as Parquet's TIMESTAMP_MICROS (Delta's timestamp), not Spark's default INT96."""
    key = "spark.sql.parquet.outputTimestampType"
    before = spark.conf.get(key, None)
    spark.conf.set(key, "TIMESTAMP_MICROS")
    try:
        yield
    finally:
        if before is None:
            spark.conf.unset(key)
        else:
            spark.conf.set(key, before)


def _moved(staging: str, root: str, partitions: Sequence[str]) -> list[tuple[Any, int]]:
    """Spark's Parquet files moved from `staging` into the table's own folders (`column=value/`, as delta-rs
    lays them out), each with its Delta add action and row count (from its footer)."""
    import pyarrow.parquet as pq
    from deltalake.transaction import AddAction

    out = []
    for folder, _, names in os.walk(staging):
        for name in sorted(n for n in names if n.endswith(".parquet") and not n.startswith((".", "_"))):
            relative = os.path.relpath(folder, staging)
            parts = [] if relative == "." else relative.split(os.sep)
            values = {}
            for part in parts:
                column, _, value = part.partition("=")
                value = urllib.parse.unquote(value)
                values[column] = None if value == _NULL_PARTITION else value
            if sorted(values) != sorted(partitions):
                raise FeatureStoreError(f"Spark wrote {os.path.join(relative, name)}, outside the partitions "
                                        f"{partitions}")
            target_dir = os.path.join(root, *parts)
            os.makedirs(target_dir, exist_ok=True)
            target = os.path.join(target_dir, name)
            os.replace(os.path.join(folder, name), target)
            rows = pq.read_metadata(target).num_rows
            stat = os.stat(target)
            path = "/".join([*parts, name])   # delta-rs encodes it in the log
            out.append((AddAction(path, stat.st_size, values, int(stat.st_mtime * 1000), True,
                                  json.dumps({"numRecords": rows})), rows))
    return out


def _logged(delta: DeltaTable, table: GroupTable) -> dict[str, tuple[str, int]]:
    """Each file of the table's newest version, by its local path: its path relative to the table (decoded, as
    delta-rs takes an action's path: it encodes it in the log), its rows."""
    import pyarrow as pa

    actions = pa.table(delta.get_add_actions(flatten=True))
    if not actions.num_rows:
        return {}
    paths, rows = actions.column("path").to_pylist(), actions.column("num_records").to_pylist()
    return {os.path.normpath(local): (urllib.parse.unquote(path), int(count or 0))
            for local, path, count in zip(logged_files(delta, table.location), paths, rows)}


def _local(uri: str) -> str:
    """A file path as Spark's _metadata.file_path gives it (file:/..., escaped) made a plain local path."""
    parsed = urllib.parse.urlparse(uri)
    return os.path.normpath(urllib.parse.unquote(parsed.path if parsed.scheme else uri))


def statistics(frame: SparkFrame, config: dict[str, Any]) -> dict[str, Any]:
    """Statistics of a Spark DataFrame in stats.py's form (count, missing, min/max/mean/std, histogram; top
    values and distinct counts of the rest), by Spark jobs: what the driver gets back are the aggregates."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import BooleanType, DateType, NumericType, StringType, TimestampType

    from hopsml.data import stats as dataset_stats

    wanted = config.get("columns") or frame.columns
    kinds = {f.name: f.dataType for f in frame.schema.fields if f.name in wanted}
    numeric = [c for c, k in kinds.items() if isinstance(k, (NumericType, BooleanType))]
    categorical = [c for c, k in kinds.items() if isinstance(k, StringType)]
    times = [c for c, k in kinds.items() if isinstance(k, (TimestampType, DateType))]
    split = frame.select(*[F.col(f"`{c}`").cast("double").alias(c) if c in numeric else F.col(f"`{c}`")
                           for c in kinds]).withColumn("__split", F.lit("all"))
    table, _, _ = dataset_stats.table_stats_and_counts(split, "__split", ["all"], numeric, categorical)
    out: dict[str, Any] = {}
    for column in table["columns"]:
        summary = dict(column["splits"]["all"])
        summary["kind"] = column["type"]
        if column["type"] == "numeric" and not config.get("histograms", True):
            summary.pop("histogram", None)
        summary.pop("median", None)
        out[column["name"]] = summary
    edges = {c: s["histogram"]["edges"] for c, s in out.items() if "histogram" in s}
    for column, counts in _histograms(split, edges).items():
        out[column]["histogram"]["counts"] = counts
    if times:
        bounds = split.agg(*[F.count(c).alias(f"{c}__n") for c in times], *[F.min(c).alias(f"{c}__lo") for c in times],
                           *[F.max(c).alias(f"{c}__hi") for c in times]).collect()[0]
        rows = table["rows"]["all"]
        for c in times:
            out[c] = {"count": bounds[f"{c}__n"], "missing": rows - bounds[f"{c}__n"], "kind": "time",
                      **({"min": str(_utc(bounds[f"{c}__lo"])), "max": str(_utc(bounds[f"{c}__hi"]))}
                         if bounds[f"{c}__n"] else {})}
    return {"rows": table["rows"]["all"], "columns": {c: out[c] for c in kinds if c in out}}


def _histograms(frame: SparkFrame, edges: dict[str, Sequence[float]]) -> dict[str, list[int]]:
    """Each column's counts in the buckets of its `edges` (the last closed), all in one Spark job."""
    from pyspark.sql import functions as F

    if not edges:
        return {}
    cells = []
    for column, bounds in edges.items():
        width = (bounds[-1] - bounds[0]) / (len(bounds) - 1) or 1.0
        bucket = F.least(F.greatest(F.floor((F.col(f"`{column}`") - bounds[0]) / width), F.lit(0)),
                         F.lit(len(bounds) - 2)).cast("int")
        cells.append(F.struct(F.lit(column).alias("c"), F.when(F.col(f"`{column}`").isNotNull(), bucket).alias("b")))
    exploded = frame.select(F.explode(F.array(*cells)).alias("cell")).where("cell.b IS NOT NULL")
    out = {column: [0] * (len(bounds) - 1) for column, bounds in edges.items()}
    for row in exploded.groupBy("cell.c", "cell.b").count().collect():
        out[row["c"]][int(row["b"])] = int(row["count"])
    return out


def _utc(value: object) -> object:
    if isinstance(value, dt.datetime) and value.tzinfo is None:   # Spark hands timestamps in local time
        return value.astimezone(dt.timezone.utc)
    return value
