"""A feature view's log of what a model was given and what it predicted, as hsfs's feature logging keeps it:
one table per view holding the untransformed features, the transformed ones, the predictions
(`predicted_<label>`) and who logged them (`log_id`, `log_time`, `training_dataset_version`, `model_name`,
`model_version`).

`fv.log(...)` writes each call as one small Parquet file in the log's buffer, not a table commit, so a serving
can log every request; `materialize_log()` commits the buffer to the log's Delta table in one commit, and so
does `log()` itself once the buffer is a minute old or holds many files (hsfs's scheduled materialization),
unless logging is paused. `read_log()` reads what is committed. Each commit names the buffer files it took and
they are deleted after it: a process killed in between leaves files that the next materialization finds named
in the table's history and deletes, so no row is lost or logged twice.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from hopsml.errors import FeatureStoreError
from hopsml.featurestore import frames
from hopsml.featurestore.refs import Condition, ViewRef
from hopsml.featurestore.seams import LoggedRows, When
from hopsml.featurestore.table import folder_lock

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa

    from hopsml.featurestore.query import Feature
    from hopsml.featurestore.transformations import TransformationFunction

META = ("log_id", "log_time", "training_dataset_version", "model_name", "model_version")
AUTO_FILES = 500      # log() materializes the buffer once it holds this many files ...
AUTO_AGE_S = 60.0     # ... or its oldest file is this old (unless logging is paused)
_FILES_KEY = "hopsml.log_files"


class FeatureLog:
    """The log of one feature view version (see the module docstring)."""

    def __init__(self, view: ViewRef) -> None:
        self.view = view
        self.folder = view.store.log_uri(view.name, view.version)
        self.table_uri = os.path.join(self.folder, "table")
        self.buffer = os.path.join(self.folder, "buffer")

    # --- writing ----------------------------------------------------------------------------------------
    def write(self, untransformed: LoggedRows | None, transformed: LoggedRows | None, predictions: LoggedRows | None,
              training_dataset_version: int | None,
              model: tuple[str, int] | None) -> int:
        """Buffer one call's rows; how many."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        rows = self.rows(untransformed, transformed, predictions)
        count = rows.num_rows
        now = time.time_ns()
        stamp = pa.scalar(now // 1000, pa.timestamp("us", tz="UTC"))
        tag = f"{now:016x}{uuid.uuid4().hex[:8]}"   # ids sort as the rows were logged, unique across processes
        meta = {"log_id": pa.array([f"{tag}{i:08x}" for i in range(count)], pa.string()),
                "log_time": pa.array([stamp] * count, pa.timestamp("us", tz="UTC")),
                "training_dataset_version": pa.array([training_dataset_version] * count, pa.int64()),
                "model_name": pa.array([model[0] if model else None] * count, pa.string()),
                "model_version": pa.array([model[1] if model else None] * count, pa.int64())}
        table = pa.table({**meta, **{name: _plain(rows.column(name)) for name in rows.column_names}})
        os.makedirs(self.buffer, exist_ok=True)
        name = f"{time.time_ns()}-{os.getpid()}-{uuid.uuid4().hex[:8]}.parquet"
        partial = os.path.join(self.buffer, "." + name)
        pq.write_table(table, partial)
        os.replace(partial, os.path.join(self.buffer, name))   # whole or not there
        return count

    def rows(self, untransformed: LoggedRows | None, transformed: LoggedRows | None, predictions: LoggedRows | None
             ) -> pa.Table:
        """The feature and prediction columns of one call, checked against the view's columns."""
        import pyarrow as pa

        view = self.view
        if untransformed is None and transformed is None:
            raise FeatureStoreError(f"feature view {view.key!r}: log() needs features (logging_data=) or "
                                    "transformed_features=")
        plain = [c for c in view.features if c not in view.labels]
        changed = transformed_columns(plain, view.transformation_functions)
        parts = [_table(untransformed, plain, visible_columns(view, plain), "features", view.key),
                 _table(transformed, changed, visible_columns(view, changed), "transformed_features", view.key)]
        columns: dict[str, Any] = {}
        for part, known in zip(parts, (plain, changed)):
            if part is None:
                continue
            for name in part.column_names:
                if name in view.labels:
                    columns.setdefault(f"predicted_{name}", part.column(name))
                elif name not in known:
                    raise FeatureStoreError(f"feature view {view.key!r}: log() was given column {name!r}, which is "
                                            f"not one of its features ({', '.join(known)}) or labels")
                else:
                    columns.setdefault(name, part.column(name))
        count = len(next(iter(columns.values())))
        if any(len(c) != count for c in columns.values()):
            raise FeatureStoreError(f"feature view {view.key!r}: the features and transformed features given to "
                                    "log() have different numbers of rows")
        if predictions is not None:
            if not view.labels:
                raise FeatureStoreError(f"feature view {view.key!r} has no labels, so log() cannot name its "
                                        "predictions: create the view with labels=[...]")
            given = _table(predictions, view.labels, view.labels, "predictions", view.key)
            assert given is not None
            if given.num_rows != count:
                raise FeatureStoreError(f"feature view {view.key!r}: {given.num_rows} predictions for {count} rows "
                                        "of features")
            if given.num_columns != len(view.labels):
                raise FeatureStoreError(f"feature view {view.key!r}: predictions have {given.num_columns} columns, "
                                        f"the view has {len(view.labels)} labels ({', '.join(view.labels)})")
            for label, column in zip(view.labels, given.columns):
                columns[f"predicted_{label}"] = column
        return pa.table(columns)

    # --- committing -------------------------------------------------------------------------------------
    def pending(self) -> list[str]:
        """The buffer's files, oldest first."""
        if not os.path.isdir(self.buffer):
            return []
        return sorted(n for n in os.listdir(self.buffer) if n.endswith(".parquet") and not n.startswith("."))

    def due(self) -> bool:
        files = self.pending()
        if not files:
            return False
        age = time.time() - int(files[0].split("-", 1)[0]) / 1e9
        return len(files) >= AUTO_FILES or age >= AUTO_AGE_S

    def materialize(self) -> dict[str, int]:
        """Commit the buffer to the log's table in one commit: the rows and files it took."""
        import pyarrow as pa
        import pyarrow.parquet as pq
        from deltalake import CommitProperties, write_deltalake

        with folder_lock(self.folder):
            committed = self._committed_files()
            files = []
            for name in self.pending():
                if name in committed:       # committed by a process killed before it deleted them
                    os.remove(os.path.join(self.buffer, name))
                else:
                    files.append(name)
            if not files:
                return {"rows": 0, "files": 0}
            batch = pa.concat_tables([pq.read_table(os.path.join(self.buffer, n)) for n in files],
                                     promote_options="permissive")
            properties = CommitProperties(custom_metadata={_FILES_KEY: json.dumps(files)})
            write_deltalake(self.table_uri, batch, mode="append", schema_mode="merge", commit_properties=properties)
            for name in files:
                os.remove(os.path.join(self.buffer, name))
            return {"rows": batch.num_rows, "files": len(files)}

    def _committed_files(self, commits: int = 20) -> set[str]:
        from deltalake import DeltaTable

        if not DeltaTable.is_deltatable(self.table_uri):
            return set()
        out: set[str] = set()
        for entry in DeltaTable(self.table_uri).history(commits):
            out.update(json.loads(entry.get(_FILES_KEY) or "[]"))
        return out

    # --- reading ----------------------------------------------------------------------------------------
    def read(self, start_time: When = None, end_time: When = None, condition: Condition | None = None,
             transformed: bool = False, training_dataset_version: int | None = None,
             model: tuple[str, int] | None = None) -> pd.DataFrame:
        """The committed rows, newest last: untransformed features (or transformed ones) and predictions."""
        import duckdb
        import pandas as pd
        from deltalake import DeltaTable

        from hopsml.featurestore.table import Location, logged_files, wallclock_ms

        if not DeltaTable.is_deltatable(self.table_uri):
            return pd.DataFrame()
        files = logged_files(DeltaTable(self.table_uri), Location(self.table_uri))
        plain = [c for c in self.view.features if c not in self.view.labels]
        wanted = transformed_columns(plain, self.view.transformation_functions) if transformed else plain
        connection = duckdb.connect()
        try:
            connection.execute("SET TimeZone = 'UTC'")
            listed = ", ".join("'" + f.replace("'", "''") + "'" for f in files)
            present = [r[0] for r in connection.execute(
                f"DESCRIBE SELECT * FROM read_parquet([{listed}], union_by_name = true)").fetchall()]
            keep = [*META, *[c for c in wanted if c in present], *[c for c in present if c.startswith("predicted_")]]
            where = []
            if start_time is not None:
                where.append(f"epoch_ms(log_time) >= {wallclock_ms(start_time)}")
            if end_time is not None:
                where.append(f"epoch_ms(log_time) <= {wallclock_ms(end_time)}")
            if training_dataset_version is not None:
                where.append(f"training_dataset_version = {int(training_dataset_version)}")
            params: list[Any] = []
            if model is not None:
                where.append(f"model_name = ? AND model_version = {int(model[1])}")
                params.append(str(model[0]))
            if condition is not None:
                where.extend(_filter_sql(condition, present, params))
            sql = (f"SELECT {', '.join(_q(c) for c in keep)} FROM read_parquet([{listed}], union_by_name = true)"
                   + (f" WHERE {' AND '.join(where)}" if where else "") + " ORDER BY log_time, log_id")
            return connection.execute(sql, params).df()
        finally:
            connection.close()

    def timeline(self, limit: int | None = None) -> list[dict[str, Any]]:
        """The log table's commits, newest first: time and rows."""
        from deltalake import DeltaTable

        if not DeltaTable.is_deltatable(self.table_uri):
            return []
        out = []
        for entry in DeltaTable(self.table_uri).history(limit):
            metrics = entry.get("operationMetrics") or {}
            out.append({"version": int(entry["version"]), "timestamp": int(entry["timestamp"]),
                        "rows": int(metrics.get("num_added_rows", 0) or 0),
                        "files": len(json.loads(entry.get(_FILES_KEY) or "[]"))})
        return out

    def delete(self) -> None:
        import shutil

        with folder_lock(self.folder):
            shutil.rmtree(self.table_uri, ignore_errors=True)
            shutil.rmtree(self.buffer, ignore_errors=True)


def transformed_columns(columns: Sequence[str], functions: Sequence[TransformationFunction]) -> list[str]:
    """The columns after the transformation functions: each drops the inputs it replaces and appends its
    outputs (as `TransformationFunction.apply` does)."""
    out = list(columns)
    for function in functions:
        outputs = function.output_column_names
        out = [c for c in out if c not in function.drop]
        out += [n for n in outputs if n not in out]
    return out


def visible_columns(view: ViewRef, columns: Sequence[str]) -> list[str]:
    """`columns` without the left group's primary key and event time (what get_batch_data returns)."""
    left = view.query.left
    hidden = {*left.primary_key, *([left.event_time] if left.event_time else [])}
    return [c for c in columns if c not in hidden]


def _table(data: object, full: Sequence[str], visible: Sequence[str], what: str, view: str) -> pa.Table | None:
    """`data` (LoggedRows, or None) as an Arrow table with lower-case names; rows without names (lists, numpy) take
    `full`'s or `visible`'s names by their width."""
    import pyarrow as pa

    if data is None:
        return None
    if isinstance(data, (list, tuple)) or type(data).__module__ == "numpy" and hasattr(data, "tolist"):
        values: Sequence[Any] = data if isinstance(data, (list, tuple)) else data.tolist()
        rows: list[Any] = [list(r) if isinstance(r, (list, tuple)) else r for r in values]
        if rows and not isinstance(rows[0], list):   # one feature vector, or one prediction per row
            rows = [[v] for v in rows] if what == "predictions" else [rows]
        width = len(rows[0]) if rows else 0
        names = next((list(n) for n in (visible, full) if len(n) == width), None)
        if names is None:
            raise FeatureStoreError(f"feature view {view!r}: {what} rows have {width} values; give "
                                    f"{len(visible)} ({', '.join(visible)}) or a DataFrame with named columns")
        return pa.table({n: [r[i] for r in rows] for i, n in enumerate(names)})
    if hasattr(data, "to_frame") and not hasattr(data, "columns"):   # a pandas or Polars Series
        data = data.to_frame()
    return frames.lower_names(frames.to_arrow(data))


def _plain(column: pa.ChunkedArray) -> pa.ChunkedArray:
    """Arrow's large and view string types as plain strings, so calls from pandas, Polars and DuckDB frames
    make one table."""
    import pyarrow as pa

    if pa.types.is_large_string(column.type) or str(column.type) == "string_view":
        return column.cast(pa.string())
    return column


def _q(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _filter_sql(condition: Condition, present: Sequence[str], params: list[Any]) -> list[str]:
    """The condition in DuckDB SQL, its values `?` parameters appended to `params` (never SQL text)."""
    from hopsml.featurestore.engine import duckdb_condition

    def column(feature: Feature) -> str:
        if feature.name not in present:
            raise FeatureStoreError(f"read_log filter on {feature.name!r}: the log has no such column")
        return _q(feature.name)

    return [duckdb_condition(condition, column, params, {})]
