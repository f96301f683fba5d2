"""How a feature view's query becomes its training rows, whichever engine runs it: the query widened by the left
group's keys it does not select (kept under hidden names), the time window and extra filter as filters, and
the order of the rows (the left group's key and event time)."""

from __future__ import annotations

import dataclasses
import datetime as dt
from typing import TYPE_CHECKING

from hopsml.errors import FeatureStoreError
from hopsml.featurestore.refs import Condition, ViewRef
from hopsml.featurestore.seams import WallClock, When
from hopsml.featurestore.table import wallclock_ms

if TYPE_CHECKING:
    from hopsml.featurestore.query import Query

HIDDEN = "__hopsml_hidden__"   # a left key or event time the query does not select, while a frame is being made


@dataclasses.dataclass(frozen=True)
class RowLayout:
    """How a view's query becomes its training rows: the widened query (the left group's keys it does not select
    added), the name of each of its columns in the frame, the joined keys taken from the left's hidden ones, the
    order of the columns and the columns the rows are sorted by."""

    wider: Query
    names: tuple[str, ...]
    copies: tuple[tuple[str, str], ...]
    columns: tuple[str, ...]
    order: tuple[str, ...]
    event_time: str | None       # the left group's event time column as the frame names it


def row_layout(view: ViewRef, query: Query, start_time: When, end_time: When, extra_filter: Condition | None = None
               ) -> RowLayout:
    """The layout of `query`'s rows in the time window (see RowLayout)."""
    left = view.query.left
    if extra_filter is not None:
        query = query.filter(extra_filter)
    if left.event_time:
        if start_time not in (None, ""):
            query = query.filter(left.get_feature(left.event_time) >= utc(start_time))
        if end_time not in (None, ""):
            query = query.filter(left.get_feature(left.event_time) < utc(end_time))
    elif start_time not in (None, "") or end_time not in (None, ""):
        raise FeatureStoreError(f"feature view {view.key!r}: a time window needs an event time on the left group "
                                f"{left.key!r}")
    kept = list(query.features)
    extra = [k for k in left.keys() if k not in kept]
    wider = dataclasses.replace(query, features=tuple([*kept, *extra]))
    # the columns by source, so that a joined feature keeps its name when a hidden one of the left group has it
    named = {(id(group), feature): name for name, group, feature in query.column_sources()}
    names = [HIDDEN + feature if group is query.left and feature in extra else
             named.get((id(group), feature), name) for name, group, feature in wider.column_sources()]
    copies = []
    for name, group, feature in query.column_sources():
        if name not in names:   # a joined key the widened query took from the left: the left's value
            join = next(j for j in query.joins if j.query.left is group)
            copies.append((name, HIDDEN + join.left_on[join.right_on.index(feature)]))
    all_names = [*names, *(name for name, _ in copies)]
    # the left group's columns, its hidden keys, then the joined ones (as the widened query orders them)
    joined = [name for name, group, _ in query.column_sources() if group is not query.left]
    columns = [*(c for c in all_names if c not in joined), *joined]
    order = tuple(k if k in kept else HIDDEN + k for k in left.keys())
    time = None if not left.event_time else left.event_time if left.event_time in kept else HIDDEN + left.event_time
    return RowLayout(wider, tuple(names), tuple(copies), tuple(columns), order, time)


def utc(value: WallClock) -> dt.datetime:
    return dt.datetime.fromtimestamp(wallclock_ms(value) / 1000, dt.timezone.utc)
