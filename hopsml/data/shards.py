"""Executor-side output of a data job: the files one Spark partition writes itself.

The expensive work of a data job (decoding images) runs once per row, in the task, and the task
writes its rows straight to every output: a TFRecord shard (``part-<partition>-of-<partitions>``)
and, for images, a Parquet file of petastorm cells per split, so both sides hold the same rows
and the pixels never travel back through the JVM. Every file is written aside and renamed into
place when complete, so a retried task rewrites its files whole and never leaves half a file.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import IO, TYPE_CHECKING, Any

from hopsml import layout
from hopsml.data.codec import CellColumn
from hopsml.data.uncached import open_uncached
from hopsml.formats.tfrecord import TFRecordWriter, shard_name
from hopsml.fs import Storage

if TYPE_CHECKING:
    import pyarrow as pa
    import pyarrow.parquet as pq

# petastorm's keys in _common_metadata (petastorm.etl.dataset_metadata), written without the
# extra Spark job that petastorm's materialize_dataset runs to count row groups
UNISCHEMA_KEY = b"dataset-toolkit.unischema.v1"
ROW_GROUPS_PER_FILE_KEY = b"dataset-toolkit.num_row_groups_per_file.v1"
COMMON_METADATA = "_common_metadata"


def partition_id() -> int:
    """The Spark partition this Python worker is processing (0 outside Spark)."""
    from pyspark import TaskContext

    context = TaskContext.get()
    return context.partitionId() if context is not None else 0


@contextmanager
def atomic_output(storage: Storage, rel: str, uncached: bool = False) -> Iterator[str | IO[bytes]]:
    """A local path (local roots) or a binary stream (remote roots) for ``rel``, moved into
    place only when the block completes; on failure nothing appears at ``rel``. ``uncached``
    (for shards of hundreds of MB) gives a local root a stream that writes around the page
    cache instead of a path (:mod:`hopsml.data.uncached`)."""
    local = storage.local_path(rel)
    if local is None:  # remote root: the storage layer writes aside and renames
        with storage.open(rel, "wb") as stream:
            yield stream
        return
    with storage.aside(rel) as tmp:
        if uncached:
            with open_uncached(tmp) as stream:
                yield stream
        else:
            yield tmp


@contextmanager
def shard_writer(storage: Storage, folder: str, index: int, count: int,
                 compression: str | None = None, uncached: bool = False) -> Iterator[TFRecordWriter]:
    """A TFRecordWriter for shard ``index`` of ``count`` in ``folder``, renamed into place on success."""
    with atomic_output(storage, layout.join(folder, shard_name(index, count, compression)), uncached) as target:
        writer = TFRecordWriter(target, compression)
        try:
            yield writer
        finally:
            writer.close()


class ParquetShard:
    """One Parquet file of a partition, written row group by row group from buffered columns.

    ``add`` buffers one row; every ``rows_per_group`` rows become one row group, so the readers
    (which shard by row group) get groups of a known size. ``open_target`` gives the path or
    stream to write and is called with the first row group, so a file with no rows is never
    made. ``close`` writes the rest and returns the number of row groups. The columns named in
    ``cells`` (name -> shape) take uint8 arrays and store them as petastorm ndarray cells.
    ``compression`` is one Parquet codec, or one per column.
    """

    def __init__(self, open_target: Callable[[], str | IO[bytes]], schema: pa.Schema,
                 rows_per_group: int, dictionary: tuple[str, ...] = (),
                 cells: Mapping[str, tuple[int, ...]] | None = None,
                 compression: str | Mapping[str, str] = "snappy") -> None:
        cells = cells or {}
        self.compression = compression if isinstance(compression, str) else dict(compression)
        self.open_target, self.schema = open_target, schema
        self.rows_per_group = max(1, int(rows_per_group))
        self.dictionary = list(dictionary)
        self.columns: dict[str, Any] = {name: CellColumn(cells[name], capacity=self.rows_per_group)
                                        if name in cells else [] for name in schema.names}
        self.row_groups = 0
        self.rows = 0
        self._writer: pq.ParquetWriter | None = None

    def add(self, row: Mapping[str, Any]) -> None:
        for name, values in self.columns.items():
            values.append(row[name])
        if len(self.columns[self.schema.names[0]]) >= self.rows_per_group:
            self._flush()

    def _flush(self) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        count = len(self.columns[self.schema.names[0]])
        if not count:
            return
        arrays = [values.take() if isinstance(values, CellColumn) else pa.array(values, type=field.type)
                  for field, values in zip(self.schema, self.columns.values())]
        if self._writer is None:
            self._writer = pq.ParquetWriter(self.open_target(), self.schema, compression=self.compression,
                                            use_dictionary=self.dictionary,
                                            write_statistics=self.dictionary)
        self._writer.write_table(pa.Table.from_arrays(arrays, schema=self.schema), row_group_size=count)
        self.row_groups += 1
        self.rows += count
        self.columns = {name: values if isinstance(values, CellColumn) else []
                        for name, values in self.columns.items()}

    def close(self) -> int:
        self._flush()
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        return self.row_groups


def write_petastorm_metadata(storage: Storage, folder: str, schema: pa.Schema, unischema: bytes,
                             row_groups: Mapping[str, int]) -> None:
    """``folder/_common_metadata`` as petastorm's materialize_dataset leaves it: the Arrow schema
    with the pickled Unischema (``unischema``, from :mod:`hopsml.data.unischema`) and the row
    groups of every file (name -> count), so that ``make_reader`` / ``make_batch_reader`` read the
    folder without opening every footer. Written the same whether petastorm is installed or not."""
    import pyarrow.parquet as pq

    metadata = dict(schema.metadata or {})
    metadata[UNISCHEMA_KEY] = unischema
    metadata[ROW_GROUPS_PER_FILE_KEY] = json.dumps(dict(sorted(row_groups.items()))).encode()
    with atomic_output(storage, layout.join(folder, COMMON_METADATA)) as target:
        pq.write_metadata(schema.with_metadata(metadata), target)


def write_jsonl(storage: Storage, rel: str, rows: list[dict[str, Any]]) -> None:
    storage.write_text(rel, "".join(json.dumps(row, default=str) + "\n" for row in rows))


def part_name(index: int, suffix: str = ".parquet") -> str:
    """The file of partition ``index``: 'part-00003.parquet'."""
    return f"part-{index:05d}{suffix}"
