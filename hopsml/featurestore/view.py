"""A feature view: a query, its labels and its transformation functions, and the training data it gives.

Every training-data call records a training dataset version: the table version (commit) it read of each group,
the time window, the split and its seed, and the transformation functions fitted on its training split. Reading
that version again (`get_train_test_split(version)`) re-runs the query pinned to those commits with that split,
so it returns the same rows, whatever was inserted since. Rows are split after ordering them by the left
group's primary key and event time, so the seeded split does not depend on the engine's row order.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import random
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from hopsml import layout, request_notes
from hopsml.errors import FeatureStoreError
from hopsml.featurestore import engine, in_memory, training, vectors
from hopsml.featurestore.hsfs_members import ViewMembers
from hopsml.featurestore.query import Query
from hopsml.featurestore.refs import Condition, StoreRef
from hopsml.featurestore.seams import KeyedGroup, LoggedRows, NamedModel, When
from hopsml.featurestore.table import wallclock_ms
from hopsml.featurestore.training import as_type
from hopsml.featurestore.transformations import TransformationFunction, apply_all, row_steps

if TYPE_CHECKING:
    import pandas as pd

SPLITS = ("train", "validation", "test")
_HIDDEN = training.HIDDEN


def qualified_name(project: str, group: KeyedGroup, column: str) -> str:
    """hsfs's name of a group's column the view's query does not select (`<project>_<group>_<version>_<column>`),
    as `primary_key=True` / `event_time=True` add it."""
    return f"{project}_{group.name}_{group.version}_{column}"


class FeatureView(ViewMembers):
    """One version of a feature view (see the module docstring)."""

    store: StoreRef   # its FeatureStore
    query: Query

    def __init__(self, store: StoreRef, name: str, version: int, query: Query, labels: Sequence[str] = (),
                 transformation_functions: Sequence[TransformationFunction] = (), description: str = "",
                 created: str | None = None, logging: dict[str, Any] | None = None,
                 inference_helper_columns: Sequence[str] = (), training_helper_columns: Sequence[str] = ()) -> None:
        self.store, self.name, self.version = store, layout.validate_name(name, "feature view name"), int(version)
        self.query, self.description, self.created = query, description, created
        self._logging = {"enabled": False, "paused": False, **(logging or {})}
        self.labels = [label.lower() for label in labels]
        self._transformations = list(transformation_functions)
        self._scoring: int | None = None
        self._last_accessed: int | None = None   # the training dataset version this object made or read last
        self._serving: int | None = None
        self._serving_fitted: tuple[int, list[TransformationFunction], Any] | None = None  # per serving version
        self._vector_plan: vectors.Plan | None = None   # made on the first feature vector
        self._helper_plan: vectors.Plan | None = None   # the one of the inference helper columns
        self.inference_helper_columns = [c.lower() for c in inference_helper_columns]
        self.training_helper_columns = [c.lower() for c in training_helper_columns]
        columns = query.output_columns()
        for kind, helpers in (("inference", self.inference_helper_columns),
                              ("training", self.training_helper_columns)):
            for column in helpers:
                if column not in columns:
                    raise FeatureStoreError(f"feature view {name!r}: {kind} helper column {column!r} is not among "
                                            f"the query's features ({', '.join(columns)}); select it in the query")
                if column in self.labels:
                    raise FeatureStoreError(f"feature view {name!r}: {column!r} is a label, so it cannot also be "
                                            f"a {kind} helper column")
        both = set(self.inference_helper_columns) & set(self.training_helper_columns)
        if both:
            raise FeatureStoreError(f"feature view {name!r}: {sorted(both)} named both an inference and a training "
                                    "helper column; give each column one role")
        for label in self.labels:
            if label not in columns:
                raise FeatureStoreError(f"feature view {name!r}: label {label!r} is not among the query's features "
                                        f"({', '.join(columns)})")
        for function in self._transformations:
            for feature in function.features:
                if feature not in columns:
                    raise FeatureStoreError(f"feature view {name!r}: {function.name} transforms {feature!r}, which the "
                                            f"query does not select ({', '.join(columns)})")

    def __repr__(self) -> str:
        return f"FeatureView({self.name!r}, {self.version}, labels={self.labels})"

    @property
    def key(self) -> str:
        return f"{self.name}_{self.version}"

    @property
    def features(self) -> list[str]:
        return self.query.output_columns()

    @property
    def transformation_functions(self) -> list[TransformationFunction]:
        """The view's functions, fitted on the batch-scoring training dataset version when one is set."""
        if self._scoring is not None:
            return self._fitted(self._scoring)
        return list(self._transformations)

    def get_last_accessed_training_dataset(self) -> int | None:
        """The training dataset version this view object made or read last (what hsml records for a model saved
        with `feature_view=` and no `training_dataset_version`), None before any."""
        return self._last_accessed

    @property
    def _batch_scoring_server(self) -> Any:
        """What hsfs keeps after `init_batch_scoring` and what programs reach into (the tutorials read its
        `model_dependent_transformation_functions` to undo a scaling): the functions fitted on that version."""
        if self._scoring is None:
            raise FeatureStoreError(f"feature view {self.key!r}: call init_batch_scoring(training_dataset_version) "
                                    "first")
        import types

        return types.SimpleNamespace(training_dataset_version=self._scoring,
                                     model_dependent_transformation_functions=self._fitted(self._scoring))

    def to_dict(self) -> dict[str, Any]:
        """The view's definition as its record keeps it: query, labels, transformation functions, logging."""
        from hopsml.featurestore.query import to_dict

        return {"name": self.name, "version": self.version, "description": self.description, "labels": self.labels,
                "query": to_dict(self.query), "created": self.created,
                "transformation_functions": [f.to_dict() for f in self._transformations], "logging": self._logging,
                "inference_helper_columns": self.inference_helper_columns,
                "training_helper_columns": self.training_helper_columns}

    @property
    def helper_columns(self) -> list[str]:
        """Columns the query selects that are not model features: kept out of training data, batch data and
        feature vectors unless asked for (hsfs's inference and training helper columns)."""
        return [*self.inference_helper_columns, *self.training_helper_columns]

    def get_batch_query(self) -> Query:
        """The view's query (groups, joins, filters), to read batch data for scoring."""
        return self.query

    # --- training data ----------------------------------------------------------------------------------
    # Which columns come back follows hsfs 4 (feature_view_engine): every feature the query selects, a primary key
    # or event time among them too; the left group's key and event time it does not select only with
    # primary_key=True / event_time=True; training helper columns only with training_helper_columns=True; never
    # the inference helper columns. hsfs's `primary_keys=` spelling is taken as `primary_key=`.
    def training_data(self, start_time: When = None, end_time: When = None, description: str = "",
                      extra_filter: Condition | None = None, statistics_config: object = None,
                      read_options: dict[str, Any] | None = None, spine: object = None, primary_key: bool = False,
                      event_time: bool = False, training_helper_columns: bool = False,
                      dataframe_type: str = "default", transformation_context: object = None, **kwargs: object
                      ) -> tuple[pd.DataFrame, pd.DataFrame | None]:
        """(features, labels) of the whole window, as a new training dataset version."""
        self._supported(spine, transformation_context)
        rows = self._new_version({"type": "none"}, start_time, end_time, description, read_options,
                                 extra_filter, dataframe_type)[1]
        return self._shaped(rows, "train", _flag(primary_key, kwargs), event_time, dataframe_type,
                            training_helper_columns)

    def train_test_split(self, test_size: float | None = None, train_start: When = "", train_end: When = "",
                         test_start: When = "", test_end: When = "", description: str = "",
                         extra_filter: Condition | None = None, statistics_config: object = None,
                         read_options: dict[str, Any] | None = None,
                         spine: object = None, primary_key: bool = False, event_time: bool = False,
                         training_helper_columns: bool = False, dataframe_type: str = "default",
                         transformation_context: object = None, seed: int | None = None, **kwargs: object
                         ) -> tuple[Any, ...]:
        """X_train, X_test, y_train, y_test: split at random (`test_size`, `seed`) or by event time ranges."""
        self._supported(spine, transformation_context)
        split = _split_spec({"train": (train_start, train_end), "test": (test_start, test_end)},
                            {"test": test_size}, seed)
        rows = self._new_version(split, None, None, description, read_options, extra_filter, dataframe_type)[1]
        return self._split_out(rows, ("train", "test"), _flag(primary_key, kwargs), event_time, dataframe_type,
                               training_helper_columns)

    def train_validation_test_split(self, validation_size: float | None = None, test_size: float | None = None,
                                    train_start: When = "", train_end: When = "", validation_start: When = "",
                                    validation_end: When = "", test_start: When = "", test_end: When = "",
                                    description: str = "", extra_filter: Condition | None = None,
                                    statistics_config: object = None,
                                    read_options: dict[str, Any] | None = None, spine: object = None,
                                    primary_key: bool = False, event_time: bool = False,
                                    training_helper_columns: bool = False, dataframe_type: str = "default",
                                    transformation_context: object = None, seed: int | None = None, **kwargs: object
                                    ) -> tuple[Any, ...]:
        """X_train, X_val, X_test, y_train, y_val, y_test."""
        self._supported(spine, transformation_context)
        split = _split_spec({"train": (train_start, train_end), "validation": (validation_start, validation_end),
                             "test": (test_start, test_end)}, {"validation": validation_size, "test": test_size}, seed)
        rows = self._new_version(split, None, None, description, read_options, extra_filter, dataframe_type)[1]
        return self._split_out(rows, ("train", "validation", "test"), _flag(primary_key, kwargs), event_time,
                               dataframe_type, training_helper_columns)

    def get_training_data(self, training_dataset_version: int, read_options: dict[str, Any] | None = None,
                          primary_key: bool = False, event_time: bool = False,
                          training_helper_columns: bool = False, dataframe_type: str = "default",
                          transformation_context: object = None, **kwargs: object) -> tuple[Any, Any]:
        """Training dataset `training_dataset_version` read back as (features, labels), transformed."""
        self._supported(None, transformation_context)
        rows = self._read_version(training_dataset_version, read_options, dataframe_type)
        return self._shaped(rows, "train", _flag(primary_key, kwargs), event_time, dataframe_type,
                            training_helper_columns)

    def get_train_test_split(self, training_dataset_version: int, read_options: dict[str, Any] | None = None,
                             primary_key: bool = False, event_time: bool = False,
                             training_helper_columns: bool = False, dataframe_type: str = "default",
                             transformation_context: object = None, **kwargs: object) -> tuple[Any, ...]:
        """Training dataset `training_dataset_version` read back as (X_train, X_test, y_train, y_test), transformed as
        serving transforms."""
        self._supported(None, transformation_context)
        rows = self._read_version(training_dataset_version, read_options, dataframe_type)
        return self._split_out(rows, ("train", "test"), _flag(primary_key, kwargs), event_time, dataframe_type,
                               training_helper_columns)

    def get_train_validation_test_split(self, training_dataset_version: int,
                                        read_options: dict[str, Any] | None = None, primary_key: bool = False,
                                        event_time: bool = False, training_helper_columns: bool = False,
                                        dataframe_type: str = "default", transformation_context: object = None,
                                        **kwargs: object) -> tuple[Any, ...]:
        """Training dataset `training_dataset_version` read back as (X_train, X_val, X_test, y_train, y_val, y_test),
        transformed."""
        self._supported(None, transformation_context)
        rows = self._read_version(training_dataset_version, read_options, dataframe_type)
        return self._split_out(rows, ("train", "validation", "test"), _flag(primary_key, kwargs), event_time,
                               dataframe_type, training_helper_columns)

    def get_training_datasets(self) -> list[dict[str, Any]]:
        """The record of each of the view's training dataset versions."""
        return [self.store.read_training_dataset(self, v) for v in self.store.training_dataset_versions(self)]

    def _supported(self, spine: object, transformation_context: object) -> None:
        """Refuse what hsfs would use and hopsml cannot, rather than answer without it."""
        if spine is not None:
            raise FeatureStoreError(f"feature view {self.key!r}: spine=... (a spine group or DataFrame on the left of "
                                    "the join) is not offered by hopsml; insert the label rows into a feature group "
                                    "and make it the left group of the view's query")
        if transformation_context is not None:
            raise FeatureStoreError(f"feature view {self.key!r}: transformation_context=... is not offered by hopsml "
                                    "(its transformation functions take features and statistics only)")

    # --- batch scoring ----------------------------------------------------------------------------------
    def init_batch_scoring(self, training_dataset_version: int | None = None) -> None:
        """Transform batch data with the statistics of this training dataset version (the newest by default)."""
        versions = self.store.training_dataset_versions(self)
        if not versions:
            raise FeatureStoreError(f"feature view {self.key!r} has no training dataset yet: its transformation "
                                    "functions are fitted on one (train_test_split or training_data)")
        chosen = versions[-1] if training_dataset_version is None else int(training_dataset_version)
        if chosen not in versions:
            raise FeatureStoreError(f"feature view {self.key!r} has no training dataset version {chosen}; its "
                                    f"versions: {versions}")
        self._scoring = chosen

    def get_batch_data(self, start_time: When = None, end_time: When = None, read_options: dict[str, Any] | None = None,
                       spine: object = None, primary_key: bool = False, event_time: bool = False,
                       inference_helper_columns: bool = False, dataframe_type: str = "default",
                       transformed: bool = True, transformation_context: object = None, **kwargs: object) -> Any:
        """The view's features (no labels) for the window, transformed as its training data was. As hsfs: with the
        inference helper columns when `inference_helper_columns` (hopsml's older `inference_helpers=` too) or
        when not `transformed`; never the training helper columns."""
        self._supported(spine, transformation_context)
        helpers_wanted = bool(inference_helper_columns or kwargs.get("inference_helpers") or not transformed)
        frame = self._rows(self.query, start_time, end_time, read_options)
        if transformed and self._transformations:
            if self._scoring is None:
                self.init_batch_scoring()
            for function in self._fitted(self._scoring or 0):
                frame = function.apply(frame)
        frame = frame.drop(columns=[c for c in self.labels if c in frame.columns])
        kept = self.inference_helper_columns if helpers_wanted else ()
        return as_type(self._visible(frame, _flag(primary_key, kwargs), event_time, kept), dataframe_type)

    def delete(self) -> None:
        """Delete the view and its training datasets; the feature groups it reads stay."""
        self.store.delete_view(self)

    # --- written out: a prepared dataset per training dataset version (materialize.py) ---------------------
    def create_training_data(self, start_time: When = "", end_time: When = "", storage_connector: object = None,
                             location: str = "", description: str = "", extra_filter: Condition | None = None,
                             data_format: str = "parquet", coalesce: bool = False, seed: int | None = None,
                             statistics_config: object = None, write_options: dict[str, Any] | None = None,
                             spine: object = None, transformation_context: object = None, *,
                             read_options: dict[str, Any] | None = None, primary_key: bool = False,
                             event_time: bool = False, shards: int | None = None,
                             training_helper_columns: bool = False, **kwargs: object) -> tuple[int, None]:
        """Write the training data out as a prepared dataset (`materialize.py`); returns (version, None: no job).
        hsfs's storage_connector, location, data_format and coalesce have no meaning here (one format, in the
        project) and are refused when given."""
        self._written_where(storage_connector, location)
        self._supported(spine, transformation_context)
        return self._materialized({"type": "none"}, start_time, end_time, description, read_options,
                                  _flag(primary_key, kwargs), event_time, shards, training_helper_columns,
                                  extra_filter)

    def create_train_test_split(self, test_size: float | None = None, train_start: When = "", train_end: When = "",
                                test_start: When = "", test_end: When = "", storage_connector: object = None,
                                location: str = "", description: str = "", extra_filter: Condition | None = None,
                                data_format: str = "parquet", coalesce: bool = False, seed: int | None = None,
                                statistics_config: object = None, write_options: dict[str, Any] | None = None,
                                spine: object = None, transformation_context: object = None, *,
                                read_options: dict[str, Any] | None = None, primary_key: bool = False,
                                event_time: bool = False, shards: int | None = None,
                                training_helper_columns: bool = False, **kwargs: object) -> tuple[int, None]:
        """train_test_split's rows written out as a prepared dataset with splits 'train' and 'test'."""
        self._written_where(storage_connector, location)
        self._supported(spine, transformation_context)
        split = _split_spec({"train": (train_start, train_end), "test": (test_start, test_end)},
                            {"test": test_size}, seed)
        return self._materialized(split, None, None, description, read_options, _flag(primary_key, kwargs),
                                  event_time, shards, training_helper_columns, extra_filter)

    def create_train_validation_test_split(self, validation_size: float | None = None,
                                           test_size: float | None = None, train_start: When = "",
                                           train_end: When = "", validation_start: When = "",
                                           validation_end: When = "", test_start: When = "", test_end: When = "",
                                           storage_connector: object = None, location: str = "",
                                           description: str = "", extra_filter: Condition | None = None,
                                           data_format: str = "parquet", coalesce: bool = False,
                                           seed: int | None = None, statistics_config: object = None,
                                           write_options: dict[str, Any] | None = None, spine: object = None,
                                           transformation_context: object = None, *,
                                           read_options: dict[str, Any] | None = None, primary_key: bool = False,
                                           event_time: bool = False, shards: int | None = None,
                                           training_helper_columns: bool = False, **kwargs: object
                                           ) -> tuple[int, None]:
        """train_validation_test_split's rows written out, with splits 'train', 'validation' and 'test'."""
        self._written_where(storage_connector, location)
        self._supported(spine, transformation_context)
        split = _split_spec({"train": (train_start, train_end), "validation": (validation_start, validation_end),
                             "test": (test_start, test_end)}, {"validation": validation_size, "test": test_size}, seed)
        return self._materialized(split, None, None, description, read_options, _flag(primary_key, kwargs),
                                  event_time, shards, training_helper_columns, extra_filter)

    def _written_where(self, storage_connector: object, location: str) -> None:
        if storage_connector is not None or location:
            raise FeatureStoreError(f"feature view {self.key!r}: storage_connector=/location= are not offered by "
                                    "hopsml: a created training dataset is a prepared dataset in the project's "
                                    "Datasets/ (fv.training_dataset_name(version) names it)")

    def training_dataset_name(self, training_dataset_version: int) -> str:
        """The prepared dataset a created training dataset version was written to (`hopsml.data.reader(name)`)."""
        record = self.store.read_training_dataset(self, training_dataset_version)
        if record["state"] == "INCOMPLETE":
            raise FeatureStoreError(f"training dataset version {training_dataset_version} of {self.key!r} is "
                                    f"incomplete: its dataset {record['dataset']!r} is not there (its write failed, "
                                    "was killed or is still running, or it was removed); create another version")
        if not record.get("dataset"):
            raise FeatureStoreError(f"training dataset version {training_dataset_version} of {self.key!r} was not "
                                    "written out (it came from train_test_split or training_data); create one with "
                                    "create_training_data or create_train_test_split")
        return str(record["dataset"])

    def _materialized(self, split: dict[str, Any], start_time: When, end_time: When, description: str,
                      read_options: dict[str, Any] | None, primary_key: bool, event_time: bool,
                      shards: int | None, training_helpers: bool, extra_filter: Condition | None = None
                      ) -> tuple[int, None]:
        from hopsml.featurestore import materialize

        upcoming = (self.store.training_dataset_versions(self) or [0])[-1] + 1
        name = materialize.dataset_name(self.name, self.version, upcoming)
        version, rows = self._new_version(split, start_time, end_time, description, read_options, extra_filter,
                                          dataset=name)
        if version != upcoming:  # another process took that number: the dataset's name follows the version
            name = materialize.dataset_name(self.name, self.version, version)
            self.store.update_training_dataset(self, version, dataset=name)
        visible = self._showing(rows, primary_key, event_time, training_helpers)
        left = self.query.left
        # a key or event time the query selects is a feature, in the `features` vector as in a feature vector (as
        # hsfs's X has it); one only added by primary_key=/event_time= stays a column of the dataset, out of it
        named = {qualified_name(self.store.project, left, k) for k in left.keys()}
        keys = [c for c in visible.columns if c in named]
        visible.write(self.store.storage, self.store.project, name, self._label_columns(visible.columns),
                      keys, shards or max(1, self.store.settings.num_workers), f"feature view {self.key}, "
                      f"training dataset version {version}")
        return version, None

    def _label_columns(self, columns: Sequence[str]) -> list[str]:
        return [c for c in columns if c in self.labels or any(c.startswith(f"{t.name}_{label}_")
                                                              for t in self._transformations for label in self.labels)]

    # --- serving: feature vectors from the online store (vectors.py) -----------------------------------
    def init_serving(self, training_dataset_version: int | None = None, **_: object) -> None:
        """Transform feature vectors with the statistics of this training dataset version (the newest when
        None); the model's own version is the one to give."""
        versions = self.store.training_dataset_versions(self)
        if training_dataset_version is None:
            if self._transformations and not versions:
                raise FeatureStoreError(f"feature view {self.key!r} has no training dataset yet: its transformation "
                                        "functions are fitted on one (train_test_split or training_data)")
            self._serving = versions[-1] if versions else None
            return
        if int(training_dataset_version) not in versions:
            raise FeatureStoreError(f"feature view {self.key!r} has no training dataset version "
                                    f"{training_dataset_version}; its versions: {versions}")
        self._serving = int(training_dataset_version)

    @property
    def serving_keys(self) -> list[str]:
        return vectors.serving_keys(self)

    def serving_functions(self) -> list[TransformationFunction]:
        """The transformation functions fitted on the serving version (init_serving), else the batch-scoring
        one, else the newest training dataset version."""
        return list(self._serving_steps()[0])

    def _serving_steps(self) -> tuple[list[TransformationFunction], Any]:
        """The serving version's fitted functions and their steps over plain values (None: pandas applies them),
        read from its training dataset record once per version."""
        if not self._transformations:
            return [], []
        version = self._serving if self._serving is not None else self._scoring
        if version is None:
            self.init_serving()
            version = self._serving
        version = int(version or 0)
        cached = self._serving_fitted
        if cached is None or cached[0] != version:
            functions = self._fitted(version)
            cached = self._serving_fitted = (version, functions, row_steps(functions))
        return cached[1], cached[2]

    def get_feature_vector(self, entry: dict[str, Any], passed_features: dict[str, Any] | None = None,
                           return_type: str = "list", allow_missing: bool = False, transform: bool = True,
                           **_: object) -> Any:
        """One entry's feature vector (see vectors.py): the features the model was trained on, in order."""
        return self._vectors([entry], [passed_features or {}], allow_missing, transform, return_type, single=True)

    def get_feature_vectors(self, entry: list[dict[str, Any]], passed_features: list[dict[str, Any]] | None = None,
                            return_type: str = "list", allow_missing: bool = False, transform: bool = True,
                            **_: object) -> Any:
        """Several entries' vectors, one lookup per group for all of them."""
        return self._vectors(entry, passed_features, allow_missing, transform, return_type, single=False)

    def get_inference_helper(self, entry: dict[str, Any], return_type: str = "pandas", **_: object) -> Any:
        """One entry's inference helper columns from the online store: a one-row frame, or a dict."""
        return self._helpers([entry], return_type, single=True)

    def get_inference_helpers(self, entry: list[dict[str, Any]], return_type: str = "pandas", **_: object) -> Any:
        """Several entries' inference helper columns: a frame (one row per entry), or a list of dicts."""
        return self._helpers(entry, return_type, single=False)

    def _helpers(self, entries: list[dict[str, Any]], return_type: str, single: bool) -> Any:
        if not self.inference_helper_columns:
            raise FeatureStoreError(f"feature view {self.key!r} has no inference helper columns; create the view "
                                    "with inference_helper_columns=[...] (columns its query selects)")
        plan = self._helper_plan
        if plan is None:
            plan = self._helper_plan = vectors.Plan(self, self.inference_helper_columns)
        rows = plan.fetch(entries, None, allow_missing=False)
        if return_type.lower() == "dict":
            dicts = [dict(zip(plan.wanted, row)) for row in rows]
            return dicts[0] if single else dicts
        import pandas as pd

        return as_type(pd.DataFrame(rows, columns=plan.wanted), return_type)

    def _vectors(self, entries: list[dict[str, Any]], passed: list[dict[str, Any]] | None, allow_missing: bool,
                 transform: bool, return_type: str, single: bool) -> Any:
        """The vectors as return_type has them: on plain values where they give the pandas path's answer
        (vectors.shaped), else through a pandas frame."""
        plan = self._vector_plan
        if plan is None:
            plan = self._vector_plan = vectors.Plan(self)
        rows = plan.fetch(entries, passed, allow_missing)
        functions, steps = self._serving_steps() if transform else ([], [])
        fast = vectors.shaped(plan.wanted, rows, steps, return_type, single, logged=transform)
        if fast is not None:
            answer, logged = fast
            if transform:   # inside a serving's request: its inference log keeps the vectors the model got
                request_notes.note(inputs={"instances": logged})
            return answer
        import pandas as pd

        frame = pd.DataFrame(rows, columns=plan.wanted)
        frame = apply_all(frame, functions) if transform else frame
        if transform:
            numbers = frame.astype({c: "int64" for c in frame.columns if frame[c].dtype == bool})   # as training's
            request_notes.note(inputs={"instances": numbers.astype(object).where(numbers.notna(), None)
                                       .values.tolist()})
        return _vector_as(frame, return_type, single)

    def transform(self, feature_vector: Any, external: bool | None = None, transformation_context: object = None,
                  return_type: str | None = None, **_: object) -> Any:
        """Untransformed features transformed with the serving version's statistics (init_serving; else the
        batch-scoring one; else the newest), as hsfs's `transform`: one vector as a list (in the order of
        `get_feature_vector(..., transform=False)`), a list of them, a dict of one vector (by feature name), or a
        DataFrame; answered in the same form unless `return_type` ('list', 'numpy', 'pandas', 'polars') says."""
        import pandas as pd

        self._supported(None, transformation_context)
        columns = vectors.columns(self)
        single, kind = False, "pandas"
        if isinstance(feature_vector, pd.DataFrame):
            frame = feature_vector
        elif type(feature_vector).__module__.startswith("polars"):
            frame, kind = feature_vector.to_pandas(), "polars"
        elif isinstance(feature_vector, dict):
            frame, single, kind = pd.DataFrame([feature_vector]), True, "dict"
        elif isinstance(feature_vector, (list, tuple)):
            rows = [list(v) for v in feature_vector] if feature_vector and all(
                isinstance(v, (list, tuple)) for v in feature_vector) else [list(feature_vector)]
            single, kind = not (feature_vector and isinstance(feature_vector[0], (list, tuple))), "list"
            for row in rows:
                if len(row) != len(columns):
                    raise FeatureStoreError(f"feature view {self.key!r}: a feature vector of {len(row)} values for "
                                            f"{len(columns)} features ({', '.join(columns)}); give them in that "
                                            "order, as get_feature_vector(..., transform=False) returns them")
            frame = pd.DataFrame(rows, columns=columns)
        else:
            raise FeatureStoreError(f"feature view {self.key!r}: transform takes a list, a list of lists, a dict or "
                                    f"a DataFrame, not {type(feature_vector).__name__}")
        frame = frame.rename(columns={c: str(c).lower() for c in frame.columns})
        out = apply_all(frame, self.serving_functions())
        wanted = (return_type or kind).lower()
        if wanted == "dict":
            records = out.astype(object).where(out.notna(), None).to_dict(orient="records")
            return records[0] if single else records
        return _vector_as(out, wanted, single and wanted in ("list", "numpy"))

    # --- feature logging (feature_log.py) ---------------------------------------------------------------
    @property
    def logging_enabled(self) -> bool:
        return bool(self._logging["enabled"])

    def enable_logging(self, **_: object) -> None:
        """Turn on the view's feature log, so that `log()` keeps what a model was given and predicted."""
        self._set_logging(enabled=True)

    def pause_logging(self) -> None:
        """Stop log() from committing its buffer by itself (materialize_log() still does)."""
        self._set_logging(paused=True)

    def resume_logging(self) -> None:
        """Log again after `pause_logging()`."""
        self._set_logging(paused=False)

    def log(self, untransformed_features: LoggedRows | None = None, predictions: LoggedRows | None = None,
            transformed_features: LoggedRows | None = None,
            write_options: dict[str, Any] | None = None, training_dataset_version: int | None = None,
            model: NamedModel | None = None, logging_data: LoggedRows | None = None, **_: object) -> int:
        """Log features (untransformed, transformed or both) and predictions, with the training dataset version
        and model they belong to; returns the rows logged. Predictions come in `predictions` (one column per
        label) or as label-named columns of the features. Logging is enabled by the first call."""
        from hopsml.featurestore.feature_log import FeatureLog

        if not self.logging_enabled:
            self.enable_logging()
        features = logging_data if logging_data is not None else untransformed_features
        model_id = (str(model.name), int(model.version)) if model is not None else None
        if training_dataset_version is None:
            training_dataset_version = self._scoring or getattr(model, "training_dataset_version", None)
        log = FeatureLog(self)
        count = log.write(features, transformed_features, predictions, training_dataset_version, model_id)
        if not self._logging["paused"] and log.due():
            log.materialize()
        return count

    def materialize_log(self, wait: bool = False, transformed: bool | None = None) -> dict[str, int]:
        """Commit what log() buffered to the log's table now: the rows and buffer files it took."""
        from hopsml.featurestore.feature_log import FeatureLog

        return FeatureLog(self).materialize()

    def read_log(self, start_time: When = None, end_time: When = None,
                 filter: Condition | None = None,  # noqa: A002 (hsfs's name)
                 transformed: bool = False, training_dataset_version: int | None = None,
                 model: NamedModel | None = None,
                 **_: object) -> pd.DataFrame:
        """The committed log rows (materialize_log() commits the newest), by log time, training dataset version,
        model (an hsml model) or a filter on a feature."""
        from hopsml.featurestore.feature_log import FeatureLog

        model_id = (str(model.name), int(model.version)) if model is not None else None
        return FeatureLog(self).read(start_time, end_time, filter, transformed, training_dataset_version, model_id)

    def get_log_timeline(self, limit: int | None = None, **_: object) -> list[dict[str, Any]]:
        """The feature log's commits, newest first (time and rows), at most `limit`."""
        from hopsml.featurestore.feature_log import FeatureLog

        return FeatureLog(self).timeline(limit)

    def delete_log(self, transformed: bool | None = None) -> None:
        """Delete the view's feature log: its table and the rows still buffered."""
        from hopsml.featurestore.feature_log import FeatureLog

        FeatureLog(self).delete()

    def _set_logging(self, **state: bool) -> None:
        self._logging.update(state)
        self.store.save_view(self)

    # --- inside ---------------------------------------------------------------------------------------
    def _rows(self, query: Query, start_time: When, end_time: When, read_options: dict[str, Any] | None,
              extra_filter: Condition | None = None) -> pd.DataFrame:
        """The query's rows on the driver (batch data), ordered by the left group's key and event time, with those
        of them the query does not select kept under hidden names (`training.HIDDEN`)."""
        return training.pandas_rows(training.row_layout(self, query, start_time, end_time, extra_filter),
                                    read_options)

    def _new_version(self, split: dict[str, Any], start_time: When, end_time: When, description: str,
                     read_options: dict[str, Any] | None, extra_filter: Condition | None = None,
                     dataframe_type: str = "default",
                     **fields: object) -> tuple[int, training.Splits]:
        commits = engine.versions(self.query)
        pinned = self.query.pin(commits)
        if extra_filter is not None:   # kept with the version, so that reading it again filters alike
            fields["extra_filter"] = _stored_filter(self.query, extra_filter)
        rows = training.splits(self, pinned, split, start_time, end_time, read_options, extra_filter,
                               dataframe_type)
        sizes = rows.sizes()
        if self._transformations and not sizes["train"] and any(sizes.values()):
            raise FeatureStoreError(f"feature view {self.key!r}: the split left no rows in the training split "
                                    f"({', '.join(f'{n} {count}' for n, count in sizes.items())} rows), so its "
                                    "transformation functions have nothing to be fitted on: give a smaller "
                                    "test/validation size, another seed, or more rows")
        fitted = rows.fit(self._transformations)
        record = {"commits": commits, "split": split, "start_time": _stored_time(start_time),
                  "end_time": _stored_time(end_time), "description": description,
                  "created": dt.datetime.now(dt.timezone.utc).isoformat(),
                  "transformation_functions": [f.to_dict() for f in fitted], "labels": self.labels,
                  "rows": sizes, **fields}
        version = self.store.save_training_dataset(self, record)
        self._last_accessed = version
        transformed = rows.transformed(fitted)
        if "dataset" not in fields:   # taken in memory: its statistics and the run's lineage (in_memory.py)
            in_memory.record_statistics(self, version, transformed)
            in_memory.note_read(self, version, list(sizes))
        return version, transformed

    def _read_version(self, version: int, read_options: dict[str, Any] | None, dataframe_type: str = "default"
                      ) -> training.Splits:
        record = self.store.read_training_dataset(self, version)
        pinned = self.query.pin({k: int(v) for k, v in record["commits"].items()})
        extra_filter = _loaded_filter(self.store, record["extra_filter"]) if record.get("extra_filter") else None
        rows = training.splits(self, pinned, record["split"], record.get("start_time"), record.get("end_time"),
                               read_options, extra_filter, dataframe_type)
        self._last_accessed = version
        in_memory.note_read(self, version, list(rows.sizes()))
        return rows.transformed(self._fitted(version))

    def _training_dataset_record(self, version: int) -> dict[str, Any]:
        return self.store.read_training_dataset(self, version)

    def _fitted(self, version: int) -> list[TransformationFunction]:
        record = self.store.read_training_dataset(self, version)
        return [TransformationFunction.from_dict(f) for f in record.get("transformation_functions", [])]

    def _visible(self, frame: pd.DataFrame, primary_key: bool, event_time: bool, helpers: Sequence[str] = ()
                 ) -> pd.DataFrame:
        """`frame` as hsfs returns it (see `_shown`)."""
        dropped, renamed = self._shown(frame.columns, primary_key, event_time, helpers)
        return frame.drop(columns=dropped).rename(columns=renamed)

    def _shown(self, columns: Sequence[str], primary_key: bool, event_time: bool, helpers: Sequence[str] = ()
               ) -> tuple[list[str], dict[str, str]]:
        """The columns to drop and to rename so that a frame of `columns` is as hsfs returns it: the view's selected
        features always (a primary key or event time the query selects is a feature); the left group's key and
        event time that it does not select only when `primary_key` / `event_time` ask, named
        `<project>_<group>_<version>_<column>` as hsfs names them; helper columns other than `helpers` left out."""
        left = self.query.left
        renamed, dropped = {}, [c for c in self.helper_columns if c not in helpers and c in columns]
        for column in left.keys():
            hidden = _HIDDEN + column
            if hidden not in columns:
                continue
            if primary_key and column in left.primary_key or event_time and column == left.event_time:
                renamed[hidden] = qualified_name(self.store.project, left, column)
            else:
                dropped.append(hidden)
        dropped += [c for c in columns if c.startswith(_HIDDEN) and c not in renamed and c not in dropped]
        return dropped, renamed

    def _shaped(self, rows: training.Splits, name: str, primary_key: bool, event_time: bool, dataframe_type: str,
                training_helpers: bool = False) -> tuple[Any, Any]:
        shown = self._showing(rows, primary_key, event_time, training_helpers)
        features, labels = shown.out(name, self._label_columns(shown.columns), dataframe_type)
        return as_type(features, dataframe_type), (None if labels is None else as_type(labels, dataframe_type))

    def _showing(self, rows: training.Splits, primary_key: bool, event_time: bool, training_helpers: bool
                 ) -> training.Splits:
        helpers = self.training_helper_columns if training_helpers else ()
        return rows.shown(*self._shown(rows.columns, primary_key, event_time, helpers))

    def _split_out(self, rows: training.Splits, names: Sequence[str], primary_key: bool, event_time: bool,
                   dataframe_type: str, training_helpers: bool = False) -> tuple[Any, ...]:
        shaped = [self._shaped(rows, name, primary_key, event_time, dataframe_type, training_helpers)
                  for name in names]
        return (*[x for x, _ in shaped], *[y for _, y in shaped])


