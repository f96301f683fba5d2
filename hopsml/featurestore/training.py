"""A training dataset version's rows as the engine that answered its query holds them: pandas frames on the
driver (DuckDB's answer, small data) or Spark DataFrames that the tasks join, split, transform and write
(`spark_training.py`). The feature view asks `splits(...)` once and works on what comes back through the same
`Splits` members whichever engine holds the rows, so it never branches on the engine itself.

Rows are ordered by the left group's primary key and event time, and a seeded random split draws one number per
row in that order from numpy's PCG64 stream, so both engines put the same rows in the same split.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from hopsml.errors import FeatureStoreError
from hopsml.featurestore import engine
from hopsml.featurestore.refs import Condition, ViewRef
from hopsml.featurestore.row_layout import HIDDEN, RowLayout, row_layout
from hopsml.featurestore.seams import When
from hopsml.featurestore.transformations import TransformationFunction, apply_all

if TYPE_CHECKING:
    import pandas as pd

    from hopsml.featurestore.query import Query
    from hopsml.fs import Storage

__all__ = ["HIDDEN", "RowLayout", "Splits", "as_type", "pandas_rows", "row_layout", "splits"]

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

    def out(self, name: str, labels: Sequence[str], dataframe_type: str) -> tuple[Any, Any]:
        """(features, labels) of a split: pandas frames, or Spark DataFrames where dataframe_type is 'spark'."""

    def write(self, storage: Storage, project: str, name: str, labels: Sequence[str], keys: Sequence[str], shards: int,
              source: str) -> Any: ...

    def statistics(self, labels: Sequence[str], keys: Sequence[str], where: str) -> tuple[dict[str, Any],
                                                                                          list[str]]: ...


def splits(view: ViewRef, query: Query, split: Mapping[str, Any], start_time: When, end_time: When,
           read_options: dict[str, Any] | None, extra_filter: Condition | None = None, dataframe_type: str = "default"
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
        return frame.drop(columns=list(labels)), (frame[list(labels)] if labels else None)

    def write(self, storage: Storage, project: str, name: str, labels: Sequence[str], keys: Sequence[str], shards: int,
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


def as_type(frame: pd.DataFrame, dataframe_type: str) -> Any:
    """A pandas frame as hsfs' `dataframe_type` asks: 'default'/'pandas', 'polars', 'numpy' or 'python' (a Spark
    DataFrame, which only the Spark engine gives, for 'spark')."""
    kind = dataframe_type.lower()
    if kind in ("default", "pandas") or kind == "spark" and not hasattr(frame, "to_numpy"):
        return frame
    if kind == "polars":
        import polars as pl

        return pl.from_pandas(frame)
    if kind in ("numpy", "python"):
        return frame.to_numpy() if kind == "numpy" else frame.values.tolist()
    raise FeatureStoreError(f"dataframe_type {dataframe_type!r}: 'default', 'pandas', 'polars', 'numpy', 'python' "
                            "or 'spark'")
