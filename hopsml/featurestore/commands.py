"""The feature store commands of the ``hopsml`` CLI: ``fs insert`` (a CSV or Parquet file into a group),
``fs groups list|show``, ``fs views list|show``, ``fs training-datasets list``, and for the online store
``fs sync`` (repair a group's online rows), ``fs check-online`` (online against offline) and ``fs vector``.

``add_commands(subparsers)`` adds them to the CLI's parser; ``run(args, settings)`` runs the one that was
parsed and returns the text to print.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from hopsml import config
from hopsml.cli_tables import format_fields, format_table, pairs
from hopsml.errors import FeatureStoreError
from hopsml.featurestore import frames
from hopsml.featurestore.store import FeatureStore
from hopsml.records import BROKEN, BrokenRecordError

if TYPE_CHECKING:
    from hopsml.featurestore.group import FeatureGroup

COMMANDS = ("fs",)


def add_commands(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    fs = subparsers.add_parser("fs", help="the feature store: insert into groups, list groups, views and "
                                          "training datasets")
    actions = fs.add_subparsers(dest="fs_action", required=True)
    insert = actions.add_parser("insert", help="insert a CSV or Parquet file into a feature group (created with "
                                               "--primary-key when it does not exist)")
    insert.add_argument("group", help="the feature group's name")
    insert.add_argument("file", help="a .csv or .parquet file")
    insert.add_argument("--version", type=int, help="the group's version (default: the newest, or 1)")
    insert.add_argument("--primary-key", help="column(s) identifying an entity, comma separated (for a new group)")
    insert.add_argument("--event-time", help="the column of each row's time (for a new group)")
    insert.add_argument("--description", default="", help="the group's description (for a new group)")
    insert.add_argument("--delimiter", default=",", help="a CSV file's field separator (default ',')")
    insert.add_argument("--skip-rows", type=int, default=0, help="lines before a CSV file's header (default 0)")
    insert.add_argument("--columns", help="the column names of a CSV file without a header, comma separated")
    insert.add_argument("--row-number", metavar="COLUMN", help="add a column of row numbers (0, 1, ...) named "
                        "COLUMN, a primary key for a file without one")
    insert.add_argument("--duplicate-keys", choices=("last", "refuse"), default="last",
                        help="a key the file repeats: keep its last row, as Hopsworks' upsert does (default), or "
                        "refuse the file")
    for kind in ("groups", "views"):
        parser = actions.add_parser(kind, help=f"list or show feature {kind}")
        verbs = parser.add_subparsers(dest="fs_verb", required=True)
        verbs.add_parser("list", help=f"every feature {kind[:-1]} version of the project")
        show = verbs.add_parser("show", help=f"one feature {kind[:-1]}: its definition, features and "
                                             + ("commits" if kind == "groups" else "training datasets"))
        show.add_argument("name", help=f"the feature {kind[:-1]}'s name, as in 'hopsml fs {kind} list'")
        show.add_argument("version", nargs="?", type=int, help="default: the newest")
    sync = actions.add_parser("sync", help="make an online-enabled group's online rows the newest per key of its "
                                           "offline table (repairs the online side)")
    sync.add_argument("name", help="the online-enabled feature group's name")
    sync.add_argument("version", nargs="?", type=int, help="default: the newest")
    check = actions.add_parser("check-online", help="compare a view's online feature vectors with the offline "
                                                    "point-in-time rows at now, per feature")
    check.add_argument("view", help="the feature view's name")
    check.add_argument("version", nargs="?", type=int, help="the view's version (default: the newest)")
    check.add_argument("--sample", type=int, default=100, help="keys to check (default 100)")
    check.add_argument("--seed", type=int, help="the sample's seed (default: a new sample each time)")
    check.add_argument("--training-dataset-version", type=int, help="the training dataset version whose recorded "
                       "statistics the offline side is transformed with (default: the newest, which serving uses)")
    check.add_argument("--serving-version", type=int, help="the training dataset version the online side is "
                       "served with (init_serving; default: the newest)")
    vector = actions.add_parser("vector", help="print a view's feature vector for one entry")
    vector.add_argument("view", help="the feature view's name")
    vector.add_argument("keys", nargs="+", metavar="KEY=VALUE", help="the serving keys' values")
    vector.add_argument("--version", type=int, help="the view's version (default: the newest)")
    vector.add_argument("--untransformed", action="store_true", help="the values before the transformation "
                                                                     "functions")
    datasets = actions.add_parser("training-datasets", help="the training dataset versions of a feature view")
    verbs = datasets.add_subparsers(dest="fs_verb", required=True)
    lister = verbs.add_parser("list", help="every training dataset version of a view")
    lister.add_argument("view", help="the feature view's name")
    lister.add_argument("version", nargs="?", type=int, help="the view's version (default: the newest)")


def run(args: argparse.Namespace, settings: config.Settings) -> str:
    store = FeatureStore(settings)
    if args.fs_action == "insert":
        return insert(store, args.group, args.file, args.version, args.primary_key, args.event_time,
                      args.description, args.delimiter, args.skip_rows,
                      [c.strip() for c in args.columns.split(",")] if args.columns else None, args.row_number,
                      args.duplicate_keys)
    if args.fs_action == "groups":
        return groups_list(store) if args.fs_verb == "list" else group_show(store, args.name, args.version)
    if args.fs_action == "views":
        return views_list(store) if args.fs_verb == "list" else view_show(store, args.name, args.version)
    if args.fs_action == "sync":
        group = store.get_feature_group(args.name, args.version)
        return f"online store of feature group {group.key!r}: {group.sync_online()} rows, the newest per key"
    if args.fs_action == "check-online":
        return check_online(store, args.view, args.version, args.sample, args.seed, args.training_dataset_version,
                            args.serving_version)
    if args.fs_action == "vector":
        return vector(store, args.view, args.version, args.keys, not args.untransformed)
    return training_datasets(store, args.view, args.version)


def check_online(store: FeatureStore, name: str, version: int | None, sample: int, seed: int | None,
                 training_dataset_version: int | None = None, serving_version: int | None = None) -> str:
    from hopsml.featurestore import vectors

    view = store.get_feature_view(name, version)
    if serving_version is not None:
        view.init_serving(serving_version)
    report = vectors.check(view, sample, seed, training_dataset_version=training_dataset_version)
    rows = [{"feature": feature, "mismatches": report["features"][feature],
             "transformed": report["transformed"].get(feature)} for feature in report["features"]]
    rows += [{"feature": column, "mismatches": None, "transformed": count}
             for column, count in report["transformed"].items() if column not in report["features"]]
    lines = [f"view {report['view']}: {report['checked']} keys, online against offline at {report['at'][:19]}: "
             + ("no mismatch" if not report["mismatches"] else f"{report['mismatches']} mismatches"),
             format_table(rows, ("feature", "mismatches", "transformed"))]
    lines += [f"  {e['entry']} {e['feature']}: online {e['online']!r}, offline {e['offline']!r}"
              for e in report["examples"][:10]]
    behind = [f"feature group {group.key}: online side {_online_state(group)}" for group in view.query.groups()
              if group.online_enabled and group.online_behind() is not None]
    lines += behind
    if report["mismatches"] or behind:
        skew = bool(report["mismatches"]) and not sum(report["features"].values())
        raise FeatureStoreError("\n".join(lines) + (
            "\nthe features agree and their transformed values do not: the serving transforms with other statistics "
            f"than training dataset version {report.get('training_dataset_version')} recorded (init_serving with "
            "the version the model was trained on)" if skew else "\nrepair the online side with: hopsml fs sync GROUP"))
    return "\n".join(lines)


def vector(store: FeatureStore, name: str, version: int | None, keys: list[str], transform: bool) -> str:
    view = store.get_feature_view(name, version)
    entry = {}
    for item in keys:
        key, sep, value = item.partition("=")
        if not sep:
            raise FeatureStoreError(f"{item!r}: give each serving key as KEY=VALUE ({', '.join(view.serving_keys)})")
        entry[key] = _typed(value)
    frame = view.get_feature_vector(entry, return_type="pandas", transform=transform)
    return format_fields([(column, repr(frame[column].iloc[0])) for column in frame.columns])


def _typed(text: str) -> Any:
    """A key's value as typed on the command line: a whole number, a decimal, else the text."""
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def insert(store: FeatureStore, name: str, path: str, version: int | None, primary_key: str | None,
           event_time: str | None, description: str, delimiter: str = ",", skip_rows: int = 0,
           columns: list[str] | None = None, row_number: str | None = None, duplicate_keys: str = "last") -> str:
    keys = [k.strip() for k in primary_key.split(",") if k.strip()] if primary_key else []
    group = store.get_or_create_feature_group(name, version, description=description, primary_key=keys,
                                              event_time=event_time)
    if not group.saved and not keys:
        raise FeatureStoreError(f"feature group {name!r} does not exist yet: give --primary-key (and "
                                       "--event-time) to create it")
    table = frames.read_file(path, delimiter, skip_rows, columns)
    if row_number:
        import pyarrow as pa

        if row_number.lower() in (c.lower() for c in table.column_names):
            raise FeatureStoreError(f"--row-number {row_number!r}: {path} has a column of that name already")
        table = table.append_column(row_number, pa.array(range(table.num_rows), pa.int64()))
    commit = group.commit(table, duplicates=frames.duplicates_policy({"duplicate_keys": duplicate_keys},
                                                                     group.key))[0]
    return (f"inserted {table.num_rows} rows of {path} into feature group {group.key!r}: commit {commit.version}, "
            f"{commit.inserted} new, {commit.updated} updated"
            + (f", new columns {', '.join(commit.added_columns)}" if commit.added_columns else ""))


