"""Feature vectors at serving time, as hsfs's `get_feature_vector(s)` gives them: for each entry (the serving
keys: the left group's primary key, and the keys each joined group is joined on), each group's newest online row
of that key, in the columns the view's features have (labels and helper columns left out; a key or event time the
query selects is a feature, the key's value the entry's), passed-in features overriding stored ones, transformed
with the statistics fitted on the serving training dataset version. One lookup per group for a whole batch of entries.

A view keeps a `Plan` while it serves: its columns and groups worked out once, each group's offline schema and a
reader of its online table (one statement per lookup, which SQLite keeps prepared; online.py says when a reader
is made again). A vector is built on plain Python values (`shaped`, with the built-in transformations'
`RowStep`s), typed as the pandas frame of the general path would type it, so that path (a pandas return type, a
user transformation function, a time or a mixed column) gives the same answer; the tests compare the two.

`check` compares the online side with the offline one: for sampled keys, the vector built from the online rows
against the vector built from the offline tables as they are now (each group's newest row per key with an event
time at or before now), untransformed and transformed, mismatches counted per feature. The transformed sides are
made apart: the online one with the serving's functions, the offline one rebuilt from the training dataset
version's recorded statistics, so statistics the serving holds that differ from the record (a transformation
skew) show as mismatches.
"""

from __future__ import annotations

import datetime as dt
import math
import random
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from hopsml.errors import FeatureStoreError
from hopsml.featurestore.online import as_stored, store_errors
from hopsml.featurestore.refs import GroupRef, ViewRef

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa

    from hopsml.featurestore.online import OnlineStore, Reader
    from hopsml.featurestore.transformations import RowStep, TransformationFunction

# A group's rows by primary-key value (a tuple in the group's key order), for the keys asked: the online store's,
# or the offline tables' as they were at a time (`offline_rows_of`).
RowsOf = Callable[[GroupRef, Sequence[tuple[Any, ...]]], dict[tuple[Any, ...], dict[str, Any]]]


def serving_keys(view: ViewRef) -> list[str]:
    """The names an entry gives values for: the left group's primary key and every join's left-side keys."""
    names = list(view.query.left.primary_key)
    for join in view.query.joins:
        names += [k for k in join.left_on if k not in names]
    return names


def columns(view: ViewRef) -> list[str]:
    """A vector's columns before transformation, as hsfs's vector server has them: the view's features but its
    labels and helper columns (a primary key or event time the query selects is among them)."""
    hidden = set(view.helper_columns)
    return [c for c in view.features if c not in view.labels and c not in hidden]


def _plans(view: ViewRef) -> list[tuple[GroupRef, list[str], list[str]]]:
    """(group, its key columns, the entry names their values come from) for each group of the query."""
    query = view.query
    plans = [(query.left, list(query.left.primary_key), list(query.left.primary_key))]
    for join in query.joins:
        plans.append((join.query.left, list(join.right_on), list(join.left_on)))
    return plans


def vectors(view: ViewRef, entries: Sequence[Mapping[str, Any]], passed: Sequence[Mapping[str, Any]] | None,
            allow_missing: bool, rows_of: RowsOf | None = None) -> pd.DataFrame:
    """The untransformed vectors of `entries`, one row each, in `columns(view)`. `rows_of(group, keys)` gives a
    group's rows by key (the online store's by default)."""
    import pandas as pd

    plan = Plan(view)
    return pd.DataFrame(plan.fetch(entries, passed, allow_missing, rows_of), columns=plan.wanted)


