"""The project's feature store: where its groups (and views, training datasets) live, and the hopsworks
SDK's calls that create and find them (`get_or_create_feature_group`, `get_feature_group`, ...).

Each group version is a folder `Projects/<project>/FeatureStore/<name>_<version>/`: the Delta table (its
`_delta_log/` and Parquet files) with the group's definition in `_group.json` and the statistics of each
commit in `_statistics/<commit>.json` beside it (Delta readers and VACUUM leave names starting with `_`).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
import os
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from hopsml import config, layout
from hopsml.errors import FeatureStoreError, HopsmlError, InvalidNameError
from hopsml.featurestore.hsfs_members import StoreMembers
from hopsml.fs import Storage
from hopsml.records import BrokenRecordError, Shape, read_record

# The wing's modules below the store are imported where they are used, not here: they bring pyarrow and the
# Delta reader, and `import hopsml.hopsworks` (which imports this module) took 0.7 s with these imports deferred,
# 1.0-1.3 s with them at the top (a program that only uses the model registry pays none of it).
if TYPE_CHECKING:
    from hopsml.featurestore.group import FeatureGroup
    from hopsml.featurestore.online import OnlineStore
    from hopsml.featurestore.query import Query
    from hopsml.featurestore.refs import GroupRef, ViewRef
    from hopsml.featurestore.table import Commit, Location
    from hopsml.featurestore.transformations import TransformationFunction
    from hopsml.featurestore.view import FeatureView

log = logging.getLogger(__name__)

@dataclass(frozen=True)
class RecordShape(Shape):
    """A record's shape with the types inside its lists too: `items` maps a field to the type of its list's items,
    or to the Shape each of its objects must have (a listing shows a record that breaks it as BROKEN, naming the
    file and the field; the SDK refuses to load it)."""

    items: Mapping[str, tuple[type, ...] | Shape] = field(default_factory=dict)

    def check(self, data: object) -> dict[str, Any]:
        data = super().check(data)
        for key, kind in self.items.items():
            for index, item in enumerate(data.get(key) or []):
                where = f"{key}[{index}]"
                if isinstance(kind, Shape):
                    try:
                        kind.check(item)
                    except BrokenRecordError as wrong:
                        raise BrokenRecordError(f"{self.name} field {where!r}: {wrong.reason}") from None
                elif item is None:
                    raise BrokenRecordError(f"{self.name} field {where!r} is null")
                else:
                    Shape(self.name, required=(where,), types={where: kind}).check({where: item})
        ttl = data.get("ttl")
        if ttl is not None and (isinstance(ttl, bool) or not isinstance(ttl, (int, float)) or ttl <= 0):
            raise BrokenRecordError(f"{self.name} field 'ttl' is {ttl!r}, not a positive number of seconds")
        return data


# What a group's, a view's and a training dataset's record must hold before they are shown or made objects of.
GROUP_SHAPE = RecordShape(
    layout.GROUP_RECORD, required=("name", "version"),
    types={"name": (str,), "version": (int,), "description": (str,), "primary_key": (list,), "event_time": (str,),
           "partition_key": (list,), "online_enabled": (bool,), "features": (list,), "created": (str,),
           "statistics_config": (dict, bool), "expectation_suite": (dict,), "online_synced": (str,)},
    items={"primary_key": (str,), "partition_key": (str,),
           "features": Shape("feature", required=("name", "type"),
                             types={"name": (str,), "type": (str,), "description": (str,)})})
VIEW_SHAPE = RecordShape(
    layout.VIEW_RECORD, required=("name", "version", "query"),
    types={"name": (str,), "version": (int,), "query": (dict,), "labels": (list,), "transformation_functions": (list,),
           "description": (str,), "created": (str,), "logging": (dict,), "inference_helper_columns": (list,),
           "training_helper_columns": (list,)},
    items={"labels": (str,), "transformation_functions": (dict,), "inference_helper_columns": (str,),
           "training_helper_columns": (str,)})
TRAINING_DATASET_SHAPE = RecordShape(
    layout.TRAINING_DATASET_RECORD,
    types={"version": (int,), "commits": (dict,), "split": (dict,), "rows": (dict,), "dataset": (str,),
           "description": (str,), "created": (str,), "transformation_functions": (list,), "labels": (list,),
           "state": (str,)})


class FeatureStore(StoreMembers):
    """The feature store of the settings' project (as `project.get_feature_store()` returns it)."""

    def __init__(self, settings: config.Settings | None = None) -> None:
        self.settings = settings or config.load()
        self.storage = Storage(self.settings.root)
        self.project = self.settings.project
        self.name = f"{self.project}_featurestore"
        self._owed_seen: dict[str, tuple[float, dict[str, Any] | None]] = {}   # group key -> (when looked, owed)
        self._owed_warned: set[tuple[str, str]] = set()   # (group key, when the insert began): warned about

    def __repr__(self) -> str:
        return f"FeatureStore({self.name!r})"

    # --- where things are -------------------------------------------------------------------------------
    def table_location(self, name: str, version: int) -> Location:
        """Where group `name` version `version` keeps its Delta table (a local folder, S3 or HDFS)."""
        from hopsml.featurestore.table import Location

        layout.validate_table_name(name, "feature group name")
        return Location.of(self.storage, layout.feature_group_dir(self.project, name, version))

    def _record(self, name: str, version: int) -> str:
        return layout.join(layout.feature_group_dir(self.project, name, version), layout.GROUP_RECORD)

    def group_saved(self, name: str, version: int) -> bool:
        """Whether group `name` version `version` has its record (a group is saved by its first insert or save())."""
        return self.storage.exists(self._record(name, version))

    def save_group(self, group: GroupRef) -> None:
        """Write the group's definition (its record beside the Delta table)."""
        self.storage.write_json(self._record(group.name, group.version), group.to_dict())

    def log_uri(self, name: str, version: int) -> str:
        """The local folder of a feature view's log (feature_log.py)."""
        path = self.storage.local_path(layout.join(layout.feature_view_dir(self.project, name, version),
                                                   layout.VIEW_LOG))
        if path is None:
            raise FeatureStoreError(f"feature logging needs a local or shared-folder root for now; the root "
                                    f"{self.storage.uri()} is remote")
        return path

    def online(self) -> OnlineStore:
        """The project's online store (the `online_store` setting; SQLite in the feature store by default)."""
        from hopsml.featurestore.online import open_store

        return open_store(self.settings, self.storage)

    def group_lock(self, group: GroupRef) -> contextlib.AbstractContextManager[None]:
        """Held while an insert commits and rewrites the group's definition (one process at a time). A remote
        table has no lock: there Delta's commit (a conditional write) refuses a conflicting commit, retried."""
        if group.table.remote:
            return contextlib.nullcontext()
        from hopsml.featurestore.table import folder_lock

        return folder_lock(group.table.uri)

    # --- the online write an insert owes --------------------------------------------------------------------
    # Written before the offline commit and removed once the online store holds the batch: a process killed in
    # between, or an online write that failed, leaves it, so readers can say the online side is behind and the
    # next insert (or `hopsml fs sync`) rewrites the online side from the offline table.
    def _owed_path(self, group: GroupRef) -> str:
        return layout.join(layout.feature_group_dir(self.project, group.name, group.version),
                           layout.GROUP_ONLINE_OWED)

    def owe_online(self, group: GroupRef, since_commit: int) -> dict[str, Any] | None:
        """Record that the insert about to commit owes its online write; returns what an earlier insert still
        owed (None when the online side was complete)."""
        owed = self.online_owed(group, fresh=True)
        self.storage.write_json(self._owed_path(group), {
            "since_commit": owed["since_commit"] if owed else since_commit, "pid": os.getpid(),
            "host": os.uname().nodename, "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())})
        self._owed_seen.pop(group.key, None)
        return owed

    def paid_online(self, group: GroupRef) -> None:
        """The online store holds every commit of the group: nothing is owed."""
        self.storage.delete(self._owed_path(group))
        self._owed_seen.pop(group.key, None)

    def online_owed(self, group: GroupRef, fresh: bool = False) -> dict[str, Any] | None:
        """What the group's online side still owes (from which commit on, since when), or None when it holds the
        newest row per key of every commit. Looked at once a second per group at most (vector lookups ask on
        every call), unless `fresh`."""
        now = time.monotonic()
        seen = self._owed_seen.get(group.key)
        if not fresh and seen is not None and now - seen[0] < 1.0:
            return seen[1]
        path = self._owed_path(group)
        try:
            owed = dict(self.storage.read_json(path)) if self.storage.exists(path) else None
        except (OSError, ValueError, HopsmlError) as exc:   # unreadable: owed all the same
            owed = {"since_commit": None, "problem": str(exc)}
        self._owed_seen[group.key] = (now, owed)
        return owed

    def warn_if_online_behind(self, group: GroupRef) -> None:
        """What a reader of the online store calls: a warning, once per interrupted insert, that the group's online
        rows miss commits (until the next insert or `hopsml fs sync` completes them)."""
        owed = self.online_owed(group)
        if owed is None:
            return
        mark = (group.key, str(owed.get("started")))
        if mark not in self._owed_warned:
            self._owed_warned.add(mark)
            log.warning("feature group %s: its online rows miss the commits since %s (an insert was interrupted "
                        "or its online write failed, %s); the next insert or `hopsml fs sync %s %s` completes them",
                        group.key, owed.get("since_commit"), owed.get("started"), group.name, group.version)

    @contextlib.contextmanager
    def after_commit(self, group: GroupRef, commit: Commit, step: str) -> Iterator[None]:
        """Around a step that follows an insert's commit (the group's definition, the online write, statistics):
        the commit has landed, so a failure is logged and recorded beside the group (`after_commit_problems`, the
        web view's group page), never raised; a retried insert would insert again."""
        try:
            yield
        except Exception as error:  # noqa: BLE001 - any failure: an insert that landed must not look failed
            log.error("feature group %s: commit %d landed, but %s failed: %s", group.key, commit.version, step, error)
            path = layout.join(layout.feature_group_dir(self.project, group.name, group.version),
                               layout.GROUP_AFTER_COMMIT, f"{time.time_ns()}.json")
            try:
                self.storage.write_json(path, {"commit": commit.version, "step": step, "error": str(error),
                                               "committed_on": commit.committed_on.isoformat()})
            except Exception as unrecorded:  # noqa: BLE001 - e.g. the disk that failed the step; logged above
                log.error("feature group %s: could not record that %s failed after commit %d: %s", group.key,
                          step, commit.version, unrecorded)

    def after_commit_problems(self, group: GroupRef) -> list[dict[str, Any]]:
        """The steps after a commit that failed (`after_commit`), oldest first."""
        folder = layout.join(layout.feature_group_dir(self.project, group.name, group.version),
                             layout.GROUP_AFTER_COMMIT)
        if not self.storage.exists(folder):
            return []
        names = sorted((e.name for e in self.storage.walk(folder, recursive=False) if e.name.endswith(".json")),
                       key=lambda n: int(n[:-5]) if n[:-5].isdigit() else 0)
        return [dict(self.storage.read_json(layout.join(folder, n))) for n in names]

    def save_view(self, view: ViewRef) -> None:
        """Write the view's definition (query, labels, transformation functions, logging state)."""
        self.storage.write_json(self._view_record(view.name, view.version), view.to_dict())

    def save_statistics(self, group: GroupRef, commit: Commit, computed: dict[str, Any]) -> None:
        """Keep the statistics computed for one commit of the group, beside its table."""
        path = layout.join(layout.feature_group_dir(self.project, group.name, group.version),
                           layout.GROUP_STATISTICS, f"{commit.version}.json")
        self.storage.write_json(path, {"commit": commit.version, "committed_on": commit.committed_on.isoformat(),
                                       **computed})

    def save_validation(self, group: GroupRef, report: dict[str, Any]) -> str:
        """Keep a validation report beside the group's table; where it lies."""
        path = layout.join(layout.feature_group_dir(self.project, group.name, group.version),
                           layout.GROUP_VALIDATION, f"{time.time_ns()}.json")
        self.storage.write_json(path, report)
        return self.storage.uri(path)

    def read_statistics(self, group: GroupRef, version: int | None = None) -> dict[str, Any]:
        """The statistics of the group's newest commit (at or before commit `version` when given)."""
        folder = layout.join(layout.feature_group_dir(self.project, group.name, group.version),
                             layout.GROUP_STATISTICS)
        found = sorted(int(e.name[:-5]) for e in self.storage.walk(folder, recursive=False)
                       if e.name.endswith(".json") and e.name[:-5].isdigit()) if self.storage.exists(folder) else []
        found = [v for v in found if version is None or v <= version]
        if not found:
            raise FeatureStoreError(f"feature group {group.key!r} has no statistics"
                                    + (f" at or before commit {version}" if version is not None else "")
                                    + ": statistics_config may be off; call compute_statistics()")
        return dict(self.storage.read_json(layout.join(folder, f"{found[-1]}.json")))

    def _saved(self, folder: str, record: Callable[[str, int], str]) -> list[tuple[str, int]]:
        """(name, version) of every `<name>_<version>` folder in `folder` whose record (`record(name, version)`,
        a path) exists: what is saved, not what a failed first insert left."""
        if not self.storage.exists(folder):
            return []
        out = []
        for entry in self.storage.walk(folder, recursive=False):
            name, _, version = entry.name.rpartition("_")
            if entry.is_dir and name and version.isdigit() and self.storage.exists(record(name, int(version))):
                out.append((name, int(version)))
        return sorted(out)

    def versions(self, name: str) -> list[int]:
        """The saved versions of group `name`, oldest first."""
        return [v for n, v in self.group_names() if n == name]

    def group_names(self) -> list[tuple[str, int]]:
        """(name, version) of every saved group version, sorted."""
        return self._saved(layout.feature_store_dir(self.project), self._record)

    # --- the hopsworks SDK's calls ----------------------------------------------------------------------
    def _load(self, name: str, version: int) -> FeatureGroup:
        from hopsml.featurestore.group import FeatureGroup

        record = read_record(self.storage, self._record(name, version), GROUP_SHAPE)
        return FeatureGroup(self, record["name"], record["version"], description=record.get("description", ""),
                            primary_key=record.get("primary_key") or [], event_time=record.get("event_time"),
                            partition_key=record.get("partition_key") or [],
                            online_enabled=record.get("online_enabled", False),
                            statistics_config=record.get("statistics_config"), features=record.get("features") or [],
                            created=record.get("created"), expectation_suite=record.get("expectation_suite"),
                            ttl=record.get("ttl"), online_synced=record.get("online_synced"))

    def get_feature_group(self, name: str, version: int | None = None) -> FeatureGroup:
        """Group `name` at `version` (the newest when None)."""
        versions = self.versions(name)
        if version is None:
            if not versions:
                raise FeatureStoreError(f"no feature group {name!r} in project {self.project!r}"
                                        + _known(self.group_names()))
            version = versions[-1]
        if int(version) not in versions:
            raise FeatureStoreError(f"no feature group {name!r} version {version} in project {self.project!r}"
                                    + (f"; its versions: {versions}" if versions else _known(self.group_names())))
        return self._load(name, int(version))

    def get_feature_groups(self, name: str | None = None) -> list[FeatureGroup]:
        """Every saved version of every group (of group `name` only when given)."""
        return [self._load(n, v) for n, v in self.group_names() if name is None or n == name]

    def scan_groups(self) -> list[tuple[str, int, FeatureGroup | BrokenRecordError]]:
        """Every saved group version: the group, or why its record cannot be read (a listing shows it as
        BROKEN and goes on with the others)."""
        found: list[tuple[str, int, FeatureGroup | BrokenRecordError]] = []
        for name, version in self.group_names():
            try:
                found.append((name, version, self._load(name, version)))
            except BrokenRecordError as exc:
                found.append((name, version, exc))
            except (FeatureStoreError, KeyError, TypeError, ValueError) as exc:   # fields the group refuses
                reason = f"{layout.GROUP_RECORD} cannot be loaded: {exc}"
                found.append((name, version, BrokenRecordError(reason, reason=reason)))
        return found

    def create_feature_group(self, name: str, version: int | None = None, description: str = "",
                             online_enabled: bool = False, primary_key: Sequence[str] | None = None,
                             event_time: str | None = None, partition_key: Sequence[str] | None = None,
                             statistics_config: object = None, **options: Any) -> FeatureGroup:
        """A new group (saved by its first insert); refused when that version exists."""
        from hopsml.featurestore.group import FeatureGroup

        _check_options(options)
        version = version if version is not None else (self.versions(name) or [0])[-1] + 1
        if self.group_saved(name, int(version)):
            raise FeatureStoreError(f"feature group {name!r} version {version} exists: get it with "
                                    "get_feature_group, or create another version")
        return FeatureGroup(self, name, int(version), description=description, primary_key=primary_key or [],
                            event_time=event_time, partition_key=partition_key or [],
                            online_enabled=online_enabled, statistics_config=statistics_config,
                            expectation_suite=options.get("expectation_suite"), ttl=options.get("ttl"))

    def get_or_create_feature_group(self, name: str, version: int | None = None, description: str = "",
                                    online_enabled: bool = False, primary_key: Sequence[str] | None = None,
                                    event_time: str | None = None, partition_key: Sequence[str] | None = None,
                                    statistics_config: object = None, **options: Any) -> FeatureGroup:
        """Group `name` at `version` (the newest when None) if saved, else a new one saved by its first insert."""
        versions = self.versions(name)
        wanted = version if version is not None else (versions[-1] if versions else 1)
        if int(wanted) in versions:
            return self._load(name, int(wanted))
        return self.create_feature_group(name, int(wanted), description, online_enabled, primary_key, event_time,
                                         partition_key, statistics_config, **options)

    def delete_group(self, group: GroupRef) -> None:
        """The group's folder and, when it is online enabled, its online table."""
        if group.online_enabled:
            self.online().drop(group)
        self.storage.delete(layout.feature_group_dir(self.project, group.name, group.version))

    def run_query(self, query: Query, dataframe_type: str = "default", read_options: dict[str, Any] | None = None
                  ) -> Any:
        """A query's rows, by the engine it chooses (`engine.run`)."""
        from hopsml.featurestore import engine

        return engine.run(query, dataframe_type, read_options)

    def query_sql(self, query: Query) -> str:
        """The SQL the embedded engine (DuckDB) runs for `query`: what `query.to_string()` shows."""
        from hopsml.featurestore import engine

        return engine.duckdb_sql(query)

    # --- feature views and their training datasets ---------------------------------------------------------
    def _group_by_key(self, key: str) -> FeatureGroup:
        name, _, version = key.rpartition("_")
        return self.get_feature_group(name, int(version))

    def _view_record(self, name: str, version: int) -> str:
        return layout.join(layout.feature_view_dir(self.project, name, version), layout.VIEW_RECORD)

    def view_versions(self, name: str) -> list[int]:
        """The saved versions of view `name`, oldest first."""
        return [v for n, v in self.view_names() if n == name]

    def view_names(self) -> list[tuple[str, int]]:
        """(name, version) of every saved view version, sorted."""
        return self._saved(layout.feature_views_dir(self.project), self._view_record)

    def _load_view(self, name: str, version: int) -> FeatureView:
        from hopsml.featurestore.query import from_dict
        from hopsml.featurestore.transformations import TransformationFunction
        from hopsml.featurestore.view import FeatureView

        record = read_record(self.storage, self._view_record(name, version), VIEW_SHAPE)
        return FeatureView(self, record["name"], record["version"], from_dict(record["query"], self._group_by_key),
                           record.get("labels") or [],
                           [TransformationFunction.from_dict(f) for f in record.get("transformation_functions", [])],
                           record.get("description", ""), record.get("created"), record.get("logging"),
                           record.get("inference_helper_columns") or (), record.get("training_helper_columns") or ())

    def create_feature_view(self, name: str, query: Query, version: int | None = None, description: str = "",
                            labels: Sequence[str] | None = None,
                            transformation_functions: Sequence[TransformationFunction] | None = None,
                            **options: Any) -> FeatureView:
        """A new feature view of `query` (saved now); refused when that version exists."""
        from hopsml.featurestore.query import Query as QueryType
        from hopsml.featurestore.view import FeatureView

        if not isinstance(query, QueryType):
            raise FeatureStoreError("query= takes a query: fg.select([...]) or fg.select_all(), joined as needed")
        layout.validate_table_name(name, "feature view name")   # its feature log is a Delta table in its folder
        for key in options:
            if key not in ("inference_helper_columns", "training_helper_columns", "logging_enabled"):
                raise FeatureStoreError(f"unknown argument {key!r} for a feature view")
        version = int(version) if version is not None else (self.view_versions(name) or [0])[-1] + 1
        if version in self.view_versions(name):
            raise FeatureStoreError(f"feature view {name!r} version {version} exists: get it with get_feature_view, "
                                    "or create another version")
        for group in query.groups():
            if not group.saved:
                raise FeatureStoreError(f"feature group {group.key!r} is not saved yet: insert into it before "
                                        "building a view on it")
        view = FeatureView(self, name, version, query, labels or [], transformation_functions or [], description,
                           dt.datetime.now(dt.timezone.utc).isoformat(),
                           {"enabled": bool(options.get("logging_enabled")), "paused": False},
                           options.get("inference_helper_columns") or (), options.get("training_helper_columns") or ())
        self.save_view(view)
        return view

    def get_feature_view(self, name: str, version: int | None = None) -> FeatureView:
        """View `name` at `version` (the newest when None); refused, naming the saved views, when it is not saved."""
        versions = self.view_versions(name)
        if not versions or (version is not None and int(version) not in versions):
            known = sorted({n for n, _ in self.view_names()})
            raise FeatureStoreError(f"no feature view {name!r}" + (f" version {version}" if version is not None else "")
                                    + f" in project {self.project!r}"
                                    + (f"; its views: {', '.join(known)}" if known else "; it has no views yet"))
        return self._load_view(name, int(version) if version is not None else versions[-1])

    def get_feature_views(self, name: str | None = None) -> list[FeatureView]:
        """Every saved version of every view (of view `name` only when given)."""
        return [self._load_view(n, v) for n, v in self.view_names() if name is None or n == name]

    def scan_views(self) -> list[tuple[str, int, FeatureView | BrokenRecordError]]:
        """Every saved view version: the view, or why its record cannot be read (shown as BROKEN)."""
        found: list[tuple[str, int, FeatureView | BrokenRecordError]] = []
        for name, version in self.view_names():
            try:
                found.append((name, version, self._load_view(name, version)))
            except BrokenRecordError as exc:
                found.append((name, version, exc))
            except (FeatureStoreError, KeyError, TypeError, ValueError) as exc:   # a query naming what is not there
                reason = f"{layout.VIEW_RECORD} cannot be loaded: {exc}"
                found.append((name, version, BrokenRecordError(reason, reason=reason)))
        return found

    def get_or_create_feature_view(self, name: str, query: Query, version: int | None = None, description: str = "",
                                   labels: Sequence[str] | None = None,
                                   transformation_functions: Sequence[TransformationFunction] | None = None,
                                   **options: Any) -> FeatureView:
        """View `name` at `version` (the newest when None) if saved, else a new one of `query` (create_feature_view)."""
        versions = self.view_versions(name)
        wanted = int(version) if version is not None else (versions[-1] if versions else 1)
        if wanted in versions:
            return self._load_view(name, wanted)
        return self.create_feature_view(name, query, wanted, description, labels, transformation_functions, **options)

    def delete_view(self, view: ViewRef) -> None:
        """Delete the view's record and its training dataset versions' records (the groups it reads stay)."""
        self.storage.delete(layout.feature_view_dir(self.project, view.name, view.version))
        self.storage.delete(layout.training_datasets_dir(self.project, view.name, view.version))

    def training_dataset_versions(self, view: ViewRef) -> list[int]:
        """The view's training dataset versions that have a record, oldest first."""
        folder = layout.training_datasets_dir(self.project, view.name, view.version)
        if not self.storage.exists(folder):
            return []
        return sorted(int(e.name) for e in self.storage.walk(folder, recursive=False)
                      if e.is_dir and e.name.isdigit()
                      and self.storage.exists(layout.join(folder, e.name, layout.TRAINING_DATASET_RECORD)))

    def save_training_dataset(self, view: ViewRef, record: dict[str, Any]) -> int:
        """Record a new training dataset version of `view`; its number."""
        folder = layout.training_datasets_dir(self.project, view.name, view.version)
        self.storage.makedirs(folder)
        version = (self.training_dataset_versions(view) or [0])[-1] + 1
        while not self.storage.claim_dir(layout.join(folder, str(version))):  # another process took it
            version += 1
        self.storage.write_json(layout.join(folder, str(version), layout.TRAINING_DATASET_RECORD),
                                {"version": version, "feature_view": view.key, **record})
        return version

    def update_training_dataset(self, view: ViewRef, version: int, **fields: object) -> None:
        """Add or replace fields of a training dataset version's record (its statistics, its dataset's name)."""
        record = self.read_training_dataset(view, version)
        record.pop("state", None)   # said when it is read, never stored
        path = layout.join(layout.training_datasets_dir(self.project, view.name, view.version), str(int(version)),
                           layout.TRAINING_DATASET_RECORD)
        self.storage.write_json(path, {**record, **fields})

    def read_training_dataset(self, view: ViewRef, version: int) -> dict[str, Any]:
        """A training dataset version's record, with its `state`: COMPLETE, or INCOMPLETE when it names a
        written-out dataset that is not there (its record is written before its data, so a write that failed, was
        killed or is still running leaves one; it is never listed as normal)."""
        path = layout.join(layout.training_datasets_dir(self.project, view.name, view.version), str(int(version)),
                           layout.TRAINING_DATASET_RECORD)
        if not self.storage.exists(path):
            raise FeatureStoreError(f"feature view {view.key!r} has no training dataset version {version}; its "
                                    f"versions: {self.training_dataset_versions(view)}")
        record = read_record(self.storage, path, TRAINING_DATASET_SHAPE)
        return {**record, "state": "COMPLETE" if self.dataset_written(record.get("dataset")) else "INCOMPLETE"}

    def dataset_written(self, name: str | None) -> bool:
        """Whether the prepared dataset `name` a training dataset names is finished (True for none named: the
        version lives in its record alone)."""
        from hopsml.data import dataset as ds

        if not name:
            return True
        try:
            ddir = ds.DatasetDir.of(self.project, name)
        except InvalidNameError:
            return False
        return self.storage.exists(ddir.success) and self.storage.exists(ddir.manifest)

    def get_transformation_functions(self) -> list[TransformationFunction]:
        """The built-in transformation functions (min_max_scaler, standard_scaler, label_encoder, ...), unfitted."""
        from hopsml.featurestore import transformations

        return transformations.builtins()

    def get_transformation_function(self, name: str, version: int | None = None) -> TransformationFunction:
        """A built-in by name, or a function saved by fs.create_transformation_function(fn).save()."""
        saved = self.saved_transformation_function(name, version)
        if saved is not None:
            return saved
        for function in self.get_transformation_functions():
            if function.name == name:
                return function
        raise FeatureStoreError(f"no transformation function {name!r}; the built-ins: "
                                f"{', '.join(f.name for f in self.get_transformation_functions())}")


_NOT_HERE = {"stream": "stream feature groups (Kafka)", "embedding_index": "vector embeddings (OpenSearch)",
             "storage_connector": "external feature groups on storage connectors",
             "online_config": "online table options", "topic_name": "Kafka topics",
             "notification_topic_name": "Kafka notifications", "offline_backfill_every_hr": "scheduled backfill jobs"}
_LATER = {"features": "a schema given before the first insert (insert a DataFrame: its columns are the schema)",
          "transformation_functions": "on-demand transformation functions on feature groups (give them to the "
          "feature view)"}
_ACCEPTED = {"time_travel_format", "hudi_precombine_key", "parents", "path", "expectation_suite", "ttl",
             "foreign_key"}   # foreign_key: hsfs keeps it as metadata for joins; a join here names its keys itself


def _check_options(options: dict[str, Any]) -> None:
    for key, value in options.items():
        if value is None and (key in _NOT_HERE or key in _LATER or key in _ACCEPTED):
            continue   # the SDK's default: nothing asked for
        if key in _NOT_HERE and value:
            raise FeatureStoreError(f"{key}={value!r}: hopsml has no {_NOT_HERE[key]}")
        if key in _LATER and value:
            raise FeatureStoreError(f"{key}=...: hopsml does not take {_LATER[key]} yet")
        if key not in _NOT_HERE and key not in _LATER and key not in _ACCEPTED:
            raise FeatureStoreError(f"unknown argument {key!r} for a feature group")
        if key == "time_travel_format" and value and str(value).upper() not in ("DELTA", "HUDI"):
            raise FeatureStoreError(f"time_travel_format={value!r}: hopsml's groups are Delta Lake tables")


def _known(groups: list[tuple[str, int]]) -> str:
    names = sorted({name for name, _ in groups})
    return f"; its groups: {', '.join(names)}" if names else "; it has no feature groups yet"
