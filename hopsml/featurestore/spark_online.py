"""A Spark DataFrame's newest row per key written into the online store by Spark, as its offline rows are:
where the store is a server every executor reaches, no row reaches the driver.

Spark picks each key's newest row (a window over the primary key; the batch holds each (key, event time) once
already, so the pick is unique), which leaves each key in one partition. Then, by store:

- MySQL, MariaDB or RonDB (a server): each task upserts its partition a piece of `online_batch_rows` rows at a
  time with the statement the driver made (`Target.sql`, the one every write path runs), committing each piece,
  and answers with counts. A task Spark runs again writes the same rows again, which changes nothing (the
  statement keeps the newer row). Readers may see one task's rows before another's; each key's row is whole and
  never older than before.
- SQLite (one file on the driver's machine, which an executor on another host cannot open, and which takes one
  writer at a time anyway): the tasks cut their rows into Arrow pieces of `online_batch_rows` rows, the driver
  fetches them a partition at a time (`toLocalIterator`) and writes them in one transaction, so it holds one
  piece as Python values and one partition's pieces as bytes, never the frame.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING

from hopsml.errors import FeatureStoreError
from hopsml.featurestore.online import OnlineStore, Streamed, Target, store_for, table_name, without_password
from hopsml.featurestore.seams import KeyedGroup

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame as SparkFrame

_COUNTS = "rows long, given long, pieces long, largest long"   # what a writing task answers
_PIECES = "piece binary"                                       # what a task hands the driver: Arrow IPC bytes


def newest_rows(frame: SparkFrame, keys: Sequence[str], event_time: str | None) -> SparkFrame:
    """The frame's newest row per key (the later event time), chosen by Spark (still a frame: nothing collected)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    if not event_time:   # a checked batch holds each key once
        return frame
    newest = Window.partitionBy(*[F.col(_quoted(k)) for k in keys]).orderBy(F.col(_quoted(event_time)).desc())
    return frame.withColumn("__hopsml_rank", F.row_number().over(newest)).where("__hopsml_rank = 1") \
        .drop("__hopsml_rank")


def write(store: OnlineStore, group: KeyedGroup, frame: SparkFrame, schema: pa.Schema, batch_rows: int,
          observe: Callable[[int], None] | None = None) -> Streamed:
    """The newest row per key of `frame` (a checked batch in the group's schema `schema`, as spark_insert.py
    prepares it) written into the group's online table, each key's row unless the table holds a later one (see the
    module docstring). `observe` is called with each piece the driver holds (on SQLite; none elsewhere)."""
    from pyspark.errors import PySparkException

    newest = newest_rows(frame, group.primary_key, group.event_time)
    target = store.prepare(table_name(group), schema, group.primary_key, group.event_time)
    try:
        if store.dialect == "sqlite":
            pieces = newest.mapInArrow(functools.partial(_task_pieces, batch_rows), _PIECES)
            return store.write_stream(target, _fetched(pieces), batch_rows, one_transaction=True, observe=observe)
        done = Streamed()
        for row in newest.mapInArrow(functools.partial(_task_write, target, batch_rows), _COUNTS).collect():
            done.merge(Streamed(row["rows"], row["given"], row["pieces"], row["largest"]))
        return done
    except PySparkException as error:   # a failed Spark job: its text holds the task's Python traceback
        raise FeatureStoreError(f"the Spark tasks did not write the online table {target.table}: "
                                f"{_last_error(str(error), target.url)}") from None


def _task_write(target: Target, batch_rows: int, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """In a task: its partition upserted into the store, a piece at a time; one row of counts."""
    import pyarrow as pa

    store = store_for(target.url)
    try:
        done = store.write_stream(target, batches, batch_rows, one_transaction=False)
    finally:
        store.close()
    yield pa.RecordBatch.from_pylist([{"rows": done.rows, "given": done.given, "pieces": done.pieces,
                                       "largest": done.largest}])


def _task_pieces(batch_rows: int, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """In a task: its partition as Arrow IPC pieces of at most `batch_rows` rows, one piece per row."""
    import pyarrow as pa

    for batch in batches:
        for start in range(0, batch.num_rows, batch_rows):
            piece = batch.slice(start, batch_rows)
            sink = pa.BufferOutputStream()
            with pa.ipc.new_stream(sink, piece.schema) as stream:
                stream.write_batch(piece)
            yield pa.RecordBatch.from_pydict({"piece": pa.array([sink.getvalue().to_pybytes()], pa.binary())})


def _fetched(pieces: SparkFrame) -> Iterator[pa.Table]:
    """The tasks' pieces on the driver, a partition at a time (the next is fetched once this one is written)."""
    import pyarrow as pa

    for row in pieces.toLocalIterator(prefetchPartitions=False):
        yield pa.ipc.open_stream(pa.py_buffer(bytes(row[0]))).read_all()


def _last_error(text: str, url: str) -> str:
    """The Python error a failed task raised (the last line of Spark's text), without the store's password."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    raised = [line for line in lines if "Error:" in line or "Exception:" in line]
    return without_password((raised or lines or ["(no message)"])[-1], url)


def _quoted(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"
