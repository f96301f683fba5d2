"""A feature group's rows: one Delta Lake table, written and read with delta-rs (no JVM, no jars), that
Spark, DuckDB, Polars and pandas read as Parquet files plus a log.

Each insert is one Delta commit: the first creates the table; later ones merge on (primary key, event
time), so a new pair is history and an existing pair is updated in place (an upsert). A commit is
all-or-nothing: its Parquet files are invisible until the log entry that names them is written, so a
process killed mid-insert leaves the table at its previous commit. Two inserts at once: delta-rs commits
both when they touch different files and retries here when they conflict; after the retries a clear error
says the insert did not land.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import errno
import os
import re
import shutil
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from hopsml import layout
from hopsml.errors import FeatureStoreError
from hopsml.featurestore.seams import WallClock

if TYPE_CHECKING:
    import pyarrow as pa
    import pyarrow.dataset as pads
    from deltalake import DeltaTable
    from pyspark.sql import DataFrame as SparkFrame
    from pyspark.sql import DataFrameReader, SparkSession
    from pyspark.sql.types import StructType

    from hopsml.fs import Storage

_RETRIES = 8


@dataclass(frozen=True)
class Commit:
    """One insert: its Delta version, wall-clock time and row counts."""

    version: int
    committed_ms: int
    inserted: int
    updated: int
    deleted: int
    operation: str
    added_columns: tuple[str, ...] = ()

    @property
    def committed_on(self) -> dt.datetime:
        return dt.datetime.fromtimestamp(self.committed_ms / 1000, dt.timezone.utc)

    def details(self) -> dict[str, Any]:
        """As Hopsworks' commit_details() shows a commit."""
        return {"committedOn": self.committed_on.strftime("%Y%m%d%H%M%S%f")[:-3], "rowsInserted": self.inserted,
                "rowsUpdated": self.updated, "rowsDeleted": self.deleted, "operation": self.operation,
                "addedColumns": list(self.added_columns)}


def wallclock_ms(value: WallClock) -> int:
    """Epoch milliseconds of a wall-clock time as Hopsworks takes it: a datetime or date (naive: UTC), epoch
    milliseconds, or a string of year, month, day and optionally hours, minutes, seconds and fractions, with or
    without the separators - / : . T and spaces ('2024-05-01', '2024/05/01 12:00', '20240501120000').

    >>> wallclock_ms("2022/01/01") == wallclock_ms("2022-01-01") == wallclock_ms("20220101")
    True
    """
    if isinstance(value, bool):
        raise FeatureStoreError(f"wallclock_time {value!r} is not a time")
    if isinstance(value, int):
        return value
    if isinstance(value, dt.datetime):
        return int((value if value.tzinfo else value.replace(tzinfo=dt.timezone.utc)).timestamp() * 1000)
    if isinstance(value, dt.date):
        return wallclock_ms(dt.datetime(value.year, value.month, value.day))
    if hasattr(value, "to_pydatetime"):  # a pandas Timestamp
        return wallclock_ms(value.to_pydatetime())
    text = str(value).strip()
    try:
        return wallclock_ms(dt.datetime.fromisoformat(text))
    except ValueError:
        pass
    digits = re.sub(r"[-/:. T]", "", text)   # as hsfs: '2022/01/01', '2022-01-01 10:30', '20220101103000'
    formats = {8: "%Y%m%d", 10: "%Y%m%d%H", 12: "%Y%m%d%H%M", 14: "%Y%m%d%H%M%S"}
    try:
        if digits.isdigit() and len(digits) in formats:
            return wallclock_ms(dt.datetime.strptime(digits, formats[len(digits)]))
        if digits.isdigit() and len(digits) > 14:   # fractions of a second
            return wallclock_ms(dt.datetime.strptime(digits[:14] + digits[14:20].ljust(6, "0"), "%Y%m%d%H%M%S%f"))
    except ValueError:
        pass
    raise FeatureStoreError(f"wallclock_time {value!r} is not a time: give a datetime, epoch milliseconds, or a "
                            "string such as '2024-05-01 12:00:00' or '2024/05/01'")


def _disk_full(error: BaseException) -> bool:
    """Whether a failed write ran out of disk (delta-rs words it in several ways, a Rust panic among them)."""
    if isinstance(error, OSError) and error.errno in (errno.ENOSPC, errno.EDQUOT):
        return True
    text = str(error)
    return "No space left on device" in text or "os error 28" in text or "Disk quota exceeded" in text


