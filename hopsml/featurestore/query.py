"""A query over feature groups, as the hopsworks SDK builds one: `fg.select([...])`, `.join(other, on=...)`,
`.filter(fg.amount > 10)`, `.as_of(wallclock)`; run by an engine (`engine.py`) into a DataFrame.

The join is point-in-time correct where both sides have an event time: each row of the left (label) side
gets the right side's row of the same key with the newest event time at or before its own, never a later
one, and nulls when there is none. `as_of` reads every group as it was at that commit, so rows committed
later are left out even when their event times are old (a backfill cannot leak into a training set built
before it).

A filter's value never becomes SQL text: DuckDB gets it as a bound parameter, Spark as a literal Column
(`engine.py`). Both engines answer as `Filter.holds` says, which is Python's own comparison:

- `==`, `!=`, `<`, `<=`, `>`, `>=` compare as Python compares the two values (strings by code point, which is
  what both engines do with UTF-8 bytes); a row whose value is null (missing) matches none of them.
- NaN is IEEE's: it equals nothing, not even NaN, and is neither less nor greater than anything, so `!= nan`
  holds for every row with a value and the others for none (SQL engines order NaN above every number and let
  it equal itself; the engines are told otherwise). inf and -inf are ordinary numbers.
- `== None` is "is null", `!= None` "is not null"; `<`, `<=`, `>`, `>=` with None are refused.
- `isin(values)`: equal to one of them (NaN to none); a None among them matches the null rows.
- `like(pattern)`: `%` any run of characters (newlines too), `_` one character, every other character
  itself (there is no escape character); case-sensitive.
- A value must fit its column: a number for a numeric column, a string for a string column; a string given
  for a timestamp or date column is read as an ISO time (`'2024-05-01 12:00'`), naive times are UTC.
  A value that does not fit, or an integer beyond 64 bits, is refused with the column's name.
"""

from __future__ import annotations

import datetime as dt
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from hopsml.errors import FeatureStoreError
from hopsml.featurestore.hsfs_members import QueryMembers

COMPARISONS = ("==", "!=", "<", "<=", ">", ">=")
OPS = (*COMPARISONS, "in", "like")
_INT64 = (-(2 ** 63), 2 ** 63 - 1)


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
        """A filter: the feature's value is one of `values` (a list; a lone string is refused, not split)."""
        if isinstance(values, (str, bytes)) or not hasattr(values, "__iter__"):
            raise FeatureStoreError(f"filter on {self.name!r}: isin() takes a list of values, not {values!r}")
        return Filter(self, "in", list(values))

    def like(self, pattern: str) -> Filter:
        """A filter: the feature's text matches the SQL LIKE `pattern` (`%` any run of characters, `_` one)."""
        return Filter(self, "like", pattern)

    def __hash__(self) -> int:
        return hash((self.group, self.name))


@dataclass(frozen=True)
class Filter:
    """`feature op value`; `&` and `|` combine filters. The value is checked and made a plain Python value
    (numpy and pandas scalars too) when the filter is made (see the module docstring for what each op means)."""

    feature: Feature
    op: str
    value: Any

    def __post_init__(self) -> None:
        name = self.feature.name
        if self.op not in OPS:
            raise FeatureStoreError(f"filter on {name!r}: operator {self.op!r} is not one of {', '.join(OPS)}")
        if self.op == "in":
            if isinstance(self.value, (str, bytes)) or not isinstance(self.value, (list, tuple)):
                raise FeatureStoreError(f"filter on {name!r}: isin() takes a list of values, not {self.value!r}")
            object.__setattr__(self, "value", [plain_value(v, name) for v in self.value])
            return
        value = plain_value(self.value, name)
        if self.op == "like" and not isinstance(value, str):
            raise FeatureStoreError(f"filter on {name!r}: like() takes a string pattern, not {self.value!r}")
        if value is None and self.op not in ("==", "!="):
            raise FeatureStoreError(f"filter on {name!r}: {self.op} None compares with a missing value, which has no "
                                    "order; use == None (is null) or != None (is not null)")
        object.__setattr__(self, "value", value)

    def __and__(self, other: Filter | Logic) -> Logic:
        return Logic("AND", self, other)

    def __or__(self, other: Filter | Logic) -> Logic:
        return Logic("OR", self, other)

    def features(self) -> list[Feature]:
        return [self.feature]

    def holds(self, row: dict[str, Any]) -> bool:
        """Whether the filter holds for `row` (feature name -> value): Python's own answer, which both engines
        give (the module docstring)."""
        return _holds(self.op, row.get(self.feature.name), self.value)


def _holds(op: str, have: Any, value: Any) -> bool:
    if op == "in":
        return any(_holds("==", have, v) for v in value)
    if value is None:   # == None / != None
        return (have is None) == (op == "==")
    if have is None:
        return False
    if op == "like":
        return like_regex(value).fullmatch(have) is not None
    if isinstance(have, dt.datetime) and isinstance(value, dt.date):   # a date against a time: its midnight, UTC
        have = _utc(have)
        value = _utc(value if isinstance(value, dt.datetime) else dt.datetime(value.year, value.month, value.day))
    result: bool = {"==": have == value, "!=": have != value, "<": have < value, "<=": have <= value,
                    ">": have > value, ">=": have >= value}[op]
    return result