class Plan:
    """What a view's vectors take, worked out once (a view keeps it while it serves): the columns, each group's
    key and features, and per group its offline schema and a reader of its online table (see `fetch`). `wanted`:
    other columns than the vector's (the view's inference helper columns)."""

    def __init__(self, view: ViewRef, wanted: Sequence[str] | None = None) -> None:
        self.view = view
        self.wanted = list(wanted) if wanted is not None else columns(view)
        self.position = {c: i for i, c in enumerate(self.wanted)}
        sources = view.query.column_sources()
        left = view.query.left
        # the left group's key columns in the vector: the entry names their values, no lookup needed
        self.from_entry = [(self.position[c], f) for c, source, f in sources
                           if source is left and f in left.primary_key and c in self.position]
        given = {f for _, f in self.from_entry}
        self.groups = [_GroupPlan(group, keys, names, [(c, f) for c, source, f in sources
                                                       if source is group and c in self.position
                                                       and not (source is left and f in given)], self.position)
                       for group, keys, names in _plans(view)]
        self._store: OnlineStore | None = None

    def fetch(self, entries: Sequence[Mapping[str, Any]], passed: Sequence[Mapping[str, Any]] | None,
              allow_missing: bool, rows_of: RowsOf | None = None) -> list[list[Any]]:
        """The untransformed vectors of `entries` as lists in `wanted`'s order: what `vectors` puts in its frame."""
        view = self.view
        entries = [{str(k).lower(): v for k, v in entry.items()} for entry in entries]
        passed_rows = [{str(k).lower(): v for k, v in p.items()} if p else _NOTHING for p in passed] if passed \
            else [_NOTHING] * len(entries)
        if len(passed_rows) != len(entries):
            raise FeatureStoreError(f"feature view {view.key!r}: {len(passed_rows)} passed_features for "
                                    f"{len(entries)} entries; give one dict per entry")
        given = any(passed_rows)
        width = len(self.wanted)
        out: list[list[Any]] = [[None] * width for _ in entries]
        for plan in self.groups:
            group = plan.group
            if not plan.columns or not entries or given and all(all(c in p for c in plan.columns)
                                                                  for p in passed_rows):
                continue   # nothing of this group in the vector, or every value of it passed in
            if rows_of is None and not group.online_enabled:
                missing = sorted({c for p in passed_rows for c in plan.columns if c not in p})
                raise FeatureStoreError(f"feature view {view.key!r}: feature group {group.key!r} is not online "
                                        f"enabled, so its features ({', '.join(missing)}) must be given in "
                                        "passed_features (or create the group with online_enabled=True)")
            if not plan.by_primary_key:
                raise FeatureStoreError(f"feature view {view.key!r}: group {group.key!r} is joined on {plan.keys}, "
                                        f"not on its primary key {group.primary_key}, so it cannot be looked up by "
                                        "key online")
            key_of = plan.key
            wanted_keys = [key_of(view, entry) for entry in entries]
            unique = list(dict.fromkeys(wanted_keys)) if len(wanted_keys) > 1 else wanted_keys
            found = self._online(plan, unique) if rows_of is None else \
                {key: [row.get(f) for f in plan.features] for key, row in rows_of(group, unique).items()}
            positions, span = plan.positions, plan.span
            for vector, key in zip(out, wanted_keys):
                row = found.get(key)
                if row is None:
                    if not allow_missing:
                        shown = dict(zip(group.primary_key, key))
                        raise FeatureStoreError(f"feature view {view.key!r}: no online row for {shown} in feature "
                                                f"group {group.key!r}; check the key, insert it, or pass "
                                                "allow_missing=True (its features are then None)")
                elif span is not None:
                    vector[span[0]:span[1]] = row
                else:
                    for at, value in zip(positions, row):
                        vector[at] = value
        for at, name in self.from_entry:
            for vector, entry in zip(out, entries):
                if name in entry:
                    vector[at] = entry[name]
        if given:
            position = self.position
            for vector, values in zip(out, passed_rows):
                for name, value in values.items():
                    where = position.get(name)
                    if where is not None:
                        vector[where] = value
        return out

    def _online(self, plan: _GroupPlan, keys: list[tuple[Any, ...]]) -> dict[tuple[Any, ...], Sequence[Any]]:
        """The group's online rows of `keys`: its features' values by key. The offline schema and the reader are
        kept while they serve; the schema is read again while it lacks one of the features (a column added
        since), the reader made again after a write here or when its statement fails (the table changed)."""
        if self._store is None:
            self._store = self.view.store.online()
        self.view.store.warn_if_online_behind(plan.group)
        schema = plan.schema
        if schema is None or not plan.typed:
            schema = plan.group.table.schema()
            if schema is None:
                return {}
            plan.schema, plan.typed, plan.reader = schema, all(f in schema.names for f in plan.features), None
        reader, kept = plan.reader, True
        if reader is None or not reader.current():
            reader, kept = self._store.reader(plan.group, schema, plan.features), False
            plan.reader = reader if reader.complete else None
        try:
            return reader(keys)
        except store_errors():
            if not kept:
                raise
            plan.reader = None   # made before the table changed behind this process's back: once more, anew
            return self._store.reader(plan.group, schema, plan.features)(keys)


