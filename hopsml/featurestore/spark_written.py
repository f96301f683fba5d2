"""A training dataset written by Spark's tasks, in the layout `materialize.py` writes from pandas: the same
columns and types, the same Parquet and TFRecord shards per split (each task writes whole shards, a shard the
same key-ordered slice of its split as there), petastorm's metadata, the manifest and stats.json (computed by
Spark aggregates). The driver gets row counts and statistics, never the rows."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from hopsml import layout
from hopsml.data import dataset as ds
from hopsml.data import shards as shard_io
from hopsml.errors import FeatureStoreError
from hopsml.featurestore import engine, materialize
from hopsml.fs import Storage

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame as SparkFrame

SPLIT, INDEX = "__hopsml_split", "__hopsml_index"   # a row's split and its position in it (key order)
SHARD = "__hopsml_shard"
_NUMBERS = {"long": "int64", "double": "float64"}


def col(name: str) -> Any:
    """A column by its name as it is (Spark's col() parses dots and backticks)."""
    return engine._spark_col("", name)


def tables(frames: Mapping[str, Any], labels: Sequence[str], keys: Sequence[str], where: str
           ) -> tuple[dict[str, Any], list[str]]:
    """Each split as the dataset's columns (`materialize._table`'s, as Spark DataFrames: times as epoch
    milliseconds, booleans and whole numbers as int64, other numbers float64, the rest strings, plus the
    `features` vector and `label`), and the columns `features` holds."""
    from pyspark.sql import functions as F

    outside = {*labels, *keys}
    out: dict[str, Any] = {}
    numeric: list[str] = []
    for split, frame in frames.items():
        columns: dict[str, Any] = {}
        numeric = []
        for field in frame.schema.fields:
            if field.name in (SPLIT, INDEX):
                continue
            kind, value = field.dataType.typeName(), col(field.name)
            if kind.startswith("timestamp"):
                columns[field.name] = F.unix_millis(value.cast("timestamp"))
            elif kind in ("boolean", "byte", "short", "integer", "long"):
                columns[field.name] = value.cast("long")
            elif kind in ("float", "double"):
                columns[field.name] = F.when(F.isnan(value), None).otherwise(value.cast("double"))
            else:
                columns[field.name] = value.cast("string")
                continue
            if field.name not in outside:
                numeric.append(field.name)
        if numeric:   # a missing value is NaN in the vector, as numpy's float32 matrix holds it
            columns["features"] = F.array(*[F.coalesce(columns[n].cast("float"), F.lit(float("nan")).cast("float"))
                                            for n in numeric])
        if len(labels) == 1 and labels[0] in columns and labels[0] != "label":
            columns["label"] = columns[labels[0]]
        if not columns:
            raise FeatureStoreError(f"{where}: nothing to write (no features and no labels)")
        out[split] = frame.select(*[c.alias(n) for n, c in columns.items()], col(SPLIT), col(INDEX))
    return out, numeric


def arrow_schema(frame: SparkFrame) -> pa.Schema:
    """The Arrow schema of the dataset's columns, as pyarrow types the pandas path's table."""
    import pyarrow as pa

    fields = []
    for field in frame.schema.fields:
        if field.name in (SPLIT, INDEX, SHARD):
            continue
        kind = field.dataType.typeName()
        fields.append(pa.field(field.name, pa.list_(pa.float32()) if kind == "array" else
                               getattr(pa, _NUMBERS[kind])() if kind in _NUMBERS else pa.string()))
    return pa.schema(fields)


class ShardWriter:
    """Task side: the shards whose rows this task holds (ordered by split, shard and position), each written
    whole as its Parquet file and its TFRecord shard through the fs layer; yields the rows of each."""

    def __init__(self, storage: Storage, stage: ds.DatasetDir, schema: pa.Schema, counts: Mapping[str, int]
                 ) -> None:
        self.storage, self.stage, self.schema, self.counts = storage, stage, schema, dict(counts)

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import numpy as np
        import pyarrow as pa

        written: list[tuple[str, int, int]] = []
        current: tuple[str, int] | None = None
        parts: list[pa.Table] = []
        for batch in batches:
            if not batch.num_rows:
                continue
            splits = batch.column(batch.schema.get_field_index(SPLIT)).to_pylist()
            shards = batch.column(batch.schema.get_field_index(SHARD)).to_numpy(zero_copy_only=False)
            keys = [(s, int(n)) for s, n in zip(splits, shards)]
            starts = [0, *(i for i in range(1, len(keys)) if keys[i] != keys[i - 1])]
            table = pa.Table.from_batches([batch]).select(self.schema.names).cast(self.schema)
            for first, end in zip(starts, [*starts[1:], len(keys)]):
                if keys[first] != current:
                    if current is not None:
                        written.append(self._write(current, parts))
                    current, parts = keys[first], []
                parts.append(table.slice(first, end - first))
        if current is not None:
            written.append(self._write(current, parts))
        yield pa.RecordBatch.from_pydict({
            "split": pa.array([w[0] for w in written], pa.string()),
            "shard": pa.array(np.array([w[1] for w in written], dtype=np.int32)),
            "rows": pa.array(np.array([w[2] for w in written], dtype=np.int64))})

    def _write(self, key: tuple[str, int], parts: list[pa.Table]) -> tuple[str, int, int]:
        """One shard, whole: a Parquet file of one write (as the pandas path writes it) and its TFRecord shard."""
        import pyarrow as pa

        table = pa.concat_tables(parts) if parts else self.schema.empty_table()
        write_shard(self.storage, self.stage, key[0], key[1], self.counts[key[0]], table)
        return key[0], key[1], table.num_rows


def write_shard(storage: Storage, stage: ds.DatasetDir, split: str, shard: int, count: int, table: pa.Table) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from hopsml.data.tables.writers import _write_examples

    numeric = [n for n in table.column_names if not pa.types.is_string(table.schema.field(n).type)]
    with shard_io.atomic_output(storage, layout.join(stage.parquet(split), shard_io.part_name(shard))) as target:
        pq.write_table(table, target, compression="snappy")
    with shard_io.shard_writer(storage, stage.tfrecord(split), shard, count, None) as records:
        _write_examples(records, table.select(numeric))


def write(storage: Storage, project: str, name: str, frames: Mapping[str, Any], sizes: Mapping[str, int],
          labels: Sequence[str], keys: Sequence[str], shards: int, source: str, overwrite: bool = False) -> Any:
    """Write the splits (`frames`: Spark DataFrames with each row's position in its split) as the prepared
    dataset `name`, by the tasks: split `s` of `n` rows in `min(shards, n)` shards (one when empty), shard `k`
    its rows `n*k//count` up to `n*(k+1)//count` in key order, as `materialize.write` cuts them."""
    from pyspark.sql import functions as F

    converted, features = tables(frames, labels, keys, source)
    counts = {split: max(1, min(shards, int(sizes[split]))) for split in frames}
    schemas = {split: arrow_schema(frame) for split, frame in converted.items()}
    with ds.staged(storage, project, name, overwrite) as stage:
        for split, frame in converted.items():   # one job a split: a column's type may differ between splits
            storage.makedirs(stage.parquet(split))
            storage.makedirs(stage.tfrecord(split))
            rows, count = int(sizes[split]), counts[split]
            if not rows:   # an empty split: one empty shard, as the pandas path writes it
                write_shard(storage, stage, split, 0, 1, schemas[split].empty_table())
            else:   # shard k holds the split's rows n*k//count up to n*(k+1)//count
                shard = F.expr(f"(({INDEX} + 1) * {count} + {rows - 1}) div {rows} - 1").cast("int")
                writer = ShardWriter(storage, stage, schemas[split], counts)
                done = sum(int(row["rows"]) for row in (
                    frame.withColumn(SHARD, shard).repartition(count, SHARD).sortWithinPartitions(SHARD, INDEX)
                    .mapInArrow(writer, "split string, shard int, rows long").collect()))
                if done != rows:
                    raise ds.DatasetError(f"{source}: split {split!r}: the tasks wrote {done} rows of {rows}; "
                                          "create the training dataset again")
            unischema = materialize.unischema_of(name, schemas[split], len(features))
            shard_io.write_petastorm_metadata(storage, stage.parquet(split), schemas[split], unischema,
                                              {shard_io.part_name(i): 1 for i in range(count)})
        schema = next(iter(schemas.values()))
        return materialize.seal(storage, stage, name, source, schema, features, labels, shards,
                                {s: int(sizes[s]) for s in frames}, counts, dataset_stats(converted, sizes))


def dataset_stats(converted: Mapping[str, Any], sizes: Mapping[str, int]) -> dict[str, Any]:
    """`materialize.dataset_stats` of the dataset's columns by Spark aggregates: per numeric column count,
    missing, min, max, mean, median, std (ddof 1), zeros, distinct and the histogram over `data.stats`' edges;
    per string column its count, missing, distinct and top values."""
    per = {split: _split_stats(frame) for split, frame in converted.items()}
    names = [c for c in next(iter(converted.values())).columns if c not in (SPLIT, INDEX)]
    return materialize.assembled_stats(per, names, {s: int(sizes[s]) for s in converted})


def _split_stats(frame: SparkFrame) -> dict[str, Any]:
    import pyarrow as pa
    from pyspark.sql import functions as F

    from hopsml.data import stats as data_stats

    schema = arrow_schema(frame)
    numeric = [f.name for f in schema if not pa.types.is_string(f.type) and not pa.types.is_list(f.type)]
    text = [f.name for f in schema if pa.types.is_string(f.type)]
    out: dict[str, Any] = {}
    aggregates = [F.count(F.lit(1)).alias("rows")]
    for i, name in enumerate(numeric):
        value = col(name).cast("double")
        aggregates += [F.count(value).alias(f"n{i}"), F.min(value).alias(f"lo{i}"), F.max(value).alias(f"hi{i}"),
                       F.avg(value).alias(f"mean{i}"), F.percentile(value, 0.5).alias(f"median{i}"),
                       F.stddev_samp(value).alias(f"std{i}"), F.count(F.when(value == 0, 1)).alias(f"zeros{i}"),
                       F.count_distinct(value).alias(f"distinct{i}")]
    for i, name in enumerate(text):
        aggregates += [F.count(col(name)).alias(f"t{i}"), F.count_distinct(col(name)).alias(f"tdistinct{i}")]
    row = frame.agg(*aggregates).collect()[0]
    histograms = []
    for i, name in enumerate(numeric):
        present = int(row[f"n{i}"])
        summary: dict[str, Any] = {"count": present, "missing": int(row["rows"]) - present}
        if present:
            summary.update(min=float(row[f"lo{i}"]), max=float(row[f"hi{i}"]), mean=float(row[f"mean{i}"]),
                           median=float(row[f"median{i}"]),
                           std=float(row[f"std{i}"]) if present > 1 else 0.0, zeros=int(row[f"zeros{i}"]),
                           distinct=int(row[f"distinct{i}"]))
            histograms.append((name, data_stats._edges(summary["min"], summary["max"])))
        out[name] = {**summary, "kind": "numeric"}
    if histograms:   # numpy's bins: [e_j, e_j+1), the last one closed
        bins = []
        for i, (name, edges) in enumerate(histograms):
            value = col(name).cast("double")
            inside = value.isNotNull() & (value >= edges[0]) & (value <= edges[-1])
            index = sum((F.when(value >= edge, 1).otherwise(0) for edge in edges[1:-1]), F.lit(0))
            bins += [F.count(F.when(inside & (index == j), 1)).alias(f"h{i}_{j}") for j in range(len(edges) - 1)]
        counted = frame.agg(*bins).collect()[0]
        for i, (name, edges) in enumerate(histograms):
            out[name]["histogram"] = {"edges": [float(e) for e in edges],
                                      "counts": [int(counted[f"h{i}_{j}"]) for j in range(len(edges) - 1)]}
    for i, name in enumerate(text):
        present = int(row[f"t{i}"])
        top = (frame.where(col(name).isNotNull()).groupBy(col(name).alias("v")).count()
               .orderBy(F.desc("count"), F.asc("v")).limit(data_stats.TOP_VALUES).collect())
        out[name] = {"count": present, "missing": int(row["rows"]) - present, "distinct": int(row[f"tdistinct{i}"]),
                     "top": [[str(r["v"]), int(r["count"])] for r in top], "kind": "categorical"}
    return out