def groups_list(store: FeatureStore) -> str:
    rows: list[dict[str, Any]] = []
    broken: list[str] = []
    for name, version, group in store.scan_groups():
        if isinstance(group, BrokenRecordError):
            rows.append({"name": name, "version": version, "description": BROKEN})
            broken.append(f"{name} version {version}: {BROKEN}: {group.reason}")
            continue
        commits = group.table.commits()
        rows.append({"name": group.name, "version": group.version, "primary key": ",".join(group.primary_key),
                     "event time": group.event_time, "features": len(group.features), "commits": len(commits),
                     "last commit": commits[0].committed_on.isoformat()[:19] if commits else None,
                     "description": group.description or None})
    if not rows:
        return (f"no feature groups in project {store.project!r}: insert one with hopsml fs insert NAME FILE "
                "--primary-key COLUMN")
    table = format_table(rows, ("name", "version", "primary key", "event time", "features", "commits", "last commit",
                                "description"))
    return table + _broken_lines(broken)


def _broken_lines(broken: list[str]) -> str:
    """Below a listing: the records it could not read, and why."""
    return "\n\nrecords that cannot be read:\n" + "\n".join(broken) if broken else ""


def _online_state(group: FeatureGroup) -> str:
    owed = group.online_behind()
    if owed is None:
        return "complete (the newest row per key of every commit)"
    return (f"BEHIND: misses the commits since {owed.get('since_commit')} (an insert from {owed.get('started')} was "
            f"interrupted or its online write failed); the next insert or `hopsml fs sync {group.name} "
            f"{group.version}` completes it")