@dataclass(frozen=True)
class Location:
    """Where a Delta table lies: its URI for delta-rs with the object store's options, and, for a remote root,
    the pyarrow filesystem hopsml reads its files with (None: a local folder)."""

    uri: str
    options: dict[str, str] | None = None
    filesystem: object = None   # a pyarrow filesystem (fs.py is the one module that imports pyarrow.fs)

    @classmethod
    def of(cls, storage: Storage, rel: str) -> Location:
        """The location of root-relative `rel` under `storage` (a hopsml.fs.Storage): a local folder, S3 (the
        root's endpoint, region and keys given to delta-rs, commits made safe by S3's conditional writes) or
        HDFS (delta-rs speaks to the namenode itself)."""
        import urllib.parse

        local = storage.local_path(rel)
        refused = sorted({c for c in (local or storage.path(rel)) if c in layout.TABLE_PATH_REFUSED})
        if refused:
            rule = ", ".join(map(repr, layout.TABLE_PATH_REFUSED))
            raise FeatureStoreError(f"the project root {storage.uri()} holds {', '.join(map(repr, refused))} in its "
                                    "path, where the Delta Lake library cannot keep a feature group's table; move "
                                    f"the root to a path without any of {rule} (spaces and other Unicode are fine)")
        if local is not None:
            return cls(local)
        parsed = urllib.parse.urlparse(storage.root)
        query = dict(urllib.parse.parse_qsl(parsed.query))
        if parsed.scheme in ("s3", "s3a"):
            options = {"conditional_put": "etag"}
            if "endpoint_override" in query:
                scheme = query.get("scheme", "https")
                options["AWS_ENDPOINT_URL"] = f"{scheme}://{query['endpoint_override']}"
                if scheme == "http":
                    options["AWS_ALLOW_HTTP"] = "true"
            for key, name in (("region", "AWS_REGION"), ("access_key", "AWS_ACCESS_KEY_ID"),
                              ("secret_key", "AWS_SECRET_ACCESS_KEY"), ("session_token", "AWS_SESSION_TOKEN")):
                if key in query:
                    options[name] = query[key]
            return cls("s3://" + storage.path(rel).lstrip("/"), options, storage.fs)
        if parsed.scheme in ("hdfs", "viewfs"):
            return cls(f"{parsed.scheme}://{parsed.netloc}/{storage.path(rel).lstrip('/')}", {}, storage.fs)
        raise FeatureStoreError(f"feature groups cannot live under a {parsed.scheme}:// root: use a local folder, "
                                "s3:// or hdfs://")

    def base(self) -> str:
        """The table's folder as a path of `filesystem` (a local path, `bucket/key` on S3, `/path` on HDFS),
        taken from the URI as it was built (never percent-decoded: a `%` in a name is a `%`)."""
        if self.filesystem is None:
            return self.uri
        scheme, _, rest = self.uri.partition("://")
        return rest if scheme.startswith("s3") else "/" + rest.partition("/")[2]

    def path(self, logged: str) -> str:
        """A data file as the Delta log names it (a URI reference relative to the table, percent-encoded, as the
        protocol has it) as a path of `filesystem`. Not delta-rs' `file_uris()`: those encode the table's
        folder but not the file's own part, so no decoding of them is right for every name."""
        import urllib.parse

        if "://" in logged:   # an absolute URI (a file outside the table's folder)
            parsed = urllib.parse.urlparse(logged)
            path = urllib.parse.unquote(parsed.path)
            return f"{parsed.netloc}{path}" if parsed.scheme.startswith("s3") else path
        return self.base().rstrip("/") + "/" + urllib.parse.unquote(logged)

    def hadoop(self, path: str) -> str:
        """A path of `filesystem` as Spark's Hadoop filesystems name it (S3 is s3a://, Hadoop's S3A connector,
        which the cluster's Spark must have: hadoop-aws). Not encoded: Hadoop's Path takes the plain string."""
        if self.filesystem is None:
            return path
        scheme, _, rest = self.uri.partition("://")
        if scheme.startswith("s3"):
            return "s3a://" + path
        return f"{scheme}://{rest.partition('/')[0]}{path}"


def logged_files(table: DeltaTable, location: Location) -> list[str]:
    """The data files of the Delta table `table` (a deltalake.DeltaTable at `location`) as paths of the
    location's filesystem, what DuckDB, Arrow and Spark open."""
    import pyarrow as pa

    actions = pa.table(table.get_add_actions(flatten=True))
    return [location.path(p) for p in actions.column("path").to_pylist()] if actions.num_rows else []


