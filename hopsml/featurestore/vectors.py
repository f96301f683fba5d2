"""Feature vectors at serving time, as hsfs's `get_feature_vector(s)` gives them: for each entry (the serving
keys: the left group's primary key, and the keys each joined group is joined on), each group's newest online row
of that key, in the columns the view's training data has (labels, and the left group's key and event time, left
out), passed-in features overriding stored ones, transformed with the statistics fitted on the serving training
dataset version. One lookup per group for a whole batch of entries.

`check` compares the online side with the offline one: for sampled keys, the vector built from the online rows
against the vector built from the offline tables as they are now (each group's newest row per key with an event
time at or before now), untransformed and transformed, mismatches counted per feature.
"""

from __future__ import annotations

import datetime as dt
import math
import random
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from hopsml.errors import FeatureStoreError

if TYPE_CHECKING:
    import pandas as pd


def serving_keys(view: Any) -> list[str]:
    """The names an entry gives values for: the left group's primary key and every join's left-side keys."""
    names = list(view.query.left.primary_key)
    for join in view.query.joins:
        names += [k for k in join.left_on if k not in names]
    return names


def columns(view: Any) -> list[str]:
    """A vector's columns before transformation: what the view's training features are."""
    left = view.query.left
    hidden = {*left.primary_key, *([left.event_time] if left.event_time else [])}
    return [c for c in view.features if c not in view.labels and c not in hidden]


def _plans(view: Any) -> list[tuple[Any, list[str], list[str]]]:
    """(group, its key columns, the entry names their values come from) for each group of the query."""
    query = view.query
    plans = [(query.left, list(query.left.primary_key), list(query.left.primary_key))]
    for join in query.joins:
        plans.append((join.query.left, list(join.right_on), list(join.left_on)))
    return plans


def vectors(view: Any, entries: Sequence[Mapping[str, Any]], passed: Sequence[Mapping[str, Any]] | None,
            allow_missing: bool, rows_of: Any = None) -> pd.DataFrame:
    """The untransformed vectors of `entries`, one row each, in `columns(view)`. `rows_of(group, keys)` gives a
    group's rows by key (the online store's by default)."""
    import pandas as pd

    wanted = columns(view)
    entries = [{str(k).lower(): v for k, v in entry.items()} for entry in entries]
    passed_rows = [{str(k).lower(): v for k, v in (p or {}).items()} for p in (passed or [{}] * len(entries))]
    if len(passed_rows) != len(entries):
        raise FeatureStoreError(f"feature view {view.key!r}: {len(passed_rows)} passed_features for {len(entries)} "
                                "entries; give one dict per entry")
    sources = view.query.column_sources()
    out: list[dict[str, Any]] = [{} for _ in entries]
    for group, keys, names in _plans(view):
        needed = [(column, feature) for column, source, feature in sources if source is group and column in wanted]
        if not needed or all(all(c in p for c, _ in needed) for p in passed_rows):
            continue   # nothing of this group in the vector, or every value of it passed in
        if rows_of is None and not group.online_enabled:
            missing = sorted({c for p in passed_rows for c, _ in needed if c not in p})
            raise FeatureStoreError(f"feature view {view.key!r}: feature group {group.key!r} is not online enabled, "
                                    f"so its features ({', '.join(missing)}) must be given in passed_features (or "
                                    "create the group with online_enabled=True)")
        if set(keys) != set(group.primary_key):
            raise FeatureStoreError(f"feature view {view.key!r}: group {group.key!r} is joined on {keys}, not on its "
                                    f"primary key {group.primary_key}, so it cannot be looked up by key online")
        wanted_keys = [_key(view, entry, keys, names, group) for entry in entries]
        found = (rows_of or _online(view))(group, sorted(set(wanted_keys), key=repr))
        for index, key in enumerate(wanted_keys):
            row = found.get(key)
            if row is None and not allow_missing:
                shown = dict(zip(group.primary_key, key))
                raise FeatureStoreError(f"feature view {view.key!r}: no online row for {shown} in feature group "
                                        f"{group.key!r}; check the key, insert it, or pass allow_missing=True "
                                        "(its features are then None)")
            for column, feature in needed:
                out[index][column] = None if row is None else row.get(feature)
    for index, given in enumerate(passed_rows):
        out[index].update({k: v for k, v in given.items() if k in wanted})
    return pd.DataFrame(out, columns=wanted)


def _key(view: Any, entry: Mapping[str, Any], keys: Sequence[str], names: Sequence[str], group: Any
         ) -> tuple[Any, ...]:
    """The group's primary-key values an entry names (by the left-side name of a join key, or the group's own)."""
    values = {}
    for key, name in zip(keys, names):
        if name in entry:
            values[key] = entry[name]
        elif key in entry:
            values[key] = entry[key]
        else:
            raise FeatureStoreError(f"feature view {view.key!r}: the entry {dict(entry)} has no {name!r}; its "
                                    f"serving keys are {serving_keys(view)}")
    from hopsml.featurestore.online import as_stored

    return tuple(as_stored(values[k]) for k in group.primary_key)