def _flag(primary_key: bool, kwargs: dict[str, object]) -> bool:
    """`primary_key=`, or hsfs's other spelling `primary_keys=` (its methods take both)."""
    return bool(primary_key or kwargs.get("primary_keys"))


def _stored_filter(query: Query, condition: Condition) -> dict[str, Any]:
    """An extra filter as a training dataset record keeps it (the query's own filter form)."""
    from hopsml.featurestore.query import Filter, Logic, to_dict

    if not isinstance(condition, (Filter, Logic)):
        raise FeatureStoreError("extra_filter takes a condition such as fg.amount > 10 (or a & | of them)")
    return dict(to_dict(dataclasses.replace(query, joins=(), filters=(condition,)))["filters"][0])


def _loaded_filter(store: StoreRef, stored: dict[str, Any]) -> Condition:
    from hopsml.featurestore.query import from_dict

    first = stored
    while "logic" in first:
        first = first["left"]
    record = {"group": first["group"], "features": [], "filters": [stored]}
    return from_dict(record, store._group_by_key).filters[0]


def _stored_time(value: When) -> int | None:
    return None if value in (None, "") else wallclock_ms(value)


def _split_spec(ranges: dict[str, tuple[When, When]], sizes: dict[str, float | None], seed: int | None
                ) -> dict[str, Any]:
    timed = {name: (start, end) for name, (start, end) in ranges.items() if start not in (None, "") or
             end not in (None, "")}
    if timed:
        if any(size is not None for size in sizes.values()):
            raise FeatureStoreError("split either by size (test_size=...) or by time ranges, not both")
        missing = [name for name in ranges if name not in timed]
        if missing:
            raise FeatureStoreError(f"a time split needs a range for every split; {missing[0]} has none "
                                    f"({missing[0]}_start, {missing[0]}_end)")
        return {"type": "time", "ranges": {n: [_stored_time(s), _stored_time(e)] for n, (s, e) in timed.items()}}
    for name, size in sizes.items():
        if size is None or not 0 < float(size) < 1:
            raise FeatureStoreError(f"{name}_size={size!r}: give a fraction between 0 and 1 (e.g. 0.2)")
    if sum(float(s) for s in sizes.values() if s is not None) >= 1:
        raise FeatureStoreError(f"the split sizes {sizes} leave nothing to train on")
    return {"type": "random", "sizes": {n: float(s) for n, s in sizes.items() if s is not None},
            "seed": int(seed) if seed is not None else random.SystemRandom().randrange(2**31)}


def _vector_as(frame: pd.DataFrame, return_type: str, single: bool) -> Any:
    """Vectors as hsfs returns them: 'list' (values, or a list of them), 'pandas', 'polars' or 'numpy'."""
    kind = return_type.lower()
    if kind == "list":
        rows = frame.astype(object).where(frame.notna(), None).values.tolist()
        return rows[0] if single else rows
    if kind == "numpy":   # a one-hot's booleans as 0/1, so numbers beside them give a numeric array, not objects
        array = frame.astype({c: "int64" for c in frame.columns if frame[c].dtype == bool}).to_numpy()
        return array[0] if single else array
    if kind in ("pandas", "polars"):
        return as_type(frame, kind)
    raise FeatureStoreError(f"return_type {return_type!r}: 'list', 'pandas', 'polars' or 'numpy'")
