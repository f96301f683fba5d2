"""The back-references of the feature store's objects, as Protocols: what a group holds of its store, a view of its
store, and what the modules that serve a view (vectors, training data, the feature log) reach through the view
and its groups. FeatureStore, FeatureGroup and FeatureView satisfy them by their members; a module that holds one
names the Protocol, so nothing imports the classes from below (seams.py says why). Only the members their users
call are here.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol, Union

from hopsml.featurestore.seams import KeyedGroup, ProjectStore, Versioned

if TYPE_CHECKING:
    from hopsml import config
    from hopsml.featurestore.online import OnlineStore
    from hopsml.featurestore.query import Filter, Logic, Query
    from hopsml.featurestore.table import Commit, GroupTable, Location
    from hopsml.featurestore.transformations import TransformationFunction

# A condition on features (`fg.amount > 10`, or `&` / `|` of them): a query's filter, a view's extra filter.
Condition = Union["Filter", "Logic"]


class GroupRef(KeyedGroup, Protocol):
    """A feature group as the store and a view's helpers use it."""

    @property
    def store(self) -> StoreRef: ...

    @property
    def table(self) -> GroupTable: ...

    def keys(self) -> list[str]: ...

    def to_dict(self) -> dict[str, Any]: ...


class ViewRef(Versioned, Protocol):
    """A feature view as the store and the modules that serve it use it."""

    @property
    def store(self) -> StoreRef: ...

    @property
    def query(self) -> Query: ...

    @property
    def labels(self) -> list[str]: ...

    @property
    def features(self) -> list[str]: ...

    @property
    def helper_columns(self) -> list[str]: ...

    @property
    def transformation_functions(self) -> list[TransformationFunction]: ...

    @property
    def _transformations(self) -> list[TransformationFunction]: ...   # as defined, before any fitting

    def serving_functions(self) -> list[TransformationFunction]: ...

    def to_dict(self) -> dict[str, Any]: ...

    def _shown(self, columns: Sequence[str], primary_key: bool, event_time: bool, helpers: Sequence[str] = ()
               ) -> tuple[list[str], dict[str, str]]: ...


class StoreRef(ProjectStore, Protocol):
    """The feature store as its groups and views call it: where their records, statistics and online rows live."""

    @property
    def settings(self) -> config.Settings: ...

    # --- groups
    def table_location(self, name: str, version: int) -> Location: ...

    def group_saved(self, name: str, version: int) -> bool: ...

    def save_group(self, group: GroupRef) -> None: ...

    def delete_group(self, group: GroupRef) -> None: ...

    def _group_by_key(self, key: str) -> GroupRef: ...

    def group_lock(self, group: GroupRef) -> contextlib.AbstractContextManager[None]: ...

    def after_commit(self, group: GroupRef, commit: Commit, step: str) -> contextlib.AbstractContextManager[None]: ...

    def save_statistics(self, group: GroupRef, commit: Commit, computed: dict[str, Any]) -> None: ...

    def read_statistics(self, group: GroupRef, version: int | None = None) -> dict[str, Any]: ...

    def save_validation(self, group: GroupRef, report: dict[str, Any]) -> str: ...

    # --- the online side
    def online(self) -> OnlineStore: ...

    def owe_online(self, group: GroupRef, since_commit: int) -> dict[str, Any] | None: ...

    def paid_online(self, group: GroupRef) -> None: ...

    def online_owed(self, group: GroupRef, fresh: bool = False) -> dict[str, Any] | None: ...

    def warn_if_online_behind(self, group: GroupRef) -> None: ...

    # --- views and their training datasets
    def get_feature_view(self, name: str, version: int | None = None) -> ViewRef: ...

    def save_view(self, view: ViewRef) -> None: ...

    def delete_view(self, view: ViewRef) -> None: ...

    def log_uri(self, name: str, version: int) -> str: ...

    def training_dataset_versions(self, view: ViewRef) -> list[int]: ...

    def save_training_dataset(self, view: ViewRef, record: dict[str, Any]) -> int: ...

    def update_training_dataset(self, view: ViewRef, version: int, **fields: object) -> None: ...

    def read_training_dataset(self, view: ViewRef, version: int) -> dict[str, Any]: ...
