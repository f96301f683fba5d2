"""The feature store of the web view: its groups (definition, commits, statistics per commit, validation reports),
its views (query, labels, transformation functions, training datasets) and the models trained on them. Plain data
for the templates, as views.py.

The store's JSON records are read as data; a view is never loaded through the SDK, because its transformation
functions may name user code (a module to import, or a pickle) and a read-only page must not run what a root holds.
A record that cannot be read becomes an item that names its file and says why, so one bad file hides nothing else.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
import posixpath
from typing import Any

from hopsml import config, layout
from hopsml.data import dataset as ds
from hopsml.errors import HopsmlError, InvalidNameError
from hopsml.featurestore.store import GROUP_SHAPE, TRAINING_DATASET_SHAPE, VIEW_SHAPE, FeatureStore
from hopsml.featurestore.table import GroupTable
from hopsml.fs import Storage
from hopsml.hopsworks.registry import HSML_RECORD
from hopsml.records import BrokenRecordError, Shape, read_record
from hopsml.ui.views import NotFound, check_inside, model_rows, short_time

log = logging.getLogger(__name__)

MAX_REPORTS = 5   # validation reports (and failed steps after commits) shown on a group's page, newest first
AFTER_COMMIT_SHAPE = Shape("after commit record", required=("commit", "step"),
                           types={"commit": (int,), "step": (str,), "error": (str,)})


def _store(settings: config.Settings, project: str) -> FeatureStore:
    return FeatureStore(dataclasses.replace(settings, project=project))


def _read(storage: Storage, project: str, path: str, shape: Shape | None = None
          ) -> tuple[dict[str, Any] | None, str | None]:
    """(the record, None), or (None, why not) naming the file by its path in the project; `shape` is what the
    record must hold (the SDK's own shape for a group's, view's or training dataset's record, so a page never
    meets a field of the wrong type)."""
    try:
        return read_record(storage, check_inside(storage, path), shape or Shape(posixpath.basename(path))), None
    except (HopsmlError, ValueError) as exc:
        name = posixpath.relpath(path, layout.project_dir(project))
        why = exc.reason if isinstance(exc, BrokenRecordError) else str(exc)
        log.warning("%s of project %s cannot be read: %s", name, project, why)
        return None, f"{name} cannot be read: {why}"


def _numbered(storage: Storage, folder: str, suffix: str = "") -> list[int]:
    """The numbers n of the entries `<n><suffix>` in `folder`, ascending (files with a suffix, else folders)."""
    found = []
    for entry in storage.walk(folder, recursive=False):
        stem = entry.name[: len(entry.name) - len(suffix)] if entry.name.endswith(suffix) else ""
        if stem.isdigit() and (entry.is_file if suffix else entry.is_dir):
            found.append(int(stem))
    return sorted(found)


# --- the page of the whole store -----------------------------------------------------------------------
def overview(settings: config.Settings, project: str) -> dict[str, Any]:
    """Every group version and view version with what their records say, and the models trained on each view."""
    store = _store(settings, project)
    storage = store.storage
    groups = []
    for name, version in store.group_names():
        path = layout.join(layout.feature_group_dir(project, name, version), layout.GROUP_RECORD)
        groups.append(group_summary(name, version, *_read(storage, project, path, GROUP_SHAPE)))
    lineage = model_lineage(storage, project)
    views_ = [view_summary(storage, project, name, version, lineage) for name, version in store.view_names()]
    return {"groups": groups, "views": views_}


def group_summary(name: str, version: int, record: dict[str, Any] | None, problem: str | None) -> dict[str, Any]:
    """A group version as its `_group.json` describes it."""
    row: dict[str, Any] = {"name": name, "version": version, "problem": problem}
    if record is None:
        return row
    features = [f for f in record.get("features") or [] if isinstance(f, dict)]
    row.update(description=record.get("description") or "", primary_key=list(record.get("primary_key") or []),
               event_time=record.get("event_time"), partition_key=list(record.get("partition_key") or []),
               online_enabled=bool(record.get("online_enabled")), created=short_time(record.get("created")),
               features=[{"name": f.get("name"), "type": f.get("type"), "description": f.get("description") or ""}
                         for f in features],
               suite=(record.get("expectation_suite") or {}).get("expectation_suite_name")
               if isinstance(record.get("expectation_suite"), dict) else None)
    return row


# --- a group's page -----------------------------------------------------------------------------------
def group_view(settings: config.Settings, project: str, name: str, version: int, commit: int | None = None
               ) -> dict[str, Any]:
    """A group version: its definition, its commits, the statistics of `commit` (the newest with statistics when
    None) and its newest validation reports."""
    store = _store(settings, project)
    storage = store.storage
    try:
        folder = layout.feature_group_dir(project, name, version)
    except InvalidNameError as exc:
        raise NotFound(str(exc)) from None
    if not store.group_saved(name, version):
        raise NotFound(f"no feature group {name!r} version {version} in project {project!r}")
    record, problem = _read(storage, project, layout.join(folder, layout.GROUP_RECORD), GROUP_SHAPE)
    view = group_summary(name, version, record, problem)
    view["uri"] = storage.uri(folder)
    view["versions"] = store.versions(name)
    view["commits"], view["commits_problem"] = _commits(store, name, version)
    view["after_commit"] = after_commit(storage, project, layout.join(folder, layout.GROUP_AFTER_COMMIT))
    stats_folder = layout.join(folder, layout.GROUP_STATISTICS)
    with_stats = _numbered(storage, stats_folder, ".json")
    for row in view["commits"]:
        row["has_stats"] = row["version"] in with_stats
    chosen = commit if commit is not None else (with_stats[-1] if with_stats else None)
    view["stats_commit"], view["stats"], view["stats_problem"] = chosen, None, None
    if chosen is not None and chosen in with_stats:
        computed, view["stats_problem"] = _read(storage, project, layout.join(stats_folder, f"{chosen}.json"))
        if computed is not None:
            view["stats"] = stats_table(computed, f"commit {chosen}")
            view["stats_rows"] = computed.get("rows")
    elif chosen is not None:
        view["stats_problem"] = (f"commit {chosen} has no statistics (the group's statistics_config may be off; "
                                 "compute_statistics() computes them)")
    view["reports"], view["reports_total"] = validation_reports(storage, project,
                                                                layout.join(folder, layout.GROUP_VALIDATION))
    if record is not None and record.get("online_enabled"):
        view["online"] = online_side(store, name, version, record)
    return view


def online_side(store: FeatureStore, name: str, version: int, record: dict[str, Any]) -> dict[str, Any]:
    """An online-enabled group's online rows and last sync, or why the store cannot be read (never a crash)."""
    from hopsml.errors import FeatureStoreError
    from hopsml.featurestore.online import store_errors
    from hopsml.redact import redact_uri

    out: dict[str, Any] = {"synced": short_time(record.get("online_synced")) if record.get("online_synced") else None,
                           "store": redact_uri(store.settings.online_store) or "SQLite in the project"}
    failures: tuple[type[BaseException], ...] = (FeatureStoreError, *store_errors())
    try:
        group = store.get_feature_group(name, version)
        out["rows"] = store.online().count(group)
        out["behind"] = group.online_behind()
    except failures as exc:
        out["problem"] = str(exc)
    return out