_NOTHING: Mapping[str, Any] = {}   # an entry's passed features when it has none (never written to)


class _GroupPlan:
    """One group of a view's query as its vectors read it: the columns it gives (and where in the vector) and their
    feature names there, the key columns and the entry names their values come from, and what `Plan._online`
    keeps of it."""

    def __init__(self, group: GroupRef, keys: list[str], names: list[str], needed: list[tuple[str, str]],
                 position: Mapping[str, int]) -> None:
        self.group, self.keys, self.names = group, keys, names
        self.columns = [c for c, _ in needed]
        self.features = [f for _, f in needed]
        self.positions = [position[c] for c in self.columns]
        first = self.positions[0] if self.positions else 0
        self.span = (first, first + len(self.positions)) \
            if self.positions == list(range(first, first + len(self.positions))) else None
        self.by_primary_key = set(keys) == set(group.primary_key)
        self._one = (names[0], keys[0]) if len(keys) == 1 and list(group.primary_key) == keys else None
        self.schema: pa.Schema | None = None
        self.typed = False      # the schema has every one of the features
        self.reader: Reader | None = None

    def key(self, view: ViewRef, entry: Mapping[str, Any]) -> tuple[Any, ...]:
        """The group's primary-key values an entry names (by the left-side name of a join key, or the group's own),
        as a store column holds them."""
        if self._one is not None:
            name, key = self._one
            if name in entry:
                value = entry[name]
            elif key in entry:
                value = entry[key]
            else:
                raise FeatureStoreError(f"feature view {view.key!r}: the entry {dict(entry)} has no {name!r}; its "
                                        f"serving keys are {serving_keys(view)}")
            return (value if type(value) in _AS_IS else as_stored(value),)
        values = {}
        for key, name in zip(self.keys, self.names):
            if name in entry:
                values[key] = entry[name]
            elif key in entry:
                values[key] = entry[key]
            else:
                raise FeatureStoreError(f"feature view {view.key!r}: the entry {dict(entry)} has no {name!r}; its "
                                        f"serving keys are {serving_keys(view)}")
        return tuple(v if type(v) in _AS_IS else as_stored(v) for v in (values[k] for k in self.group.primary_key))


_AS_IS = (int, str)   # key values as_stored gives back unchanged