def _online(view: Any) -> Any:
    store = view.store.online()

    def rows_of(group: Any, keys: Sequence[tuple[Any, ...]]) -> dict[tuple[Any, ...], dict[str, Any]]:
        schema = group.table.schema()
        if schema is None:
            return {}
        return store.read(group, keys, schema)

    return rows_of


def offline_rows_of(now: dt.datetime) -> Any:
    """rows_of for `vectors` from the offline tables: each key's newest row with an event time at or before
    `now` (the point-in-time row a label at `now` would get)."""
    def rows_of(group: Any, keys: Sequence[tuple[Any, ...]]) -> dict[tuple[Any, ...], dict[str, Any]]:
        import pyarrow as pa
        import pyarrow.compute as pc

        from hopsml.featurestore.online import as_stored, newest_per_key

        table = group.table.read()
        if group.event_time:
            table = table.filter(pc.less_equal(table.column(group.event_time), pa.scalar(now, table.schema.field(
                group.event_time).type)))
        newest = newest_per_key(table, group.primary_key, group.event_time)
        wanted = set(keys)
        out = {}
        for row in newest.to_pylist():
            key = tuple(as_stored(row[k]) for k in group.primary_key)
            if key in wanted:
                out[key] = row
        return out

    return rows_of


def check(view: Any, sample: int = 100, seed: int | None = None, now: dt.datetime | None = None) -> dict[str, Any]:
    """Online against offline for up to `sample` entries drawn from the left group's keys: per feature, how many
    vectors differ (untransformed, and transformed with the serving version's statistics), with examples."""
    now = now or dt.datetime.now(dt.timezone.utc)
    left = view.query.left
    names = serving_keys(view)
    keyed = left.table.read(columns=list(dict.fromkeys([*names, *left.primary_key])))
    entries = [dict(row) for row in {tuple(sorted(r.items())): r for r in keyed.to_pylist()}.values()]
    entries.sort(key=repr)
    chosen = random.Random(seed).sample(entries, min(sample, len(entries)))
    from_offline = offline_rows_of(now)
    from_online = _online(view)

    def online_rows_of(group: Any, keys: Sequence[tuple[Any, ...]]) -> dict[tuple[Any, ...], dict[str, Any]]:
        return (from_online if group.online_enabled else from_offline)(group, keys)   # offline-only: the same

    online = vectors(view, chosen, None, allow_missing=True, rows_of=online_rows_of) if chosen else None
    offline = vectors(view, chosen, None, allow_missing=True, rows_of=from_offline) if chosen else None
    report: dict[str, Any] = {"view": view.key, "checked": len(chosen), "at": now.isoformat(), "features": {},
                              "transformed": {}, "examples": []}
    if online is None or offline is None:
        return {**report, "mismatches": 0}
    functions = view.serving_functions()
    pairs = [("features", online, offline)]
    if functions:
        from hopsml.featurestore.transformations import apply_all

        pairs.append(("transformed", apply_all(online.copy(), functions), apply_all(offline.copy(), functions)))
    for kind, got, want in pairs:
        for column in want.columns:
            differs = [i for i in range(len(want)) if not _same(got[column].iloc[i], want[column].iloc[i])]
            report[kind][column] = len(differs)
            for i in differs[:3]:
                if kind == "features":
                    report["examples"].append({"entry": _plain(chosen[i]), "feature": column,
                                               "online": _plain(got[column].iloc[i]),
                                               "offline": _plain(want[column].iloc[i])})
    report["mismatches"] = sum(report["features"].values()) + sum(report["transformed"].values())
    return report


def _same(a: Any, b: Any) -> bool:
    import pandas as pd

    if _missing(a) or _missing(b):
        return _missing(a) and _missing(b)
    if isinstance(a, float) or isinstance(b, float):
        try:
            return math.isclose(float(a), float(b), rel_tol=1e-9, abs_tol=1e-12)
        except (TypeError, ValueError):
            return False
    if isinstance(a, (pd.Timestamp, dt.datetime)) or isinstance(b, (pd.Timestamp, dt.datetime)):
        return bool(pd.Timestamp(a) == pd.Timestamp(b))
    return bool(a == b)


def _missing(value: Any) -> bool:
    import pandas as pd

    try:
        return value is None or bool(pd.isna(value))
    except (TypeError, ValueError):
        return False


def _plain(value: Any) -> Any:
    if hasattr(value, "isoformat"):
        return value.isoformat()
    if hasattr(value, "item"):
        return value.item()
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value
