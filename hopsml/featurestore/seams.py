"""The types the feature store's modules hand each other, at the bottom of the wing: what a user's frame and time
may be, and the members a low module reaches through a back-reference to a group, the store or a query.

FeatureStore, FeatureGroup and FeatureView sit at the top of the wing and every other module sits below them, so
a module that holds one of them (a group's `store`, a vector plan's `view`) names a Protocol from here or from
refs.py, never the class: the objects satisfy the Protocols by their members, and no import runs back up
(tests/unit/test_layers.py counts type-only imports too). This module imports nothing of the wing.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, Union

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd
    import polars as pl
    import pyarrow as pa
    from pyspark.sql import DataFrame as SparkFrame

    from hopsml.fs import Storage

# A wall-clock time as hsfs takes one (table.wallclock_ms reads it): a datetime (naive: UTC) or a date, epoch
# milliseconds, or a string such as '2024-05-01 12:00' or '20240501'.
WallClock = dt.datetime | dt.date | int | str
When = WallClock | None   # a wall-clock time, or none given (None, or hsfs's "" for a split's open end)

# Rows a user hands the feature store (an insert, a validation, a log): pandas, Polars or Spark (classic or Connect)
# DataFrames, an Arrow table or batch, or a dict of columns; frames.to_arrow makes them one Arrow table.
Frame = Union["pd.DataFrame", "pl.DataFrame", "pa.Table", "pa.RecordBatch", "SparkFrame",
              Mapping[str, Sequence[object]]]

# Rows a feature view's log takes: a frame, a numpy array, or lists of values (one vector, or one per row).
LoggedRows = Union[Frame, "np.ndarray", Sequence[object]]


class NamedModel(Protocol):
    """A model as the feature log names it (an hsml model): its name and version."""

    @property
    def name(self) -> str: ...

    @property
    def version(self) -> int: ...


class Versioned(NamedModel, Protocol):
    """A group or view version: its name, version and the key that names both (`<name>_<version>`)."""

    @property
    def key(self) -> str: ...


class SourcedColumns(Protocol):
    """A view's query as its schema reads it: each output column with the group it comes from (a FeatureGroup)
    and that group's column name."""

    def column_sources(self) -> list[tuple[str, Any, str]]: ...


class ProjectStore(Protocol):
    """What a module below the store reads of it: the project and its storage."""

    @property
    def project(self) -> str: ...

    @property
    def storage(self) -> Storage: ...


class KeyedGroup(Versioned, Protocol):
    """What the online store and the modules below a group read of it: its identity and keys."""

    @property
    def primary_key(self) -> list[str]: ...

    @property
    def event_time(self) -> str | None: ...

    @property
    def online_enabled(self) -> bool: ...

    @property
    def store(self) -> ProjectStore: ...