def shaped(wanted: Sequence[str], rows: list[list[Any]], steps: Sequence[Any] | None, return_type: str,
           single: bool, logged: bool) -> tuple[Any, list[list[Any]] | None] | None:
    """What `get_feature_vector(s)` answers for `rows` (of `Plan.fetch`) after the transformation `steps`
    (`transformations.row_steps`), computed on plain values, with (when `logged`) the vectors as a serving's
    inference log keeps them: the values and types the pandas frame gives, without building one. None where only
    the pandas path knows the answer: a return type other than 'list' or 'numpy', a value it alone types (times,
    dates, numpy scalars, mixed columns), a user transformation function (`steps` None)."""
    kind = return_type.lower()
    if steps is None or not rows or kind not in ("list", "numpy"):
        return None
    columns: dict[str, list[Any]] = {}
    kinds: dict[str, str] = {}
    if len(rows) == 1:
        for name, value in zip(wanted, rows[0]):
            typed_as = _KIND.get(type(value))
            if typed_as is None or typed_as == "int" and not _INT64[0] <= value < _INT64[1]:
                return None
            columns[name], kinds[name] = [None if typed_as == "float" and value != value else value], typed_as
    else:
        for name, values in zip(wanted, zip(*rows)):
            typed = _typed(values)
            if typed is None:
                return None
            columns[name], kinds[name] = typed
    for step in steps:
        feature = step.function.features[0]
        if feature not in columns:
            return None
        outputs = step.run(columns[feature], kinds[feature])
        if outputs is None:
            return None
        for dropped in step.function.drop:
            columns.pop(dropped, None)
            kinds.pop(dropped, None)
        for name, (values, typed_as) in zip(step.names, outputs):
            columns[name], kinds[name] = values, typed_as
    if not columns:
        return None
    out = [[column[0] for column in columns.values()]] if len(rows) == 1 else \
        [list(row) for row in zip(*columns.values())]
    kept = None
    if logged:   # a copy: what the caller does with its answer is not what the model got
        bools = [i for i, k in enumerate(kinds.values()) if k == "bool"]
        kept = [list(row) for row in out]
        for row in kept:
            for i in bools:
                row[i] = int(row[i])
    if kind == "list":
        return (out[0] if single else out), kept
    import numpy as np

    found = set(kinds.values())
    if not found <= {"int", "int32", "float", "bool"}:
        return None
    # one numeric dtype for the whole vector: a one-hot's booleans become 0/1 beside numbers (never an object array)
    array = np.array(out, dtype=np.float64 if "float" in found else np.int32 if found == {"int32"} else np.int64)
    return (array[0] if single else array), kept


_KIND = {float: "float", int: "int", bool: "bool", str: "str", type(None): "none"}
_INT64 = (-2**63, 2**63)


def _typed(column: Sequence[Any]) -> tuple[list[Any], str] | None:
    """A column's values and kind as pandas types a frame's column built from them (see transformations.RowStep):
    integers with a missing value or a float become floats, NaN is missing; None where pandas alone would know."""
    values = list(column)
    types = set(map(type, values))
    if len(types) == 1:
        only = types.pop()
        if only is float:
            total = sum(values)
            if total != total:   # a NaN among them (or infinities of both signs)
                values = [None if v != v else v for v in values]
            return values, "float"
        if only is int:
            return (values, "int") if _INT64[0] <= min(values) and max(values) < _INT64[1] else None
        typed_as = _KIND.get(only)
        return None if typed_as is None else (values, typed_as)
    missing = type(None) in types
    types.discard(type(None))
    if types <= {int, float}:
        if int in types and not all(_INT64[0] <= v < _INT64[1] for v in values if type(v) is int):
            return None
        return [None if v is None or v != v else float(v) for v in values], "float"
    if types == {bool}:
        return values, "object" if missing else "bool"
    if types == {str}:
        return values, "str"
    return None


def _online(view: ViewRef) -> RowsOf:
    store = view.store.online()

    def rows_of(group: GroupRef, keys: Sequence[tuple[Any, ...]]) -> dict[tuple[Any, ...], dict[str, Any]]:
        schema = group.table.schema()
        if schema is None:
            return {}
        return store.read(group, keys, schema)

    return rows_of


def offline_rows_of(now: dt.datetime) -> RowsOf:
    """rows_of for `vectors` from the offline tables: each key's newest row with an event time at or before
    `now` (the point-in-time row a label at `now` would get)."""
    def rows_of(group: GroupRef, keys: Sequence[tuple[Any, ...]]) -> dict[tuple[Any, ...], dict[str, Any]]:
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


