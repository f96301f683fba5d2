"""Executor-side output of a data job: one TFRecord shard and one small report per Spark partition.

The Parquet side of a dataset is written by Spark; the same pass over each partition writes the
partition's TFRecord shard beside it (``part-<partition>-of-<partitions>``), so both sides hold
the same rows and the expensive work (decoding images) runs once. A retried task rewrites its
shard and report atomically, so a retry never leaves half a file or a double count.
"""

from __future__ import annotations

import json
import os
import uuid
from contextlib import contextmanager
from typing import Any, Iterator

from hopsml import layout
from hopsml.data.tfrecord import TFRecordWriter, shard_name
from hopsml.fs import Storage


def partition_id() -> int:
    """The Spark partition this Python worker is processing (0 outside Spark)."""
    from pyspark import TaskContext

    context = TaskContext.get()
    return context.partitionId() if context is not None else 0


@contextmanager
def shard_writer(storage: Storage, folder: str, index: int, count: int,
                 compression: str | None = None) -> Iterator[TFRecordWriter]:
    """A TFRecordWriter for shard ``index`` of ``count`` in ``folder``, renamed into place on success."""
    rel = layout.join(folder, shard_name(index, count, compression))
    local = storage.local_path(rel)
    if local is None:  # remote root: the storage layer writes aside and renames
        with storage.open(rel, "wb") as stream:
            writer = TFRecordWriter(stream, compression)
            try:
                yield writer
            finally:
                writer.close()
        return
    os.makedirs(os.path.dirname(local), exist_ok=True)
    tmp = os.path.join(os.path.dirname(local), f".{os.path.basename(local)}.tmp-{uuid.uuid4().hex}")
    writer = TFRecordWriter(tmp, compression)
    try:
        yield writer
        writer.close()
        os.replace(tmp, local)
    finally:
        writer.close()
        if os.path.exists(tmp):
            os.remove(tmp)


def write_report(storage: Storage, folder: str, index: int, report: dict[str, Any]) -> None:
    """One partition's counts and side results, read back by the driver with :func:`read_reports`."""
    storage.write_bytes(layout.join(folder, f"part-{index:05d}.json"),
                        json.dumps(report, separators=(",", ":")).encode())


def read_reports(storage: Storage, folder: str) -> list[dict[str, Any]]:
    return [storage.read_json(rel) for rel in storage.ls(folder) if rel.endswith(".json")]


def write_jsonl(storage: Storage, rel: str, rows: list[dict[str, Any]]) -> None:
    storage.write_text(rel, "".join(json.dumps(row, default=str) + "\n" for row in rows))