def after_commit(storage: Storage, project: str, folder: str) -> list[dict[str, Any]]:
    """The steps after a commit that failed (FeatureStore.after_commit's records), newest first, at most
    MAX_REPORTS."""
    out = []
    for stamp in reversed(_numbered(storage, folder, ".json")[-MAX_REPORTS:]):
        record, problem = _read(storage, project, layout.join(folder, f"{stamp}.json"), AFTER_COMMIT_SHAPE)
        out.append({"problem": problem} if record is None else
                   {"commit": record.get("commit"), "step": record.get("step"), "error": record.get("error")})
    return out


def _commits(store: FeatureStore, name: str, version: int) -> tuple[list[dict[str, Any]], str | None]:
    """The commits of the group's Delta table, newest first, or why they cannot be read."""
    from deltalake.exceptions import DeltaError

    table = GroupTable(store.table_location(name, version), (), f"{name}_{version}")
    try:
        commits = table.commits()
    except (DeltaError, HopsmlError, OSError, ValueError, KeyError) as exc:
        log.warning("the commits of feature group %s_%s cannot be read: %s", name, version, exc)
        return [], f"the group's table cannot be read: {exc}"
    return [{"version": c.version, "committed": short_time(c.committed_on.isoformat()), "inserted": c.inserted,
             "updated": c.updated, "deleted": c.deleted, "operation": c.operation,
             "added_columns": list(c.added_columns)} for c in commits], None


def stats_table(computed: dict[str, Any], label: str) -> dict[str, Any]:
    """A commit's statistics in the shape of a dataset's stats.json (one split, named `label`), for the shared
    statistics table."""
    columns = []
    for name, entry in (computed.get("columns") or {}).items():
        if isinstance(entry, dict):
            kind = entry.get("kind") or ("numeric" if "histogram" in entry else "categorical")
            columns.append({"name": name, "type": kind, "skew": None, "splits": {label: entry}})
    return {"splits": [label], "columns": columns}


