"""A query over feature groups, as the hopsworks SDK builds one: `fg.select([...])`, `.join(other, on=...)`,
`.filter(fg.amount > 10)`, `.as_of(wallclock)`; run by an engine (`engine.py`) into a DataFrame.

The join is point-in-time correct where both sides have an event time: each row of the left (label) side
gets the right side's row of the same key with the newest event time at or before its own, never a later
one, and nulls when there is none. `as_of` reads every group as it was at that commit, so rows committed
later are left out even when their event times are old (a backfill cannot leak into a training set built
before it).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from hopsml.errors import FeatureStoreError

_OPS = {"==": "=", "!=": "<>", "<": "<", "<=": "<=", ">": ">", ">=": ">="}


@dataclass(frozen=True)
class Feature:
    """A feature of a group: its name and type, and the comparisons that make filters (`fg.amount > 10`)."""

    name: str
    type: str = ""
    description: str = ""
    primary: bool = False
    event_time: bool = False
    group: str = ""  # the group's name_version, so a filter knows whose column it reads

    def _filter(self, op: str, value: Any) -> Filter:
        return Filter(self, op, value)

    def __eq__(self, other: Any) -> Any:
        return self._filter("==", other)

    def __ne__(self, other: Any) -> Any:
        return self._filter("!=", other)

    def __lt__(self, other: Any) -> Filter:
        return self._filter("<", other)

    def __le__(self, other: Any) -> Filter:
        return self._filter("<=", other)

    def __gt__(self, other: Any) -> Filter:
        return self._filter(">", other)

    def __ge__(self, other: Any) -> Filter:
        return self._filter(">=", other)

    def isin(self, values: Sequence[Any]) -> Filter:
        return Filter(self, "in", list(values))

    def like(self, pattern: str) -> Filter:
        return Filter(self, "like", pattern)

    def __hash__(self) -> int:
        return hash((self.group, self.name))


@dataclass(frozen=True)
class Filter:
    """`feature op value`; `&` and `|` combine filters."""

    feature: Feature
    op: str
    value: Any

    def __and__(self, other: Filter | Logic) -> Logic:
        return Logic("AND", self, other)

    def __or__(self, other: Filter | Logic) -> Logic:
        return Logic("OR", self, other)

    def sql(self, column: str, timestamp: str = "TIMESTAMPTZ") -> str:
        """The condition in SQL on `column` (quoted by the caller); `timestamp` is the dialect's keyword for a
        time-zone-aware literal (DuckDB's TIMESTAMPTZ, Spark's TIMESTAMP)."""
        if self.op == "in":
            return f"{column} IN ({', '.join(_literal(v, timestamp) for v in self.value)})"
        if self.op == "like":
            return f"{column} LIKE {_literal(self.value, timestamp)}"
        if self.value is None and self.op in ("==", "!="):
            return f"{column} IS {'NOT ' if self.op == '!=' else ''}NULL"
        return f"{column} {_OPS[self.op]} {_literal(self.value, timestamp)}"

    def features(self) -> list[Feature]:
        return [self.feature]


@dataclass(frozen=True)
class Logic:
    op: str
    left: Filter | Logic
    right: Filter | Logic

    def __and__(self, other: Filter | Logic) -> Logic:
        return Logic("AND", self, other)

    def __or__(self, other: Filter | Logic) -> Logic:
        return Logic("OR", self, other)

    def features(self) -> list[Feature]:
        return [*self.left.features(), *self.right.features()]


def _literal(value: Any, timestamp: str) -> str:
    import datetime as dt

    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, dt.datetime):
        stamp = value if value.tzinfo else value.replace(tzinfo=dt.timezone.utc)
        return f"{timestamp} '{stamp.astimezone(dt.timezone.utc).strftime('%Y-%m-%d %H:%M:%S.%f')}+00:00'"
    if isinstance(value, dt.date):
        return f"DATE '{value.isoformat()}'"
    return "'" + str(value).replace("'", "''") + "'"


@dataclass(frozen=True)
class Join:
    query: Query
    left_on: tuple[str, ...]
    right_on: tuple[str, ...]
    join_type: str
    prefix: str


@dataclass(frozen=True)
class Query:
    """Features of one group (`left`), joined with other queries, filtered, read as of a commit."""

    left: Any  # the FeatureGroup whose rows the query starts from
    features: tuple[str, ...]
    joins: tuple[Join, ...] = ()
    filters: tuple[Filter | Logic, ...] = ()
    wallclock: Any = None  # read every group as of this wall-clock time (None: the newest commit)
    exclude_until: Any = None
    pinned: tuple[tuple[str, int], ...] = ()  # (group key, table version): what a training dataset version read

    def join(self, sub_query: Query, on: Sequence[str] | None = None, left_on: Sequence[str] | None = None,
             right_on: Sequence[str] | None = None, join_type: str = "left", prefix: str | None = None) -> Query:
        """Join `sub_query` on `on` (or `left_on`/`right_on`; by default the columns of the right group's primary
        key that the left group has, as Hopsworks joins on the largest matching part of the primary key), point
        in time where both sides have an event time."""
        if not isinstance(sub_query, Query):
            raise FeatureStoreError("join() takes a query: fg.select([...]) or fg.select_all()")
        if sub_query.joins:
            raise FeatureStoreError("a joined query cannot have joins of its own: join every group to the left "
                                    "query (a.select_all().join(b.select_all()).join(c.select_all()))")
        if join_type not in ("left", "inner"):
            raise FeatureStoreError(f"join_type {join_type!r}: hopsml joins 'left' (the default) or 'inner'")
        if on is not None:
            left_keys = right_keys = [k.lower() for k in on]
        elif left_on is not None or right_on is not None:
            if left_on is None or right_on is None or len(left_on) != len(right_on):
                raise FeatureStoreError("give left_on and right_on together, with as many columns each")
            left_keys, right_keys = [k.lower() for k in left_on], [k.lower() for k in right_on]
        else:   # as Hopsworks: the largest part of the right group's primary key that the left group has
            own = self.left.feature_names()
            right_keys = [k for k in sub_query.left.primary_key if k in own] or list(sub_query.left.primary_key)
            left_keys = right_keys
        own = self.left.feature_names()
        for key in left_keys:
            if key not in own:
                raise FeatureStoreError(f"cannot join {sub_query.left.name!r} on {key!r}: the left group "
                                        f"{self.left.name!r} has no such feature (it has {', '.join(own)}); give "
                                        "left_on/right_on")
        for key in right_keys:
            if key not in sub_query.left.feature_names():
                raise FeatureStoreError(f"cannot join on {key!r}: group {sub_query.left.name!r} has no such feature")
        joined = Join(sub_query, tuple(left_keys), tuple(right_keys), join_type, prefix or "")
        return replace(self, joins=(*self.joins, joined))

    def filter(self, condition: Filter | Logic) -> Query:
        if not isinstance(condition, (Filter, Logic)):
            raise FeatureStoreError("filter() takes a condition such as fg.amount > 10 or fg['kind'] == 'a'")
        return replace(self, filters=(*self.filters, condition))

    def as_of(self, wallclock_time: Any = None, exclude_until: Any = None) -> Query:
        """Read every group as it was at `wallclock_time` (a datetime, epoch ms or '2024-05-01 12:00')."""
        return replace(self, wallclock=wallclock_time, exclude_until=exclude_until)

    def pin(self, versions: dict[str, int]) -> Query:
        """This query reading each group at the given table version (a training dataset version's commits)."""
        return replace(self, pinned=tuple(sorted(versions.items())), wallclock=None)

    def groups(self) -> list[Any]:
        out = [self.left]
        for join in self.joins:
            out.extend(join.query.groups())
        return out

    def output_columns(self) -> list[str]:
        """The columns the query returns, in order (a joined feature with a name already taken gets the
        join's prefix, as Hopsworks does, else the right group's name and an underscore)."""
        return [name for name, _, _ in self.column_sources()]

    def column_sources(self) -> list[tuple[str, Any, str]]:
        """(output column, the group it comes from, its feature name there), in output order."""
        out = [(name, self.left, name) for name in self.features]
        names = list(self.features)
        for join in self.joins:
            for name in join.query.features:
                if not repeats_left_key(join, name, self.features):
                    names.append(_joined_name(name, names, join))
                    out.append((names[-1], join.query.left, name))
        return out

    def read(self, online: bool = False, dataframe_type: str = "default", read_options: dict[str, Any] | None = None
             ) -> Any:
        """The query's rows: a pandas DataFrame (or Spark's with read_options={'engine': 'spark'} or
        dataframe_type='spark')."""
        if online:   # the online store's rows of one group (online.py)
            from hopsml.featurestore.online import read_query

            return read_query(self, dataframe_type)
        return self.left.store.run_query(self, dataframe_type=dataframe_type, read_options=read_options)

    def show(self, n: int = 20, online: bool = False) -> Any:
        return self.read(online=online).head(n)

    def to_string(self) -> str:
        """The query as the embedded engine runs it (SQL)."""
        return str(self.left.store.query_sql(self))

    def __str__(self) -> str:
        return self.to_string()


def repeats_left_key(join: Join, name: str, left_features: Sequence[str]) -> bool:
    """Whether the joined group's feature `name` is a join key that the left side selects under the same name:
    equal on every matched row, it is returned once (the left's). A joined key the left does not select is
    returned (the right's value, null where the join found no row), as Hopsworks returns it."""
    return any(rk == name and lk == name for lk, rk in zip(join.left_on, join.right_on)) and name in left_features


def _joined_name(name: str, taken: list[str], join: Join) -> str:
    if join.prefix:
        return join.prefix + name
    if name not in taken:
        return name
    return f"{join.query.left.name}_{name}"


# --- a query as a view's definition stores it ---------------------------------------------------------------
def to_dict(query: Query) -> dict[str, Any]:
    def condition(c: Filter | Logic) -> dict[str, Any]:
        if isinstance(c, Filter):
            return {"group": c.feature.group, "feature": c.feature.name, "op": c.op, "value": _stored(c.value)}
        return {"logic": c.op, "left": condition(c.left), "right": condition(c.right)}

    return {"group": query.left.key, "features": list(query.features),
            "joins": [{"query": to_dict(j.query), "left_on": list(j.left_on), "right_on": list(j.right_on),
                       "join_type": j.join_type, "prefix": j.prefix} for j in query.joins],
            "filters": [condition(c) for c in query.filters]}


def from_dict(record: dict[str, Any], group_of: Any) -> Query:
    """The stored query, its groups found by `group_of(name_version)`."""
    def condition(c: dict[str, Any]) -> Filter | Logic:
        if "logic" in c:
            return Logic(c["logic"], condition(c["left"]), condition(c["right"]))
        return Filter(Feature(c["feature"], group=c["group"]), c["op"], _loaded(c["value"]))

    left = group_of(record["group"])
    joins = tuple(Join(from_dict(j["query"], group_of), tuple(j["left_on"]), tuple(j["right_on"]), j["join_type"],
                       j["prefix"]) for j in record.get("joins", []))
    return Query(left, tuple(record["features"]), joins, tuple(condition(c) for c in record.get("filters", [])))


def _stored(value: Any) -> Any:
    import datetime as dt

    if isinstance(value, dt.datetime):
        return {"datetime": value.isoformat()}
    if isinstance(value, dt.date):
        return {"date": value.isoformat()}
    if isinstance(value, (list, tuple)):
        return [_stored(v) for v in value]
    return value


def _loaded(value: Any) -> Any:
    import datetime as dt

    if isinstance(value, dict) and "datetime" in value:
        return dt.datetime.fromisoformat(value["datetime"])
    if isinstance(value, dict) and "date" in value:
        return dt.date.fromisoformat(value["date"])
    if isinstance(value, list):
        return [_loaded(v) for v in value]
    return value
