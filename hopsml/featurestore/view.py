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
from hopsml.featurestore import engine, in_memory, vectors
from hopsml.featurestore.query import Query
from hopsml.featurestore.table import wallclock_ms
from hopsml.featurestore.transformations import TransformationFunction, apply_all, row_steps

if TYPE_CHECKING:
    import pandas as pd

SPLITS = ("train", "validation", "test")


class FeatureView:
    """One version of a feature view (see the module docstring)."""

    def __init__(self, store: Any, name: str, version: int, query: Query, labels: Sequence[str] = (),
                 transformation_functions: Sequence[TransformationFunction] = (), description: str = "",
                 created: str | None = None, logging: dict[str, Any] | None = None,
                 inference_helper_columns: Sequence[str] = (), training_helper_columns: Sequence[str] = ()) -> None:
        self.store, self.name, self.version = store, layout.validate_name(name, "feature view name"), int(version)
        self.query, self.description, self.created = query, description, created
        self._logging = {"enabled": False, "paused": False, **(logging or {})}
        self.labels = [label.lower() for label in labels]
        self._transformations = list(transformation_functions)
        self._scoring: int | None = None
        self._serving: int | None = None
        self._serving_fitted: tuple[int, list[TransformationFunction], Any] | None = None  # per serving version
        self._vector_plan: Any = None   # vectors.Plan, made on the first feature vector
        self._helper_plan: Any = None   # the one of the inference helper columns
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

    def to_dict(self) -> dict[str, Any]:
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
        return self.query

    # --- training data ----------------------------------------------------------------------------------
    def training_data(self, start_time: Any = None, end_time: Any = None, description: str = "",
                      read_options: dict[str, Any] | None = None, primary_key: bool = False,
                      event_time: bool = False, dataframe_type: str = "default",
                      training_helper_columns: bool = False, **_: Any
                      ) -> tuple[pd.DataFrame, pd.DataFrame | None]:
        """(features, labels) of the whole window, as a new training dataset version."""
        frames = self._new_version({"type": "none"}, start_time, end_time, description, read_options)[1]
        return self._shaped(frames["train"], primary_key, event_time, dataframe_type, training_helper_columns)

    def train_test_split(self, test_size: float | None = None, train_start: Any = "", train_end: Any = "",
                         test_start: Any = "", test_end: Any = "", description: str = "", seed: int | None = None,
                         read_options: dict[str, Any] | None = None, primary_key: bool = False,
                         event_time: bool = False, dataframe_type: str = "default",
                         training_helper_columns: bool = False, **_: Any) -> tuple[Any, ...]:
        """X_train, X_test, y_train, y_test: split at random (`test_size`, `seed`) or by event time ranges."""
        split = _split_spec({"train": (train_start, train_end), "test": (test_start, test_end)},
                            {"test": test_size}, seed)
        frames = self._new_version(split, None, None, description, read_options)[1]
        return self._split_out(frames, ("train", "test"), primary_key, event_time, dataframe_type,
                               training_helper_columns)

    def train_validation_test_split(self, validation_size: float | None = None, test_size: float | None = None,
                                    train_start: Any = "", train_end: Any = "", validation_start: Any = "",
                                    validation_end: Any = "", test_start: Any = "", test_end: Any = "",
                                    description: str = "", seed: int | None = None,
                                    read_options: dict[str, Any] | None = None, primary_key: bool = False,
                                    event_time: bool = False, dataframe_type: str = "default",
                                    training_helper_columns: bool = False, **_: Any) -> tuple[Any, ...]:
        """X_train, X_val, X_test, y_train, y_val, y_test."""
        split = _split_spec({"train": (train_start, train_end), "validation": (validation_start, validation_end),
                             "test": (test_start, test_end)}, {"validation": validation_size, "test": test_size}, seed)
        frames = self._new_version(split, None, None, description, read_options)[1]
        return self._split_out(frames, ("train", "validation", "test"), primary_key, event_time, dataframe_type,
                               training_helper_columns)

    def get_training_data(self, training_dataset_version: int, read_options: dict[str, Any] | None = None,
                          primary_key: bool = False, event_time: bool = False, dataframe_type: str = "default",
                          training_helper_columns: bool = False, **_: Any) -> tuple[Any, Any]:
        frames = self._read_version(training_dataset_version, read_options)
        return self._shaped(frames["train"], primary_key, event_time, dataframe_type, training_helper_columns)

    def get_train_test_split(self, training_dataset_version: int, read_options: dict[str, Any] | None = None,
                             primary_key: bool = False, event_time: bool = False, dataframe_type: str = "default",
                             training_helper_columns: bool = False, **_: Any) -> tuple[Any, ...]:
        frames = self._read_version(training_dataset_version, read_options)
        return self._split_out(frames, ("train", "test"), primary_key, event_time, dataframe_type,
                               training_helper_columns)

    def get_train_validation_test_split(self, training_dataset_version: int,
                                        read_options: dict[str, Any] | None = None, primary_key: bool = False,
                                        event_time: bool = False, dataframe_type: str = "default",
                                        training_helper_columns: bool = False, **_: Any) -> tuple[Any, ...]:
        frames = self._read_version(training_dataset_version, read_options)
        return self._split_out(frames, ("train", "validation", "test"), primary_key, event_time, dataframe_type,
                               training_helper_columns)

    def get_training_datasets(self) -> list[dict[str, Any]]:
        return [self.store.read_training_dataset(self, v) for v in self.store.training_dataset_versions(self)]

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

    def get_batch_data(self, start_time: Any = None, end_time: Any = None, read_options: dict[str, Any] | None = None,
                       primary_key: bool = False, event_time: bool = False, transformed: bool = True,
                       dataframe_type: str = "default", inference_helpers: bool = False, **_: Any) -> Any:
        """The view's features (no labels) for the window, transformed as its training data was; with its
        inference helper columns when `inference_helpers`."""
        frame = self._rows(self.query, start_time, end_time, read_options)
        if transformed and self._transformations:
            if self._scoring is None:
                self.init_batch_scoring()
            for function in self._fitted(self._scoring or 0):
                frame = function.apply(frame)
        frame = frame.drop(columns=[c for c in self.labels if c in frame.columns])
        kept = self.inference_helper_columns if inference_helpers else ()
        return _as(self._visible(frame, primary_key, event_time, kept), dataframe_type)

    def delete(self) -> None:
        self.store.delete_view(self)

    # --- what is not here yet: a clear error instead of an AttributeError ------------------------------
    def _not_yet(self, what: str, instead: str) -> FeatureStoreError:
        return FeatureStoreError(f"feature view {self.key!r}: {what} is not in hopsml yet; {instead}")

    def create_training_data(self, start_time: Any = None, end_time: Any = None, description: str = "",
                             read_options: dict[str, Any] | None = None, primary_key: bool = False,
                             event_time: bool = False, shards: int | None = None,
                             training_helper_columns: bool = False, **_: Any) -> tuple[int, None]:
        """Write the training data out as a prepared dataset (`materialize.py`); returns (version, None: no job)."""
        return self._materialized({"type": "none"}, start_time, end_time, description, read_options, primary_key,
                                  event_time, shards, training_helper_columns)

    def create_train_test_split(self, test_size: float | None = None, train_start: Any = "", train_end: Any = "",
                                test_start: Any = "", test_end: Any = "", description: str = "",
                                seed: int | None = None, read_options: dict[str, Any] | None = None,
                                primary_key: bool = False, event_time: bool = False, shards: int | None = None,
                                training_helper_columns: bool = False, **_: Any) -> tuple[int, None]:
        """train_test_split's rows written out as a prepared dataset with splits 'train' and 'test'."""
        split = _split_spec({"train": (train_start, train_end), "test": (test_start, test_end)},
                            {"test": test_size}, seed)
        return self._materialized(split, None, None, description, read_options, primary_key, event_time, shards,
                                  training_helper_columns)

    def create_train_validation_test_split(self, validation_size: float | None = None,
                                           test_size: float | None = None, description: str = "",
                                           seed: int | None = None, read_options: dict[str, Any] | None = None,
                                           primary_key: bool = False, event_time: bool = False,
                                           shards: int | None = None, training_helper_columns: bool = False,
                                           **_: Any) -> tuple[int, None]:
        split = _split_spec({"train": ("", ""), "validation": ("", ""), "test": ("", "")},
                            {"validation": validation_size, "test": test_size}, seed)
        return self._materialized(split, None, None, description, read_options, primary_key, event_time, shards,
                                  training_helper_columns)

    def training_dataset_name(self, training_dataset_version: int) -> str:
        """The prepared dataset a created training dataset version was written to (`hopsml.data.reader(name)`)."""
        record = self.store.read_training_dataset(self, training_dataset_version)
        if not record.get("dataset"):
            raise FeatureStoreError(f"training dataset version {training_dataset_version} of {self.key!r} was not "
                                    "written out (it came from train_test_split or training_data); create one with "
                                    "create_training_data or create_train_test_split")
        return str(record["dataset"])

    def _materialized(self, split: dict[str, Any], start_time: Any, end_time: Any, description: str,
                      read_options: dict[str, Any] | None, primary_key: bool, event_time: bool,
                      shards: int | None, training_helpers: bool) -> tuple[int, None]:
        from hopsml.featurestore import materialize

        upcoming = (self.store.training_dataset_versions(self) or [0])[-1] + 1
        name = materialize.dataset_name(self.name, self.version, upcoming)
        version, frames = self._new_version(split, start_time, end_time, description, read_options, dataset=name)
        if version != upcoming:  # another process took that number: the dataset's name follows the version
            name = materialize.dataset_name(self.name, self.version, version)
            self.store.update_training_dataset(self, version, dataset=name)
        helpers = self.training_helper_columns if training_helpers else ()
        visible = {n: self._visible(frame, primary_key, event_time, helpers) for n, frame in frames.items()}
        left = self.query.left
        keys = [k for k in left.keys() if any(k in frame.columns for frame in visible.values())]
        materialize.write(self.store.storage, self.store.project, name, visible, self._label_columns(visible),
                          keys, shards or max(1, self.store.settings.num_workers), f"feature view {self.key}, "
                          f"training dataset version {version}")
        return version, None

    def _label_columns(self, frames: dict[str, pd.DataFrame]) -> list[str]:
        columns = next(iter(frames.values())).columns
        return [c for c in columns if c in self.labels or any(c.startswith(f"{t.name}_{label}_")
                                                              for t in self._transformations for label in self.labels)]

    # --- serving: feature vectors from the online store (vectors.py) -----------------------------------
    def init_serving(self, training_dataset_version: int | None = None, **_: Any) -> None:
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
                           **_: Any) -> Any:
        """One entry's feature vector (see vectors.py): the features the model was trained on, in order."""
        return self._vectors([entry], [passed_features or {}], allow_missing, transform, return_type, single=True)

    def get_feature_vectors(self, entry: list[dict[str, Any]], passed_features: list[dict[str, Any]] | None = None,
                            return_type: str = "list", allow_missing: bool = False, transform: bool = True,
                            **_: Any) -> Any:
        """Several entries' vectors, one lookup per group for all of them."""
        return self._vectors(entry, passed_features, allow_missing, transform, return_type, single=False)

    def get_inference_helper(self, entry: dict[str, Any], return_type: str = "pandas", **_: Any) -> Any:
        """One entry's inference helper columns from the online store: a one-row frame, or a dict."""
        return self._helpers([entry], return_type, single=True)

    def get_inference_helpers(self, entry: list[dict[str, Any]], return_type: str = "pandas", **_: Any) -> Any:
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

        return _as(pd.DataFrame(rows, columns=plan.wanted), return_type)

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

    def transform(self, feature_vector: Any, **_: Any) -> Any:
        """Untransformed features (a DataFrame) transformed as the batch-scoring training dataset version's
        training split was (the newest version when none is set)."""
        import pandas as pd

        if self._transformations and self._scoring is None:
            self.init_batch_scoring()
        frame = feature_vector if isinstance(feature_vector, pd.DataFrame) else pd.DataFrame(feature_vector)
        return apply_all(frame, self.transformation_functions)

    # --- feature logging (feature_log.py) ---------------------------------------------------------------
    @property
    def logging_enabled(self) -> bool:
        return bool(self._logging["enabled"])

    def enable_logging(self, **_: Any) -> None:
        self._set_logging(enabled=True)

    def pause_logging(self) -> None:
        """Stop log() from committing its buffer by itself (materialize_log() still does)."""
        self._set_logging(paused=True)

    def resume_logging(self) -> None:
        self._set_logging(paused=False)

    def log(self, logging_data: Any = None, untransformed_features: Any = None, predictions: Any = None,
            transformed_features: Any = None, write_options: dict[str, Any] | None = None,
            training_dataset_version: int | None = None, model: Any = None, **_: Any) -> int:
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

    def read_log(self, start_time: Any = None, end_time: Any = None, filter: Any = None,  # noqa: A002 (hsfs's name)
                 transformed: bool = False, training_dataset_version: int | None = None, model: Any = None,
                 **_: Any) -> pd.DataFrame:
        """The committed log rows (materialize_log() commits the newest), by log time, training dataset version,
        model (an hsml model) or a filter on a feature."""
        from hopsml.featurestore.feature_log import FeatureLog

        model_id = (str(model.name), int(model.version)) if model is not None else None
        return FeatureLog(self).read(start_time, end_time, filter, transformed, training_dataset_version, model_id)

    def get_log_timeline(self, limit: int | None = None, **_: Any) -> list[dict[str, Any]]:
        from hopsml.featurestore.feature_log import FeatureLog

        return FeatureLog(self).timeline(limit)

    def delete_log(self, transformed: bool | None = None) -> None:
        from hopsml.featurestore.feature_log import FeatureLog

        FeatureLog(self).delete()

    def _set_logging(self, **state: bool) -> None:
        self._logging.update(state)
        self.store.save_view(self)

    # --- inside ---------------------------------------------------------------------------------------
    def _rows(self, query: Query, start_time: Any, end_time: Any, read_options: dict[str, Any] | None
              ) -> pd.DataFrame:
        left = self.query.left
        if left.event_time:
            if start_time not in (None, ""):
                query = query.filter(left.get_feature(left.event_time) >= _utc(start_time))
            if end_time not in (None, ""):
                query = query.filter(left.get_feature(left.event_time) < _utc(end_time))
        elif start_time not in (None, "") or end_time not in (None, ""):
            raise FeatureStoreError(f"feature view {self.key!r}: a time window needs an event time on the left group "
                                    f"{left.key!r}")
        kept = list(query.features)
        extra = [k for k in left.keys() if k not in kept]
        frame = engine.run(dataclasses.replace(query, features=tuple([*kept, *extra])), read_options=read_options)
        frame = frame.sort_values(left.keys(), kind="stable").reset_index(drop=True)
        return frame.drop(columns=extra)

    def _new_version(self, split: dict[str, Any], start_time: Any, end_time: Any, description: str,
                     read_options: dict[str, Any] | None, **fields: Any) -> tuple[int, dict[str, pd.DataFrame]]:
        commits = engine.versions(self.query)
        pinned = self.query.pin(commits)
        frames = _split(self._rows(pinned, start_time, end_time, read_options), split, self.query)
        fitted = [f.fit(frames["train"]) for f in self._transformations]
        record = {"commits": commits, "split": split, "start_time": _stored_time(start_time),
                  "end_time": _stored_time(end_time), "description": description,
                  "created": dt.datetime.now(dt.timezone.utc).isoformat(),
                  "transformation_functions": [f.to_dict() for f in fitted], "labels": self.labels,
                  "rows": {name: int(len(frame)) for name, frame in frames.items()}, **fields}
        version = self.store.save_training_dataset(self, record)
        transformed = {name: apply_all(frame, fitted) for name, frame in frames.items()}
        if "dataset" not in fields:   # taken in memory: its statistics and the run's lineage (in_memory.py)
            in_memory.record_statistics(self, version, transformed)
            in_memory.note_read(self, version, list(transformed))
        return version, transformed

    def _read_version(self, version: int, read_options: dict[str, Any] | None) -> dict[str, pd.DataFrame]:
        record = self.store.read_training_dataset(self, version)
        pinned = self.query.pin({k: int(v) for k, v in record["commits"].items()})
        frames = _split(self._rows(pinned, record.get("start_time"), record.get("end_time"), read_options),
                        record["split"], self.query)
        fitted = self._fitted(version)
        in_memory.note_read(self, version, list(frames))
        return {name: apply_all(frame, fitted) for name, frame in frames.items()}

    def _fitted(self, version: int) -> list[TransformationFunction]:
        record = self.store.read_training_dataset(self, version)
        return [TransformationFunction.from_dict(f) for f in record.get("transformation_functions", [])]

    def _visible(self, frame: pd.DataFrame, primary_key: bool, event_time: bool, helpers: Sequence[str] = ()
                 ) -> pd.DataFrame:
        """`frame` without what the caller did not ask for: the left group's key and event time, and the helper
        columns other than `helpers`."""
        left = self.query.left
        hidden = {*([] if primary_key else left.primary_key), *([] if event_time or not left.event_time
                                                                 else [left.event_time]),
                  *[c for c in self.helper_columns if c not in helpers]}
        if event_time and left.event_time:
            hidden.discard(left.event_time)  # asked for, even when it is part of the key
        return frame.drop(columns=[c for c in frame.columns if c in hidden and c not in self.labels])

    def _shaped(self, frame: pd.DataFrame, primary_key: bool, event_time: bool, dataframe_type: str,
                training_helpers: bool = False) -> tuple[Any, Any]:
        frame = self._visible(frame, primary_key, event_time, self.training_helper_columns if training_helpers else ())
        labels = self._label_columns({"": frame})
        features = frame.drop(columns=labels)
        return _as(features, dataframe_type), (_as(frame[labels], dataframe_type) if labels else None)

    def _split_out(self, frames: dict[str, pd.DataFrame], names: Sequence[str], primary_key: bool, event_time: bool,
                   dataframe_type: str, training_helpers: bool = False) -> tuple[Any, ...]:
        shaped = [self._shaped(frames[name], primary_key, event_time, dataframe_type, training_helpers)
                  for name in names]
        return (*[x for x, _ in shaped], *[y for _, y in shaped])


def _utc(value: Any) -> dt.datetime:
    return dt.datetime.fromtimestamp(wallclock_ms(value) / 1000, dt.timezone.utc)


def _stored_time(value: Any) -> int | None:
    return None if value in (None, "") else wallclock_ms(value)


def _split_spec(ranges: dict[str, tuple[Any, Any]], sizes: dict[str, float | None], seed: int | None
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


def _split(frame: pd.DataFrame, split: dict[str, Any], query: Query) -> dict[str, pd.DataFrame]:
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
    event_time = query.left.event_time
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
        return _as(frame, kind)
    raise FeatureStoreError(f"return_type {return_type!r}: 'list', 'pandas', 'polars' or 'numpy'")


def _as(frame: pd.DataFrame, dataframe_type: str) -> Any:
    kind = dataframe_type.lower()
    if kind in ("default", "pandas"):
        return frame
    if kind == "polars":
        import polars as pl

        return pl.from_pandas(frame)
    if kind in ("numpy", "python"):
        return frame.to_numpy() if kind == "numpy" else frame.values.tolist()
    raise FeatureStoreError(f"dataframe_type {dataframe_type!r}: 'default', 'pandas', 'polars', 'numpy' or 'python'")
