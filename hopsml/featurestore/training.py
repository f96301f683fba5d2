"""A training dataset version's rows as the engine that answered its query holds them: pandas frames on the
driver (DuckDB's answer, small data) or Spark DataFrames that the tasks join, split, transform and write
(`spark_training.py`). The feature view asks `splits(...)` once and works on what comes back through the same
`Splits` members whichever engine holds the rows, so it never branches on the engine itself.

Rows are ordered by the left group's primary key and event time, and a seeded random split draws one number per
row in that order from numpy's PCG64 stream, so both engines put the same rows in the same split.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from hopsml.errors import FeatureStoreError
from hopsml.featurestore import engine
from hopsml.featurestore.table import wallclock_ms
from hopsml.featurestore.transformations import TransformationFunction, apply_all

if TYPE_CHECKING:
    import pandas as pd

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


def row_layout(view: Any, query: Query, start_time: Any, end_time: Any, extra_filter: Any = None) -> RowLayout:
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


def pandas_rows(layout: RowLayout, read_options: Mapping[str, Any] | None) -> pd.DataFrame:
    """The layout's rows on the driver, ordered by the left group's key and event time."""
    frame = engine.run(layout.wider, read_options=dict(read_options or {}))
    frame.columns = list(layout.names)
    for name, source in layout.copies:
        frame[name] = frame[source]
    frame = frame[list(layout.columns)]
    return frame.sort_values(list(layout.order), kind="stable").reset_index(drop=True)


class Splits(Protocol):
    """A training dataset version's splits as one engine holds them (pandas frames, or Spark DataFrames)."""

    @property
    def columns(self) -> list[str]: ...

    def sizes(self) -> dict[str, int]: ...

    def fit(self, functions: Sequence[TransformationFunction]) -> list[TransformationFunction]: ...

    def transformed(self, fitted: Sequence[TransformationFunction]) -> Splits: ...

    def shown(self, dropped: Sequence[str], renamed: Mapping[str, str]) -> Splits: ...

    def out(self, name: str, labels: Sequence[str], dataframe_type: str) -> tuple[Any, Any]: ...

    def write(self, storage: Any, project: str, name: str, labels: Sequence[str], keys: Sequence[str], shards: int,
              source: str) -> Any: ...

    def statistics(self, labels: Sequence[str], keys: Sequence[str], where: str) -> tuple[dict[str, Any],
                                                                                          list[str]]: ...


def splits(view: Any, query: Query, split: Mapping[str, Any], start_time: Any, end_time: Any,
           read_options: dict[str, Any] | None, extra_filter: Any = None, dataframe_type: str = "default"
           ) -> Splits:
    """The split rows of `query` (pinned to a version's commits), held by the engine `engine.choose` picks:
    Spark when asked for (read_options engine, dataframe_type='spark') or when the groups outgrow DuckDB."""
    layout = row_layout(view, query, start_time, end_time, extra_filter)
    chosen = engine.choose(layout.wider, read_options, dataframe_type)
    if chosen == "spark":
        from hopsml.featurestore import spark_training

        return spark_training.SparkSplits.of(layout, split, query)
    frame = pandas_rows(layout, {**(read_options or {}), "engine": chosen})
    return PandasSplits(split_frame(frame, split, query, layout.event_time))


class PandasSplits:
    """The splits as pandas frames on the driver (DuckDB answered the query)."""

    def __init__(self, frames: dict[str, pd.DataFrame]) -> None:
        self.frames = frames

    @property
    def columns(self) -> list[str]:
        return [str(c) for c in next(iter(self.frames.values())).columns]

    def sizes(self) -> dict[str, int]:
        return {name: int(len(frame)) for name, frame in self.frames.items()}

    def fit(self, functions: Sequence[TransformationFunction]) -> list[TransformationFunction]:
        return [f.fit(self.frames["train"]) for f in functions]

    def transformed(self, fitted: Sequence[TransformationFunction]) -> PandasSplits:
        return PandasSplits({name: apply_all(frame, fitted) for name, frame in self.frames.items()})

    def shown(self, dropped: Sequence[str], renamed: Mapping[str, str]) -> PandasSplits:
        return PandasSplits({name: frame.drop(columns=[c for c in dropped if c in frame.columns])
                             .rename(columns=dict(renamed)) for name, frame in self.frames.items()})

    def out(self, name: str, labels: Sequence[str], dataframe_type: str) -> tuple[Any, Any]:
        frame = self.frames[name]
        features = frame.drop(columns=list(labels))
        return as_type(features, dataframe_type), (as_type(frame[list(labels)], dataframe_type) if labels else None)

    def write(self, storage: Any, project: str, name: str, labels: Sequence[str], keys: Sequence[str], shards: int,
              source: str) -> Any:
        from hopsml.featurestore import materialize

        return materialize.write(storage, project, name, self.frames, labels, keys, shards, source)

    def statistics(self, labels: Sequence[str], keys: Sequence[str], where: str) -> tuple[dict[str, Any],
                                                                                          list[str]]:
        from hopsml.featurestore import materialize

        tables: dict[str, Any] = {}
        features: list[str] = []
        for name, frame in self.frames.items():
            if len(frame.columns):
                tables[name], features = materialize._table(frame, labels, {*labels, *keys}, where)
        return materialize.dataset_stats(tables), features


def split_frame(frame: pd.DataFrame, split: Mapping[str, Any], query: Query, event_time: str | None
                ) -> dict[str, pd.DataFrame]:
    """The rows (in key order) by split: all of them ('none'), by seeded draws ('random'), by event time
    ranges ('time': a row in two ranges is in both splits)."""
    import numpy as np
    import pandas as pd

    if split["type"] == "none":
        return {"train": frame}
    if split["type"] == "random":
        draws = np.random.default_rng(split["seed"]).random(len(frame))
        out, low = {}, 0.0
        for name, size in split["sizes"].items():
            out[name] = frame[(draws >= low) & (draws < low + size)].reset_index(drop=True)
            low += size
        out["train"] = frame[draws >= low].reset_index(drop=True)
        return out
    if not event_time:
        raise FeatureStoreError(f"a time split needs an event time on the left group {query.left.key!r}")
    times = pd.to_datetime(frame[event_time], utc=True)
    out = {}
    for name, (start, end) in split["ranges"].items():
        mask = np.ones(len(frame), dtype=bool)
        if start is not None:
            mask &= (times >= pd.Timestamp(start, unit="ms", tz="UTC")).to_numpy()
        if end is not None:
            mask &= (times < pd.Timestamp(end, unit="ms", tz="UTC")).to_numpy()
        out[name] = frame[mask].reset_index(drop=True)
    return out


def utc(value: Any) -> dt.datetime:
    return dt.datetime.fromtimestamp(wallclock_ms(value) / 1000, dt.timezone.utc)


def as_type(frame: pd.DataFrame, dataframe_type: str) -> Any:
    """A pandas frame as hsfs' `dataframe_type` asks: 'default'/'pandas', 'polars', 'numpy' or 'python'."""
    kind = dataframe_type.lower()
    if kind in ("default", "pandas"):
        return frame
    if kind == "polars":
        import polars as pl

        return pl.from_pandas(frame)
    if kind in ("numpy", "python"):
        return frame.to_numpy() if kind == "numpy" else frame.values.tolist()
    raise FeatureStoreError(f"dataframe_type {dataframe_type!r}: 'default', 'pandas', 'polars', 'numpy', 'python' "
                            "or 'spark'")