def group_show(store: FeatureStore, name: str, version: int | None) -> str:
    group = store.get_feature_group(name, version)
    head = format_fields([("group", group.key), ("description", group.description),
                          ("primary key", ", ".join(group.primary_key)), ("event time", group.event_time),
                          ("online enabled", str(group.online_enabled)), ("table", group.table.uri),
                          *([("online rows", str(store.online().count(group))),
                             ("online side", _online_state(group))] if group.online_enabled else [])])
    features = format_table([{"feature": f.name, "type": frames.type_name(f.type), "description": f.description or None}
                             for f in group.features], ("feature", "type", "description"))
    commits = format_table([{"commit": c.version, "committed": c.committed_on.isoformat()[:23],
                             "inserted": c.inserted, "updated": c.updated,
                             "new columns": ",".join(c.added_columns) or None} for c in group.table.commits()],
                           ("commit", "committed", "inserted", "updated", "new columns"))
    return "\n\n".join([head, features, commits])


def views_list(store: FeatureStore) -> str:
    rows: list[dict[str, Any]] = []
    broken: list[str] = []
    for name, version, v in store.scan_views():
        if isinstance(v, BrokenRecordError):
            rows.append({"name": name, "version": version, "labels": BROKEN})
            broken.append(f"{name} version {version}: {BROKEN}: {v.reason}")
            continue
        rows.append({"name": v.name, "version": v.version, "labels": ", ".join(v.labels) or None,
                     "features": len(v.features), "groups": ", ".join(g.key for g in v.query.groups()),
                     "training datasets": len(store.training_dataset_versions(v))})
    if not rows:
        return f"no feature views in project {store.project!r}"
    return format_table(rows, ("name", "version", "labels", "features", "groups", "training datasets")) + _broken_lines(
        broken)


def view_show(store: FeatureStore, name: str, version: int | None) -> str:
    view = store.get_feature_view(name, version)
    head = format_fields([("view", view.key), ("description", view.description), ("labels", ", ".join(view.labels)),
                          ("features", ", ".join(view.features)),
                          ("transformations", ", ".join(f"{t.name}({', '.join(t.features)})"
                                                        for t in view.transformation_functions)),
                          ("query", view.query.to_string())])
    return "\n\n".join([head, training_datasets(store, name, view.version)])


def training_datasets(store: FeatureStore, name: str, version: int | None) -> str:
    view = store.get_feature_view(name, version)
    rows = []
    for record in view.get_training_datasets():
        split = record["split"]
        shape = (f"{pairs(split['sizes'])} seed {split['seed']}" if split["type"] == "random" else split["type"])
        rows.append({"version": record["version"], "created": record["created"][:19], "split": shape,
                     "rows": pairs(record["rows"]), "commits read": pairs(record["commits"])})
    if not rows:
        return f"feature view {view.key!r} has no training datasets yet"
    return format_table(rows, ("version", "created", "split", "rows", "commits read"), uncut=("commits read",))
