"""Training data on the Spark engine: the point-in-time join, the split, the fitting of the built-in
transformation functions (Spark aggregates) and their application, all planned as Spark DataFrames; the tasks
write the training dataset (`spark_written.py`). Only counts, fitted statistics and the dataset's statistics
reach the driver; rows do only when a reader asks for a pandas frame.

Order and split as on the driver (`training.py`): the rows are sorted by the left group's key and event time and
checkpointed on the executors, one count per partition tells each task how many rows come before its own, so a
task draws a seeded random split's numbers at the rows' positions in numpy's PCG64 stream (advanced to them) and
numbers each row within its split. Both engines thus give the same rows in the same splits and shards.

Where pandas changes a column's type, this does too, so the files and statistics come out alike: a whole-number
column with a missing value is a float column (in all splits when the query's rows have one; a label encoder's
output in the splits where its input has one).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from hopsml.errors import FeatureStoreError
from hopsml.featurestore import engine, spark_written
from hopsml.featurestore.spark_written import INDEX, SPLIT, col
from hopsml.featurestore.transformations import TransformationFunction

if TYPE_CHECKING:
    import pyarrow as pa

    from hopsml.featurestore.query import Query
    from hopsml.featurestore.row_layout import RowLayout

ALL = "*"                                             # the counts of all rows, in a split or not
_UNIQUE_LIMIT = 100_000                               # as transformations.describe: no unique values above it
_INTEGRAL = ("byte", "short", "integer", "long")


def split_names(split: Mapping[str, Any]) -> list[str]:
    """The split's names in the order their DataFrames are made.

    >>> split_names({"type": "random", "sizes": {"test": 0.2}, "seed": 1})
    ['test', 'train']
    """
    if split["type"] == "none":
        return ["train"]
    if split["type"] == "random":
        return [*split["sizes"], "train"]
    return list(split["ranges"])


class Numbering:
    """Task side (mapInArrow over the key-ordered rows): the split(s) of each row and, given where each split's
    rows of this partition start (`split_starts`), its position in that split; without them, the counts of rows
    and of missing values per split that the driver needs to give those starts."""

    def __init__(self, split: Mapping[str, Any], event_time: str | None, starts: Mapping[int, int],
                 split_starts: Mapping[int, Mapping[str, int]] | None = None) -> None:
        self.split, self.event_time, self.starts = dict(split), event_time, dict(starts)
        self.split_starts = None if split_starts is None else {p: dict(s) for p, s in split_starts.items()}

    def _masks(self, batch: pa.RecordBatch, generator: Any) -> dict[str, Any]:
        import numpy as np
        import pyarrow as pa

        rows = batch.num_rows
        if self.split["type"] == "none":
            return {"train": np.ones(rows, dtype=bool)}
        if self.split["type"] == "random":
            draws = generator.random(rows)
            out, low = {}, 0.0
            for name, size in self.split["sizes"].items():
                out[name] = (draws >= low) & (draws < low + size)
                low += size
            out["train"] = draws >= low
            return out
        column = batch.column(batch.schema.get_field_index(str(self.event_time)))
        micros = column.cast(pa.timestamp("us", tz="UTC")).cast(pa.int64()).to_numpy(zero_copy_only=False)
        out = {}
        for name, (start, end) in self.split["ranges"].items():
            mask = np.ones(rows, dtype=bool)
            if start is not None:
                mask &= micros >= int(start) * 1000
            if end is not None:
                mask &= micros < int(end) * 1000
            out[name] = mask
        return out

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import numpy as np
        import pyarrow as pa

        from hopsml.data.shards import partition_id

        part = partition_id()
        generator = None
        if self.split["type"] == "random":
            bits = np.random.PCG64(self.split["seed"])   # what np.random.default_rng(seed) draws with
            bits.advance(self.starts.get(part, 0))
            generator = np.random.Generator(bits)
        names = split_names(self.split)
        counted = dict.fromkeys(names, 0)
        nulls: dict[str, dict[str, int]] = {name: {} for name in [*names, ALL]}
        total = 0
        for batch in batches:
            masks = self._masks(batch, generator)
            total += batch.num_rows
            if self.split_starts is None:
                for name, column in zip(batch.schema.names, batch.columns):
                    missing = column.is_null().to_numpy(zero_copy_only=False)
                    nulls[ALL][name] = nulls[ALL].get(name, 0) + int(missing.sum())
                    for split, mask in masks.items():
                        nulls[split][name] = nulls[split].get(name, 0) + int((missing & mask).sum())
                for split, mask in masks.items():
                    counted[split] += int(mask.sum())
                continue
            for split, mask in masks.items():
                taken = np.flatnonzero(mask)
                if not len(taken):
                    continue
                first = self.split_starts.get(part, {}).get(split, 0) + counted[split]
                counted[split] += len(taken)
                chosen = batch.take(pa.array(taken))
                yield pa.RecordBatch.from_arrays(
                    [*chosen.columns, pa.array([split] * len(taken), pa.string()),
                     pa.array(np.arange(first, first + len(taken), dtype=np.int64))],
                    names=[*chosen.schema.names, SPLIT, INDEX])
        if self.split_starts is None:
            yield pa.RecordBatch.from_pydict({
                "p": pa.array([part] * (len(names) + 1), pa.int32()), "split": pa.array([*names, ALL], pa.string()),
                "rows": pa.array([*(counted[n] for n in names), total], pa.int64()),
                "nulls": pa.array([json.dumps(nulls[n]) for n in [*names, ALL]], pa.string())})


class SparkSplits:
    """A training dataset version's splits as Spark DataFrames (`training.Splits`): each holds its rows with
    their position in the split (`INDEX`); their sizes and missing values per column were counted once."""

    def __init__(self, frames: dict[str, Any], sizes: Mapping[str, int],
                 nulls: Mapping[str, Mapping[str, int]]) -> None:
        self.frames, self._sizes, self.nulls = frames, dict(sizes), {k: dict(v) for k, v in nulls.items()}

    @classmethod
    def of(cls, layout: RowLayout, split: Mapping[str, Any], query: Query) -> SparkSplits:
        """The rows of `layout` split as `split` says (see the module docstring)."""
        from pyspark.sql import functions as F
        from pyspark.sql import types as T

        if split["type"] == "time" and not layout.event_time:
            raise FeatureStoreError(f"a time split needs an event time on the left group {query.left.key!r}")
        frame = engine.spark_frame(layout.wider).toDF(*layout.names)
        for name, source in layout.copies:
            frame = frame.withColumn(name, col(source))
        frame = frame.select(*[col(c) for c in layout.columns])
        # the order fixed once on the executors: the positions counted below are those the tasks number
        ordered = frame.orderBy(*[col(c).asc() for c in layout.order]).localCheckpoint()
        per_partition = {int(row[0]): int(row[1]) for row in
                         ordered.groupBy(F.spark_partition_id()).count().collect()}
        starts, position = {}, 0
        for part in sorted(per_partition):
            starts[part], position = position, position + per_partition[part]
        names = split_names(split)
        counts = ordered.mapInArrow(Numbering(split, layout.event_time, starts),
                                    "p int, split string, rows long, nulls string").collect()
        sizes = dict.fromkeys(names, 0)
        nulls: dict[str, dict[str, int]] = {name: {} for name in [*names, ALL]}
        by_part: dict[int, dict[str, int]] = {}
        for row in counts:
            if row["split"] != ALL:
                by_part.setdefault(int(row["p"]), {})[row["split"]] = int(row["rows"])
                sizes[row["split"]] += int(row["rows"])
            for column, missing in json.loads(row["nulls"]).items():
                nulls[row["split"]][column] = nulls[row["split"]].get(column, 0) + int(missing)
        split_starts: dict[int, dict[str, int]] = {}
        running = dict.fromkeys(names, 0)
        for part in sorted(by_part):
            split_starts[part] = dict(running)
            for name, rows in by_part[part].items():
                running[name] += rows
        schema = T.StructType([*ordered.schema.fields, T.StructField(SPLIT, T.StringType()),
                               T.StructField(INDEX, T.LongType())])
        numbered = ordered.mapInArrow(Numbering(split, layout.event_time, starts, split_starts), schema)
        # a whole-number column with a missing value is a float column in pandas, in every split
        widened = [f.name for f in ordered.schema.fields if f.dataType.typeName() in _INTEGRAL
                   and nulls[ALL].get(f.name, 0)]
        if widened:
            numbered = numbered.withColumns({name: col(name).cast("double") for name in widened})
        frames = {name: numbered.where(F.col(SPLIT) == name) for name in names}
        return cls(frames, sizes, nulls)

    @property
    def columns(self) -> list[str]:
        return [c for c in next(iter(self.frames.values())).columns if c not in (SPLIT, INDEX)]

    def sizes(self) -> dict[str, int]:
        return dict(self._sizes)

    def fit(self, functions: Sequence[TransformationFunction]) -> list[TransformationFunction]:
        """Each function fitted on the training split by Spark aggregates (transformations.describe's values)."""
        from hopsml.featurestore.transformations import BUILTINS

        train = self.frames["train"]
        fitted = []
        for function in functions:   # refused before the version is recorded, not when its rows are made
            if function.fn is not None or function.name not in BUILTINS:
                raise _user_function(function)
            if not function.needs_statistics:
                fitted.append(function)
                continue
            missing = [f for f in function.features if f not in train.columns]
            if missing:
                raise FeatureStoreError(f"{function.name} transforms {missing[0]!r}, which the feature view does not "
                                        f"select (it has {', '.join(self.columns)})")
            fitted.append(replace(function, statistics={f: describe(train, f) for f in function.features}))
        return fitted

    def transformed(self, fitted: Sequence[TransformationFunction]) -> SparkSplits:
        frames = {}
        for name, frame in self.frames.items():
            for function in fitted:
                frame = apply(frame, function, self.nulls.get(name, {}))
            frames[name] = frame
        return SparkSplits(frames, self._sizes, self.nulls)

    def shown(self, dropped: Sequence[str], renamed: Mapping[str, str]) -> SparkSplits:
        frames = {name: frame.drop(*[c for c in dropped if c in frame.columns]).withColumnsRenamed(dict(renamed))
                  for name, frame in self.frames.items()}
        nulls = {split: {renamed.get(c, c): n for c, n in counts.items()} for split, counts in self.nulls.items()}
        return SparkSplits(frames, self._sizes, nulls)

    def out(self, name: str, labels: Sequence[str], dataframe_type: str) -> tuple[Any, Any]:
        """(features, labels) of split `name`: Spark DataFrames for 'spark' (in key order, lazy), else the rows
        brought to the driver as pandas frames (the caller makes them what dataframe_type asks)."""
        frame = self.frames[name].orderBy(INDEX).drop(SPLIT, INDEX)
        if dataframe_type.lower() == "spark":
            return frame.drop(*labels), (frame.select(*[col(c) for c in labels]) if labels else None)
        rows = frame.toArrow().to_pandas()
        return rows.drop(columns=list(labels)), (rows[list(labels)] if labels else None)

    def write(self, storage: Any, project: str, name: str, labels: Sequence[str], keys: Sequence[str], shards: int,
              source: str) -> Any:
        return spark_written.write(storage, project, name, self.frames, self._sizes, labels, keys, shards, source)

    def statistics(self, labels: Sequence[str], keys: Sequence[str], where: str) -> tuple[dict[str, Any],
                                                                                          list[str]]:
        tables, features = spark_written.tables(self.frames, labels, keys, where)
        return spark_written.dataset_stats(tables, self._sizes), features


def describe(frame: Any, feature: str) -> dict[str, Any]:
    """`transformations.describe` of one column by Spark aggregates: count and missing (NaN is missing, as in
    pandas), min, max, mean, stddev (population), the 100 percentiles (exact, interpolated as numpy's) for
    numbers, and the sorted unique values when there are at most 100,000."""
    from pyspark.sql import functions as F

    kind = frame.schema[feature].dataType.typeName()
    numeric = kind in (*_INTEGRAL, "float", "double")
    value = col(feature)
    if kind in ("float", "double"):
        value = F.when(F.isnan(value), None).otherwise(value)
    present = frame.select(value.alias("v")).where(F.col("v").isNotNull())
    numbers = F.col("v").cast("double")
    aggregates = [F.count(F.lit(1)).alias("count")]
    if numeric:
        aggregates += [F.min(numbers).alias("min"), F.max(numbers).alias("max"), F.avg(numbers).alias("mean"),
                       F.stddev_pop(numbers).alias("stddev"),
                       F.percentile(numbers, [i / 100 for i in range(100)]).alias("percentiles")]
    row = present.agg(*aggregates).collect()[0]
    total = frame.count()
    out: dict[str, Any] = {"count": int(row["count"]), "missing": int(total - row["count"])}
    if numeric and row["count"]:
        out.update(min=float(row["min"]), max=float(row["max"]), mean=float(row["mean"]),
                   stddev=float(row["stddev"]), percentiles=[float(p) for p in row["percentiles"]])
    uniques = [r["v"] for r in present.distinct().limit(_UNIQUE_LIMIT + 1).collect()]
    if len(uniques) <= _UNIQUE_LIMIT:
        out["unique_values"] = sorted(uniques)
    return out


def _user_function(function: TransformationFunction) -> FeatureStoreError:
    return FeatureStoreError(f"transformation function {function.name!r} is a user function (@udf), which the "
                             "Spark engine does not run yet; give read_options={'engine': 'duckdb'} (the rows then "
                             "pass through the driver) or use the built-in functions")


def apply(frame: Any, function: TransformationFunction, nulls: Mapping[str, int]) -> Any:
    """`frame` with a fitted built-in's output columns (Spark expressions, the values `_builtin` gives) and
    without the inputs it drops; `nulls` (missing values per column of this split) decides whether a label
    encoder's output is whole numbers or, as pandas makes it when one is missing, floats."""
    import math

    from pyspark.sql import functions as F

    from hopsml.featurestore.transformations import _NUMERIC, BUILTINS

    if function.fn is not None or function.name not in BUILTINS:
        raise _user_function(function)
    if function.needs_statistics and not function.statistics:
        raise FeatureStoreError(f"{function.name}({', '.join(function.features)}) needs statistics: fit it on a "
                                "training split first (train_test_split, training_data or init_batch_scoring)")
    feature = function.features[0]
    stats = function.statistics[feature]
    names = function.output_column_names
    kind = frame.schema[feature].dataType.typeName()
    value = col(feature)
    missing = value.isNull() | F.isnan(value) if kind in ("float", "double") else value.isNull()
    outputs: dict[str, Any]
    if function.name in _NUMERIC:
        if "mean" not in stats:
            raise FeatureStoreError(f"{function.name} needs numbers; its training values were not numeric")
        center, spread = {"min_max_scaler": (stats["min"], stats["max"] - stats["min"]),
                          "standard_scaler": (stats["mean"], stats["stddev"]),
                          "robust_scaler": (stats["percentiles"][49],
                                            stats["percentiles"][74] - stats["percentiles"][24])}[function.name]
        shifted = value.cast("double") - F.lit(float(center))
        if spread == 0:   # IEEE's x / 0 (Spark's ANSI division refuses it): a signed infinity, 0 / 0 missing
            sign = math.copysign(1.0, spread)
            scaled = F.when(shifted > 0, F.lit(sign * math.inf)).when(shifted < 0, F.lit(-sign * math.inf))
        else:
            scaled = shifted / F.lit(float(spread))
        outputs = {names[0]: F.when(missing | F.isnan(scaled), None).otherwise(scaled)}
    else:
        categories = list(stats.get("unique_values") or [])
        index = ((F.array_position(F.array(*[F.lit(c) for c in categories]).cast(
            f"array<{frame.schema[feature].dataType.simpleString()}>"), value) - 1).cast("int")
            if categories else F.lit(-1).cast("int"))
        index = F.when(missing, None).otherwise(index)
        if function.name == "label_encoder":
            outputs = {names[0]: index.cast("double") if nulls.get(feature, 0) else index}
        else:
            outputs = {name: F.coalesce(index == at, F.lit(False)) for at, name in enumerate(names)}
    dropped = [f for f in function.drop if f in frame.columns and f not in outputs]
    return frame.withColumns(outputs).drop(*dropped)
