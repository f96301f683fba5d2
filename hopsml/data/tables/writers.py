"""The Python tasks that write a table's shards (Parquet and TFRecord through the fs layer) and its rejected rows."""

from __future__ import annotations

import json
import pickle
import zlib
from collections.abc import Iterator, Mapping
from contextlib import ExitStack, nullcontext
from typing import TYPE_CHECKING, Any

import numpy as np

from hopsml import layout
from hopsml.data import dataset as ds
from hopsml.data import shards as shard_io
from hopsml.data.tables.options import SAMPLED, SHARD, SPLIT
from hopsml.data.tables.transform import Transform
from hopsml.formats.example import encode_example, encode_examples
from hopsml.fs import Storage

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa

    from hopsml.formats.tfrecord import TFRecordWriter


class TableShardWriter:
    """Transform and write the shards whose rows a task holds, each as its Parquet file and its TFRecord
    shard, both through the fs layer, so a table lands on every root hopsml supports (S3 too, without Spark's
    Hadoop connectors). Every (split, shard) lies in one task only: the rows are partitioned by them.
    Works on Arrow batches: the Parquet side writes them as they come, the TFRecord side encodes a
    whole group of rows with numpy (:func:`encode_examples`), row by row only where a value is null."""

    def __init__(self, storage: Storage, stage: ds.DatasetDir, counts: Mapping[str, int],
                 compression: str | None, transform: Transform, edges: Mapping[str, list[float] | None],
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
        dictionary = [name for name, dtype in self.transform.dtypes.items()
                      if name != "features" and dtype != "float64"]
        sketches: dict[str, dict[str, NumericSketch]] = {}   # split -> column -> its rows as read
        with ExitStack() as stack:
            open_shards: dict[tuple[str, int], tuple[Any, Any]] = {}
            for batch in batches:
                if not batch.num_rows:
                    continue
                # (split, shard) as one integer per row: numpy's string ops on the keys took 29 ms a batch
                split_codes = pc.index_in(batch.column(SPLIT), value_set=split_names).to_numpy(zero_copy_only=False)
                shard_numbers = batch.column(SHARD).to_numpy(zero_copy_only=False).astype(np.int64)
                codes = np.unique(split_codes)
                in_sample = batch.column(SAMPLED).to_numpy(zero_copy_only=False)
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
                            self.storage, layout.join(self.stage.parquet(key[0]), shard_io.part_name(key[1]))))
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


def _write_examples(records: TFRecordWriter, part: pa.Table) -> None:
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


def _write_examples_one_by_one(records: TFRecordWriter, part: pa.Table) -> None:
    for row in part.to_pylist():
        records.write(encode_example({
            name: (np.asarray(value, dtype=np.float32) if name == "features" else value)
            for name, value in row.items() if value is not None}))


class JsonLinesWriter:
    """Stream a partition's rows into a JSON-lines file through the fs layer (any root, S3 too);
    yields the number of rows per reason."""

    def __init__(self, storage: Storage, folder: str) -> None:
        self.storage, self.folder = storage, folder

    def __call__(self, batches: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        import pandas as pd

        reasons: dict[str, int] = {}
        rel = layout.join(self.folder, shard_io.part_name(shard_io.partition_id(), ".jsonl"))
        with shard_io.atomic_output(self.storage, rel) as target, \
                (open(target, "wb") if isinstance(target, str) else nullcontext(target)) as out:
            for frame in batches:
                for row in frame.astype(object).where(frame.notna(), None).to_dict("records"):
                    out.write((json.dumps(row, default=str) + "\n").encode("utf-8"))
                    reasons[row["reason"]] = reasons.get(row["reason"], 0) + 1
        yield pd.DataFrame({"reason": pd.Series(list(reasons), dtype=object),
                            "rows": pd.Series(list(reasons.values()), dtype="int64")})


def fill_missing_shards(storage: Storage, folder: str, count: int, compression: str | None) -> None:
    """Spark may skip the Python function for an empty partition: give every shard a file."""
    from hopsml.formats.tfrecord import shard_name

    for index in range(count):
        rel = layout.join(folder, shard_name(index, count, compression))
        if not storage.exists(rel):
            with shard_io.shard_writer(storage, folder, index, count, compression):
                pass