class GroupTable:
    """The Delta table at `location` of a group keyed by `keys` (primary key + event time), partitioned by
    `partition_by` (folders `column=value/`, Hive's layout, which Spark, DuckDB and Arrow read)."""

    def __init__(self, location: Location | str, keys: Sequence[str], name: str, partition_by: Sequence[str] = ()
                 ) -> None:
        self.location = location if isinstance(location, Location) else Location(location)
        self.uri, self.keys, self.name, self.partition_by = self.location.uri, list(keys), name, list(partition_by)

    @property
    def remote(self) -> bool:
        return self.location.filesystem is not None

    def exists(self) -> bool:
        from deltalake import DeltaTable

        return bool(DeltaTable.is_deltatable(self.uri, storage_options=self.location.options))

    def _table(self, version: int | None = None) -> Any:
        from deltalake import DeltaTable

        if not self.exists():
            raise FeatureStoreError(f"feature group {self.name!r} has no data yet: insert a DataFrame first")
        return DeltaTable(self.uri, version=version, storage_options=self.location.options)

    def schema(self) -> pa.Schema | None:
        import pyarrow as pa

        return pa.schema(self._table().schema().to_arrow()) if self.exists() else None

    def commit(self, batch: pa.Table, added: Sequence[str] = ()) -> Commit:
        """Write `batch` as one commit: create, append (nothing in the batch is there yet) or merge."""
        from deltalake import CommitProperties, write_deltalake
        from deltalake.exceptions import CommitFailedError

        batch = batch.replace_schema_metadata(None)
        properties = CommitProperties(custom_metadata={"hopsml.added_columns": ",".join(added)})
        for attempt in range(_RETRIES):
            try:
                if not self.exists():
                    write_deltalake(self.uri, batch, mode="append", partition_by=self.partition_by or None,
                                    commit_properties=properties, storage_options=self.location.options)
                else:
                    table = self._table()
                    if added:
                        table.alter.add_columns([_delta_field(batch.schema.field(name)) for name in added])
                        table = self._table()
                    predicate = " AND ".join(f"t.{_quoted(k)} = s.{_quoted(k)}" for k in self.keys)
                    (table.merge(batch, predicate=predicate, source_alias="s", target_alias="t",
                                 commit_properties=properties)
                     .when_matched_update_all().when_not_matched_insert_all().execute())
                return self.commits()[0]
            except CommitFailedError as conflict:
                if attempt == _RETRIES - 1:
                    raise FeatureStoreError(f"feature group {self.name!r}: the insert did not land, another insert "
                                            f"committed first {_RETRIES} times ({conflict}); insert again") from None
                time.sleep(0.05 * (attempt + 1))
            except BaseException as error:   # delta-rs raises a Rust panic (a BaseException) on some I/O errors
                if isinstance(error, (KeyboardInterrupt, SystemExit)) or not _disk_full(error):
                    raise
                raise FeatureStoreError(self._full_disk_message()) from None
        raise AssertionError("unreachable")

    def _full_disk_message(self) -> str:
        """One sentence for an insert that found the disk full: the table is as it was (Delta commits last)."""
        local = self.location.base() if self.location.filesystem is None else None
        free = ""
        if local is not None:
            try:
                free = f" ({shutil.disk_usage(local).free / 2**20:.1f} MiB free there)"
            except OSError:
                pass
        newest = self.latest_version() if self.exists() else None
        kept = f"its newest commit is still {newest}" if newest is not None else "it has no commit yet"
        return (f"feature group {self.name!r}: no space left on the disk of {self.uri}{free} to write the batch; "
                f"the insert did not land and the table is unchanged ({kept}): free some space there, or move the "
                "root (HOPSML_ROOT) to a disk with room, and insert again")

    def commits(self, limit: int | None = None) -> list[Commit]:
        """The commits, newest first."""
        if not self.exists():
            return []
        out = []
        for entry in self._table().history(limit):
            metrics = entry.get("operationMetrics") or {}
            operation = str(entry.get("operation", ""))
            if operation in ("ADD COLUMN", "CREATE TABLE"):
                continue  # part of the insert that follows it
            added = str(entry.get("hopsml.added_columns") or "")
            inserted = entry.get("hopsml.inserted",   # a Spark insert's counts (spark_insert.py), else delta-rs's
                                 metrics.get("num_target_rows_inserted", metrics.get("num_added_rows", 0)))
            updated = entry.get("hopsml.updated", metrics.get("num_target_rows_updated", 0))
            out.append(Commit(int(entry["version"]), int(entry["timestamp"]), int(inserted or 0), int(updated or 0),
                              int(metrics.get("num_target_rows_deleted", 0) or 0),
                              str(entry.get("hopsml.operation") or operation), tuple(a for a in added.split(",") if a)))
        return out

    def version_at(self, wallclock: WallClock) -> int:
        """The newest commit at or before `wallclock` (see `wallclock_ms`)."""
        at = wallclock_ms(wallclock)
        for commit in self.commits():
            if commit.committed_ms <= at:
                return commit.version
        first = self.commits()[-1] if self.commits() else None
        raise FeatureStoreError(f"feature group {self.name!r} had no commit at {wallclock!r}"
                                + (f"; its first is at {first.committed_on.isoformat()}" if first else ""))

    def dataset(self, version: int | None = None) -> pads.Dataset:
        """The rows at `version` (the newest by default) as an Arrow dataset of the version's Parquet files, read
        by Arrow itself (files older than an added column give nulls there). Not delta-rs's own dataset: its
        filesystem calls back into Python from Arrow's threads, which aborted processes at exit."""
        import pyarrow as pa
        import pyarrow.dataset as pads

        table = self._table(version)
        schema = pa.schema(table.schema().to_arrow())
        partitions = self.partitioning(version)
        files = logged_files(table, self.location)
        filesystem = self.location.filesystem
        if not partitions:
            return pads.dataset(files, schema=schema, format="parquet", filesystem=filesystem)
        return pads.dataset(files, schema=schema, format="parquet", filesystem=filesystem,
                            partition_base_dir=self.location.base(),
                            partitioning=pads.partitioning(pa.schema(partitions), flavor="hive"))

    def partitioning(self, version: int | None = None) -> list[pa.Field]:
        """The partition columns of the table at `version`, with their types (none when unpartitioned)."""
        import pyarrow as pa

        table = self._table(version)
        schema = pa.schema(table.schema().to_arrow())
        return [schema.field(name) for name in table.metadata().partition_columns]

    def read(self, version: int | None = None, columns: Sequence[str] | None = None) -> pa.Table:
        return self.dataset(version).to_table(columns=list(columns) if columns else None)

    def latest_version(self) -> int:
        return int(self._table().version())

    def row_count(self, version: int | None = None) -> int:
        """Rows at `version`, from the log's file statistics (no file is read)."""
        actions = self._table(version).get_add_actions(flatten=True)
        import pyarrow as pa

        counts = pa.table(actions).column("num_records") if actions.num_rows else None
        return int(sum(v or 0 for v in counts.to_pylist())) if counts is not None else 0

    def spark(self, spark: SparkSession, version: int | None = None) -> SparkFrame:
        """The rows at `version` as a Spark DataFrame, read from the version's Parquet files."""
        files = [self.location.hadoop(f) for f in self.files(version)]
        schema = _spark_schema(self._table(version))
        if not files:
            return spark.createDataFrame([], schema=schema)
        # the table's schema: partition values keep their types ('007' stays a string), older files get nulls
        return spark_reader(spark, self.location.hadoop(self.location.base())).schema(schema).parquet(*files)

    def files(self, version: int | None = None) -> list[str]:
        """The Parquet files of the table at `version` as paths of its filesystem (local paths for a local
        table): what DuckDB and Arrow read (Spark through `location.hadoop`); no Delta jars needed."""
        return logged_files(self._table(version), self.location)


def spark_reader(spark: SparkSession, base: str) -> DataFrameReader:
    """Spark's Parquet reader for files of the table at `base`, each path taken as it is: Hadoop would read
    `[`, `{`, `*`, `?` and `\\` in a folder's name as a glob pattern (`__globPaths__` is Spark's switch for
    that, which its own file streams use)."""
    return spark.read.option("basePath", base).option("__globPaths__", "false")


@contextlib.contextmanager
def folder_lock(folder: str) -> Iterator[None]:
    """An exclusive lock on a local folder (its `_lock` file), across processes, for one commit at a time."""
    import fcntl

    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "_lock"), "a+b") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _quoted(name: str) -> str:
    return f"`{name}`"


def _delta_field(field: pa.Field) -> Any:
    from deltalake import Field

    return Field.from_arrow(field.with_nullable(True))


def _spark_schema(table: DeltaTable) -> StructType:
    """The Spark schema of an empty table (Spark cannot infer one from no files)."""
    import pyarrow as pa
    from pyspark.sql.pandas.types import from_arrow_schema

    return from_arrow_schema(pa.schema(table.schema().to_arrow()))