def check(view: ViewRef, sample: int = 100, seed: int | None = None, now: dt.datetime | None = None,
          training_dataset_version: int | None = None) -> dict[str, Any]:
    """Online against offline for up to `sample` entries drawn from the left group's keys: per feature, how many
    vectors differ, untransformed and transformed, with examples. The two transformed sides are made apart, so a
    transformation skew shows: the online one as the serving transforms (the view's serving functions, on
    pandas), the offline one rebuilt from the statistics recorded with `training_dataset_version` (the newest
    when None), read from its record now, on plain values (`transformations.row_steps`; pandas for a
    user function)."""
    import pandas as pd

    from hopsml.featurestore.transformations import TransformationFunction, apply_all, row_steps

    now = now or dt.datetime.now(dt.timezone.utc)
    left = view.query.left
    names = serving_keys(view)
    keyed = left.table.read(columns=list(dict.fromkeys([*names, *left.primary_key])))
    entries = [dict(row) for row in {tuple(sorted(r.items())): r for r in keyed.to_pylist()}.values()]
    entries.sort(key=repr)
    chosen = random.Random(seed).sample(entries, min(sample, len(entries)))
    from_offline = offline_rows_of(now)
    from_online = _online(view)

    def online_rows_of(group: GroupRef, keys: Sequence[tuple[Any, ...]]) -> dict[tuple[Any, ...], dict[str, Any]]:
        return (from_online if group.online_enabled else from_offline)(group, keys)   # offline-only: the same

    plan = Plan(view)
    report: dict[str, Any] = {"view": view.key, "checked": len(chosen), "at": now.isoformat(), "features": {},
                              "transformed": {}, "examples": []}
    if not chosen:
        return {**report, "mismatches": 0}
    online_rows = plan.fetch(chosen, None, True, online_rows_of)
    offline_rows = plan.fetch(chosen, None, True, from_offline)
    online, offline = (pd.DataFrame(rows, columns=plan.wanted) for rows in (online_rows, offline_rows))
    pairs = [("features", online, offline)]
    serving = view.serving_functions()
    if serving or view._transformations:
        version = training_dataset_version
        if version is None:   # not the serving's own: the reference must not come from the side it checks
            versions = view.store.training_dataset_versions(view)
            version = versions[-1] if versions else None
        if version is None:
            raise FeatureStoreError(f"feature view {view.key!r} has no training dataset: its transformed vectors "
                                    "have no statistics to be checked against")
        report["training_dataset_version"] = int(version)
        record = view.store.read_training_dataset(view, int(version))
        recorded = [TransformationFunction.from_dict(f) for f in record.get("transformation_functions", [])]
        pairs.append(("transformed", apply_all(online.copy(), serving), _rebuilt(plan.wanted, offline_rows,
                                                                                   offline, recorded, row_steps)))
    for kind, got, want in pairs:
        for column in dict.fromkeys([*want.columns, *got.columns]):
            if column not in want.columns or column not in got.columns:
                report[kind][column] = len(chosen)   # a column one side has and the other lacks: all differ
                continue
            differs = [i for i in range(len(want)) if not _same(got[column].iloc[i], want[column].iloc[i])]
            report[kind][column] = len(differs)
            for i in differs[:3]:
                report["examples"].append({"entry": _plain(chosen[i]), "feature": column,
                                           "online": _plain(got[column].iloc[i]),
                                           "offline": _plain(want[column].iloc[i]),
                                           **({"transformed": True} if kind == "transformed" else {})})
    report["mismatches"] = sum(report["features"].values()) + sum(report["transformed"].values())
    return report


def _rebuilt(wanted: Sequence[str], rows: list[list[Any]], frame: pd.DataFrame,
             functions: Sequence[TransformationFunction],
             row_steps: Callable[[Sequence[TransformationFunction]], list[RowStep] | None]) -> pd.DataFrame:
    """The offline vectors transformed with `functions` (a training dataset's recorded ones) on plain values, as
    the steps compute them from the statistics; on pandas where only pandas can (a user function, a time)."""
    import pandas as pd

    from hopsml.featurestore.transformations import apply_all

    steps = row_steps(functions)
    made = shaped(wanted, rows, steps, "list", single=False, logged=False) if steps is not None else None
    if made is None or steps is None:
        return apply_all(frame.copy(), functions)
    names: dict[str, None] = dict.fromkeys(wanted)
    for step in steps:
        for dropped in step.function.drop:
            names.pop(dropped, None)
        for name in step.names:
            names[name] = None
    return pd.DataFrame(made[0], columns=list(names))


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


def _missing(value: object) -> bool:
    import pandas as pd

    try:
        return value is None or bool(pd.isna(value))
    except (TypeError, ValueError):
        return False


def _plain(value: object) -> object:
    if hasattr(value, "isoformat"):
        return value.isoformat()
    if hasattr(value, "item"):
        return value.item()
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value