def validation_reports(storage: Storage, project: str, folder: str) -> tuple[list[dict[str, Any]], int]:
    """The newest MAX_REPORTS validation reports (each `<time ns>.json`), and how many there are."""
    stamps = _numbered(storage, folder, ".json")
    reports: list[dict[str, Any]] = []
    for stamp in reversed(stamps[-MAX_REPORTS:]):
        file = f"{stamp}.json"
        when = dt.datetime.fromtimestamp(stamp / 1e9, dt.timezone.utc).isoformat()
        report, problem = _read(storage, project, layout.join(folder, file))
        if report is None:
            reports.append({"file": file, "time": short_time(when), "problem": problem})
            continue
        counts = report.get("statistics") or {}
        failed = [r for r in report.get("results") or [] if isinstance(r, dict) and not r.get("success")]
        reports.append({"file": file, "time": short_time(when), "success": bool(report.get("success")),
                        "result": "passed" if report.get("success") else "failed",
                        "ingestion": report.get("ingestion_result"),
                        "suite": report.get("expectation_suite_name"),
                        "evaluated": counts.get("evaluated_expectations"),
                        "successful": counts.get("successful_expectations"),
                        "failures": [_failure(r) for r in failed]})
    return reports, len(stamps)


def _failure(result: dict[str, Any]) -> str:
    """One failed expectation as a line: its rule, column and how many rows broke it (or the value observed)."""
    config = result.get("expectation_config")
    rule: dict[str, Any] = config if isinstance(config, dict) else result
    column = (rule.get("kwargs") or {}).get("column")
    found = result.get("result") or {}
    where = (result.get("exception_info") or {}).get("exception_message")
    if not where:
        where = (f"{found.get('unexpected_count')} of {found.get('element_count')} rows" if "unexpected_count" in found
                 else f"observed {found.get('observed_value')!r}")
    return f"{rule.get('expectation_type') or rule.get('type')}({column}): {where}"