def like_regex(pattern: str) -> re.Pattern[str]:
    """A LIKE pattern as a Python regex: `%` any run, `_` one character, everything else itself.

    >>> like_regex("a%_c").fullmatch("ab\\nxc") is not None, like_regex("a.c").fullmatch("abc") is None
    (True, True)
    """
    return re.compile("".join(".*" if c == "%" else "." if c == "_" else re.escape(c) for c in pattern), re.DOTALL)


def plain_value(value: Any, feature: str) -> Any:
    """A filter value as the plain Python value both engines bind: None, bool, int (64 bits), float (NaN and
    inf too), Decimal, str, datetime (UTC) or date; numpy and pandas scalars made so; anything else refused."""
    import decimal

    if value is None or isinstance(value, (bool, str, decimal.Decimal)):
        return value
    if type(value).__module__.split(".")[0] in ("numpy", "pandas"):
        if value != value and not isinstance(value, float) and type(value).__name__ in ("NaTType", "NAType"):
            return None   # pandas' missing values
        if hasattr(value, "to_pydatetime"):
            return plain_value(value.to_pydatetime(), feature)
        if hasattr(value, "item"):
            return plain_value(value.item(), feature)
    if isinstance(value, int):
        if not _INT64[0] <= value <= _INT64[1]:
            raise FeatureStoreError(f"filter on {feature!r}: {value} is beyond the 64-bit integers the engines compare")
        return value
    if isinstance(value, float):
        return value
    if isinstance(value, dt.datetime):
        return _utc(value)
    if isinstance(value, dt.date):
        return value
    raise FeatureStoreError(f"filter on {feature!r}: a {type(value).__name__} value ({value!r}) cannot be compared; "
                            "give a number, a string, a bool, a datetime or a date (or None)")


def is_nan(value: Any) -> bool:
    return isinstance(value, float) and math.isnan(value)


def _utc(value: dt.datetime) -> dt.datetime:
    return (value if value.tzinfo else value.replace(tzinfo=dt.timezone.utc)).astimezone(dt.timezone.utc)


@dataclass(frozen=True)
class Logic:
    op: str
    left: Filter | Logic
    right: Filter | Logic

    def __post_init__(self) -> None:
        if self.op not in ("AND", "OR") or not all(isinstance(c, (Filter, Logic)) for c in (self.left, self.right)):
            raise FeatureStoreError(f"a filter combines two filters with AND or OR, not {self.op!r}")

    def __and__(self, other: Filter | Logic) -> Logic:
        return Logic("AND", self, other)

    def __or__(self, other: Filter | Logic) -> Logic:
        return Logic("OR", self, other)

    def features(self) -> list[Feature]:
        return [*self.left.features(), *self.right.features()]

    def holds(self, row: dict[str, Any]) -> bool:
        if self.op == "AND":
            return self.left.holds(row) and self.right.holds(row)
        return self.left.holds(row) or self.right.holds(row)


@dataclass(frozen=True)
class Join:
    query: Query
    left_on: tuple[str, ...]
    right_on: tuple[str, ...]
    join_type: str
    prefix: str


@dataclass(frozen=True)
class Query(QueryMembers):
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

    def filter(self, f: Filter | Logic) -> Query:   # f: hsfs' name
        """This query with condition `f` added to its filters (all must hold), e.g. `fg.amount > 10`."""
        if not isinstance(f, (Filter, Logic)):
            raise FeatureStoreError("filter() takes a condition such as fg.amount > 10 or fg['kind'] == 'a'")
        return replace(self, filters=(*self.filters, f))

    def as_of(self, wallclock_time: Any = None, exclude_until: Any = None) -> Query:
        """Read every group as it was at `wallclock_time` (a datetime, epoch ms or '2024-05-01 12:00')."""
        return replace(self, wallclock=wallclock_time, exclude_until=exclude_until)

    def pin(self, versions: dict[str, int]) -> Query:
        """This query reading each group at the given table version (a training dataset version's commits)."""
        return replace(self, pinned=tuple(sorted(versions.items())), wallclock=None)

    def groups(self) -> list[Any]:
        """The feature groups the query reads: its own first, then those of its joins."""
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
        """The first `n` rows of the query's result (from the online store with `online`)."""
        return self.read(online=online).head(n)

    def to_string(self, online: bool = False, arrow_flight: bool = False) -> str:
        """The query as the embedded engine runs it (SQL; the same for `online`, whose rows come from the online
        store's newest row per key)."""
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
    if isinstance(value, dt.datetime):
        return {"datetime": value.isoformat()}
    if isinstance(value, dt.date):
        return {"date": value.isoformat()}
    if isinstance(value, float) and not math.isfinite(value):   # JSON has no NaN or inf
        return {"float": repr(value)}
    if isinstance(value, (list, tuple)):
        return [_stored(v) for v in value]
    return value


def _loaded(value: Any) -> Any:
    if isinstance(value, dict) and "datetime" in value:
        return dt.datetime.fromisoformat(value["datetime"])
    if isinstance(value, dict) and "date" in value:
        return dt.date.fromisoformat(value["date"])
    if isinstance(value, dict) and value.get("float") in ("nan", "inf", "-inf"):
        return float(value["float"])
    if isinstance(value, list):
        return [_loaded(v) for v in value]
    return value
