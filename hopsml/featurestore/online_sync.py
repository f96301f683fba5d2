"""`hopsml fs sync` (`fg.sync_online()`): a group's online table rebuilt from its offline table without the
process holding the table.

DuckDB picks each key's newest row over the table's Parquet files (spilling to a temporary folder past its memory
limit) and hands them over in Arrow batches of `online_batch_rows`, which are written into a staging table
(`<table>__staging`, committed batch by batch, which no reader looks at). The staging table then replaces the
table at once (`OnlineStore.swap`: one transaction on SQLite, one RENAME TABLE on MySQL), so a reader sees the
old rows or the new ones, never a half table. A sync that fails leaves the table as it was; the next one drops
the staging table it left.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from hopsml.featurestore.engine import hive_options
from hopsml.featurestore.online import STAGING, Streamed, table_name
from hopsml.featurestore.refs import GroupRef

if TYPE_CHECKING:
    import pyarrow as pa

DUCKDB_MEMORY = "1GB"   # DuckDB's limit while it picks the newest rows; beyond it, it spills to disk


def rebuild(group: GroupRef, batch_rows: int, observe: Callable[[int], None] | None = None) -> Streamed:
    """The group's online table made the newest row per key of its offline table's newest version (see the
    module docstring); `observe` is called with the rows of each batch before it is written."""
    store = group.store.online()
    table = table_name(group)
    staging = table + STAGING
    schema = group.table.schema()
    store.drop_table(staging)
    target = store.prepare(staging, schema, group.primary_key, group.event_time)
    try:
        with newest_batches(group, schema, batch_rows) as batches:
            done = store.write_stream(target, batches, batch_rows, one_transaction=False, observe=observe)
        store.swap(staging, table)
    except BaseException:
        with contextlib.suppress(Exception):
            store.drop_table(staging)
        raise
    return done


@contextlib.contextmanager
def newest_batches(group: GroupRef, schema: pa.Schema, batch_rows: int) -> Iterator[pa.RecordBatchReader]:
    """The newest row per key of the group's offline table as Arrow batches of at most `batch_rows` rows, picked
    by DuckDB (the table holds each (key, event time) once, so the pick is unique)."""
    import duckdb

    spill = tempfile.mkdtemp(prefix="hopsml-sync-")
    connection = duckdb.connect(config={"memory_limit": DUCKDB_MEMORY, "temp_directory": spill,
                                        "preserve_insertion_order": False})
    try:
        connection.execute("SET TimeZone = 'UTC'")
        files = [] if group.table.remote else group.table.files()
        if files:
            listed = ", ".join(_literal(f) for f in files)
            connection.execute(f"CREATE VIEW offline AS SELECT * FROM read_parquet([{listed}], union_by_name = true"
                               f"{hive_options(group.table.partitioning())})")
        elif group.table.remote:   # this DuckDB reads no S3 or HDFS: Arrow's dataset, scanned as DuckDB reads it
            connection.register("offline", group.table.dataset())
        else:                      # no rows yet
            connection.register("offline", schema.empty_table())
        columns = ", ".join(_name(f.name) for f in schema)
        sql = f"SELECT {columns} FROM offline"
        if group.event_time:
            keys = ", ".join(_name(k) for k in group.primary_key)
            sql += f" QUALIFY row_number() OVER (PARTITION BY {keys} ORDER BY {_name(group.event_time)} DESC) = 1"
        relation = connection.sql(sql)
        # DuckDB 2.x calls it to_arrow_reader, 1.x fetch_record_batch
        reader = getattr(relation, "to_arrow_reader", None) or relation.fetch_record_batch
        yield reader(batch_rows)
    finally:
        connection.close()
        shutil.rmtree(spill, ignore_errors=True)


def _name(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"