# --- views and their training datasets -------------------------------------------------------------------
def _query_groups(query: dict[str, Any], join: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """The groups of a stored query, left first, each with its features and how it is joined (a part of the
    wrong type shows as empty: the page names what it can)."""
    key = str(query.get("group") or "")
    name, _, version = key.rpartition("_")
    out = [{"key": key, "name": name, "version": int(version) if version.isdigit() else None,
            "features": _list(query.get("features")), "filters": len(_list(query.get("filters"))),
            "join": None if join is None else {"type": join.get("join_type"), "left_on": _list(join.get("left_on")),
                                               "right_on": _list(join.get("right_on")), "prefix": join.get("prefix")}}]
    for sub in _list(query.get("joins")):
        if isinstance(sub, dict) and isinstance(sub.get("query"), dict):
            out += _query_groups(sub["query"], sub)
    return out


def _list(value: object) -> list[Any]:
    return list(value) if isinstance(value, list) else []


def _dict(value: object) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _function(record: dict[str, Any]) -> dict[str, Any]:
    """A transformation function as a page shows it; user code is named, never imported or unpickled."""
    reference = _dict(record.get("function"))
    code = (f"{reference.get('module')}.{reference.get('qualname')}" if reference.get("module")
            else "a pickled function" if reference.get("pickled") else None)
    return {"name": record.get("name"), "features": _list(record.get("features")), "code": code,
            "fitted": sorted(map(str, _dict(record.get("statistics")).keys()))}


def view_summary(storage: Storage, project: str, name: str, version: int, lineage: list[dict[str, Any]]
                 ) -> dict[str, Any]:
    """A view version as its view.json describes it, with its training datasets and the models that name it."""
    path = layout.join(layout.feature_view_dir(project, name, version), layout.VIEW_RECORD)
    record, problem = _read(storage, project, path, VIEW_SHAPE)
    row: dict[str, Any] = {"name": name, "version": version, "problem": problem}
    row["training_datasets"] = training_datasets(storage, project, name, version, lineage)
    made = {td["dataset"] for td in row["training_datasets"] if td.get("dataset")}
    row["models"] = [m for m in lineage if m["view"] == (name, version) or made & set(m["datasets"])]
    if record is None:
        return row
    query = record.get("query") if isinstance(record.get("query"), dict) else {}
    row.update(description=record.get("description") or "", labels=list(record.get("labels") or []),
               created=short_time(record.get("created")), groups=_query_groups(query) if query else [],
               functions=[_function(f) for f in record.get("transformation_functions") or [] if isinstance(f, dict)],
               logging=bool((record.get("logging") or {}).get("enabled")))
    return row


def view_page(settings: config.Settings, project: str, name: str, version: int) -> dict[str, Any]:
    """The page of one view version; NotFound when it is not saved."""
    store = _store(settings, project)
    try:
        layout.feature_view_dir(project, name, version)
    except InvalidNameError as exc:
        raise NotFound(str(exc)) from None
    if (name, version) not in store.view_names():
        raise NotFound(f"no feature view {name!r} version {version} in project {project!r}")
    return view_summary(store.storage, project, name, version, model_lineage(store.storage, project))


def training_datasets(storage: Storage, project: str, view: str, version: int, lineage: list[dict[str, Any]]
                      ) -> list[dict[str, Any]]:
    """The view version's training datasets, newest first: split, rows, the group commits read, the prepared
    dataset it was written to (and whether it is there), and the models trained on it."""
    folder = layout.training_datasets_dir(project, view, version)
    rows = []
    for number in reversed(_numbered(storage, folder)):
        path = layout.join(folder, str(number), layout.TRAINING_DATASET_RECORD)
        if not storage.exists(path):
            continue   # a version being written: its folder is claimed before its record
        record, problem = _read(storage, project, path, TRAINING_DATASET_SHAPE)
        row: dict[str, Any] = {"version": number, "problem": problem}
        if record is not None:
            commits: dict[str, Any] = record["commits"] if isinstance(record.get("commits"), dict) else {}
            dataset = str(record["dataset"]) if record.get("dataset") else None
            row.update(created=short_time(record.get("created")), description=record.get("description") or "",
                       split=split_text(record.get("split")), rows=dict(record.get("rows") or {}),
                       commits=[dict(zip(("name", "version"), _group_key(key)), key=key, commit=commit)
                                for key, commit in commits.items()],
                       dataset=dataset, dataset_there=dataset is not None and _dataset_there(storage, project, dataset))
        row["models"] = [m for m in lineage if (m["view"] == (view, version) and m["td"] == number)
                         or (row.get("dataset") and row["dataset"] in m["datasets"])]
        rows.append(row)
    return rows


def _group_key(key: str) -> tuple[str, int | None]:
    name, _, version = key.rpartition("_")
    return (name, int(version)) if name and version.isdigit() else (key, None)


def _dataset_there(storage: Storage, project: str, name: str) -> bool:
    try:
        return storage.exists(ds.DatasetDir.of(project, name).manifest)
    except InvalidNameError:
        return False


def split_text(split: object) -> str:
    """How a training dataset version was split, in words.

    >>> split_text({"type": "random", "sizes": {"test": 0.2}, "seed": 7})
    'random: test 20%, seed 7'
    >>> split_text({"type": "time", "ranges": {"train": [None, 1704067200000]}})
    'by event time: train [-, 2024-01-01 00:00:00)'
    >>> split_text({"type": "none"})
    'none'
    """
    if not isinstance(split, dict):
        return ""
    try:
        return _split_text(split)
    except (TypeError, ValueError, AttributeError, OverflowError, OSError):   # a hand-edited record's odd values
        return f"unreadable: {str(split)[:80]}"


def _split_text(split: dict[str, Any]) -> str:
    kind = split.get("type")
    if kind == "random":
        sizes = ", ".join(f"{name} {float(size):.0%}" for name, size in (split.get("sizes") or {}).items())
        return f"random: {sizes}, seed {split.get('seed')}"
    if kind == "time":
        def when(ms: Any) -> str:
            return short_time(dt.datetime.fromtimestamp(ms / 1000, dt.timezone.utc).isoformat()) if ms else "-"
        return "by event time: " + ", ".join(f"{name} [{when(start)}, {when(end)})"
                                             for name, (start, end) in (split.get("ranges") or {}).items())
    return str(kind or "")


# --- lineage to models ----------------------------------------------------------------------------------
def model_lineage(storage: Storage, project: str, rows: list[dict[str, Any]] | None = None
                  ) -> list[dict[str, Any]]:
    """Each registered model version with the feature view and training dataset version its hsml.json records,
    and the datasets its model.json lists (what the run that made it read)."""
    out = []
    for row in rows if rows is not None else model_rows(storage, project):
        if row.get("problem"):
            continue
        entry: dict[str, Any] = {"name": row["name"], "version": row["version"], "view": None, "td": None,
                                 "datasets": [str(d.get("name")) for d in row.get("datasets") or []
                                              if isinstance(d, dict) and d.get("name")]}
        path = layout.join(layout.model_dir(project, row["name"], row["version"]), HSML_RECORD)
        if storage.exists(path):
            record, _ = _read(storage, project, path)
            linked = (record or {}).get("feature_view")
            if isinstance(linked, dict) and linked.get("name") and isinstance(linked.get("version"), int):
                entry["view"] = (str(linked["name"]), linked["version"])
                td = (record or {}).get("training_dataset_version")
                entry["td"] = td if isinstance(td, int) else None
        out.append(entry)
    return out
