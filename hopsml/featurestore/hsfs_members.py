"""hsfs members of the feature store's classes that sit on top of what they already do: mixed into FeatureStore,
FeatureGroup, FeatureView and Query, so that the classes' own modules keep their logic and this file keeps the
SDK's extra names (`fs.sql`, `fg.statistics`, `fv.schema`, `fv.add_tag`, `query.pull_changes`, ...) and the
members hopsml refuses by name (absent.py)."""

from __future__ import annotations

import json
import logging
import zlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from hopsml import layout
from hopsml.errors import FeatureStoreError
from hopsml.featurestore.absent import refusal, refused_property
from hopsml.featurestore.frames import to_arrow
from hopsml.featurestore.seams import Frame, ProjectStore, SourcedColumns, When

if TYPE_CHECKING:
    import pyarrow as pa

    from hopsml.featurestore.transformations import TransformationFunction
    from hopsml.fs import Storage

log = logging.getLogger(__name__)

_COMPLEX = ("list<", "large_list<", "fixed_size_list<", "struct<", "map<")


def stable_id(*names: object) -> int:
    """A positive id that is the same in every process for the same names (hsfs' objects have numeric ids)."""
    return zlib.crc32("/".join(str(n) for n in names).encode()) & 0x7FFFFFFF


# --- statistics as hsfs shows them ------------------------------------------------------------------------------
@dataclass
class FeatureDescriptiveStatistics:
    """One feature's statistics under hsfs' names."""

    feature_name: str
    feature_type: str | None = None
    count: int | None = None
    num_null_values: int | None = None
    min: object = None
    max: object = None
    mean: float | None = None
    stddev: float | None = None
    approx_num_distinct_values: int | None = None
    extended_statistics: dict[str, Any] = field(default_factory=dict)


@dataclass
class Statistics:
    """What `fg.statistics` returns: the newest commit's statistics, one entry per feature."""

    commit: int | None
    computation_time: str | None
    row_count: int | None
    feature_descriptive_statistics: list[FeatureDescriptiveStatistics]

    @classmethod
    def of(cls, record: dict[str, Any]) -> Statistics:
        features = []
        for name, summary in (record.get("columns") or {}).items():
            kind = summary.get("kind")
            extended = {k: v for k, v in summary.items() if k in ("histogram", "top")}
            features.append(FeatureDescriptiveStatistics(
                name, {"numeric": "Fractional", "categorical": "String", "time": "Timestamp"}.get(kind, kind),
                summary.get("count"), summary.get("missing"), summary.get("min"), summary.get("max"),
                summary.get("mean"), summary.get("std"), summary.get("distinct"), extended))
        return cls(record.get("commit"), record.get("committed_on"), record.get("rows"), features)


# --- a view's schema ----------------------------------------------------------------------------------------------
@dataclass
class TrainingDatasetFeature:
    """A feature of a view or of its training data, as hsfs' `fv.schema` lists them."""

    name: str
    type: str | None = None
    label: bool = False
    feature_group_name: str | None = None
    index: int = 0


class StoreMembers:
    """hsfs' FeatureStore members beyond hopsml's own (mixed into FeatureStore)."""

    project: str
    storage: Storage

    @property
    def id(self) -> int:
        """A number standing for the project's feature store (the same in every process)."""
        return stable_id(self.project, "featurestore")

    def sql(self, query: str, dataframe_type: str = "default", online: bool = False,
            read_options: dict[str, Any] | None = None) -> Any:
        """Run SQL over the feature groups' newest versions, each a table named `<name>_<version>` as in
        Hopsworks' offline store (`SELECT * FROM transactions_1 WHERE amount > 10`), by DuckDB."""
        import duckdb

        if online:
            raise FeatureStoreError("fs.sql(online=True): the online store holds the newest row per key of each "
                                    "group; read it with fg.read(online=True) or a feature view's feature vectors")
        connection = duckdb.connect()
        try:
            connection.execute("SET TimeZone = 'UTC'")
            for name, version in self.group_names():   # type: ignore[attr-defined]
                group = self.get_feature_group(name, version)   # type: ignore[attr-defined]
                if group.table.exists():
                    connection.register(f"{name}_{version}", group.table.dataset())
            relation = connection.sql(query)
            if relation is None:
                return None
            fetch: Any = getattr(relation, "to_arrow_table", None) or relation.arrow
            return _frame(fetch(), dataframe_type)
        except duckdb.Error as exc:
            raise FeatureStoreError(f"fs.sql: {exc} (tables are the feature groups' '<name>_<version>': "
                                    f"{', '.join(f'{n}_{v}' for n, v in self.group_names()) or 'none yet'})"  # type: ignore
                                    ) from exc
        finally:
            connection.close()

    def create_transformation_function(self, transformation_function: object, version: int | None = None
                                       ) -> TransformationFunction:
        """A transformation function from a @udf, kept in the feature store by its `save()` so that
        `get_transformation_function(name, version)` finds it (its code is found again by module and name)."""
        from hopsml.featurestore.transformations import TransformationFunction

        if not isinstance(transformation_function, TransformationFunction):
            raise FeatureStoreError("create_transformation_function takes a function decorated with @udf(...), not "
                                    f"{type(transformation_function).__name__}")
        return transformation_function.saved_in(self, version)

    def saved_transformation_function(self, name: str, version: int | None) -> TransformationFunction | None:
        """The transformation function saved under `name` (its newest version, or `version`), or None."""
        from hopsml.featurestore.transformations import TransformationFunction

        folder = layout.join(layout.feature_store_dir(self.project), layout.TRANSFORMATION_FUNCTIONS)
        if not self.storage.exists(folder):
            return None
        found = sorted(int(e.name[len(name) + 1:-5]) for e in self.storage.walk(folder, recursive=False)
                       if e.name.startswith(name + "_") and e.name.endswith(".json")
                       and e.name[len(name) + 1:-5].isdigit())
        wanted = version if version is not None else (found[-1] if found else None)
        if wanted is None or int(wanted) not in found:
            return None
        record = self.storage.read_json(layout.join(folder, f"{name}_{int(wanted)}.json"))
        return TransformationFunction.from_dict(record["function"]).saved_in(self, int(wanted))

    create_external_feature_group = refusal("FeatureStore.create_external_feature_group")
    get_external_feature_group = refusal("FeatureStore.get_external_feature_group")
    get_storage_connector = refusal("FeatureStore.get_storage_connector")


class GroupMembers:
    """hsfs' FeatureGroup members beyond hopsml's own (mixed into FeatureGroup)."""

    store: ProjectStore
    _parts: list[Frame] | None = None

    @property
    def feature_store(self) -> ProjectStore:
        return self.store

    @property
    def statistics(self) -> Statistics:
        """The statistics of the newest commit (`get_statistics()` as hsfs' Statistics object)."""
        return Statistics.of(self.get_statistics())   # type: ignore[attr-defined]

    @property
    def embedding_index(self) -> None:
        """None: hopsml's groups have no embedding index (hsfs gives None for a group without one)."""
        return None

    def json(self) -> str:
        """The group's definition as JSON text (hsfs' `fg.json()`)."""
        return json.dumps(self.to_dict())   # type: ignore[attr-defined]

    def get_complex_features(self) -> list[str]:
        """The names of the features that hold lists, structs or maps."""
        return [f["name"] for f in self.to_dict().get("features", [])   # type: ignore[attr-defined]
                if str(f.get("type", "")).startswith(_COMPLEX)]

    def multi_part_insert(self, features: Frame | None = None, overwrite: bool = False, operation: str = "upsert",
                          storage: str | None = None, write_options: dict[str, Any] | None = None,
                          validation_options: dict[str, Any] | None = None, transform: bool = True,
                          transformation_context: object = None) -> tuple[None, None] | GroupMembers:
        """Collect `features` for one insert done by `finalize_multi_part_insert()` (hsfs streams the parts to
        Kafka; here they are kept in memory and committed once). Without `features`, the group itself, on which
        further `multi_part_insert(df)` calls collect."""
        if features is None:
            return self
        if overwrite or operation != "upsert" or storage not in (None, "offline", "online"):
            raise FeatureStoreError("multi_part_insert collects parts for one upsert; for overwrite=True or "
                                    "another operation, call insert(df, ...) with the whole frame")
        self._parts = [*(self._parts or []), features]
        return None, None

    def finalize_multi_part_insert(self) -> Any:
        """Insert the parts collected by multi_part_insert as one commit."""
        import pandas as pd

        parts, self._parts = self._parts or [], None
        if not parts:
            raise FeatureStoreError(f"feature group {self.key!r}: no parts to insert; "   # type: ignore[attr-defined]
                                    "call multi_part_insert(df) first")
        whole = [p if isinstance(p, pd.DataFrame) else to_arrow(p).to_pandas() for p in parts]
        return self.insert(pd.concat(whole, ignore_index=True))   # type: ignore[attr-defined]

    create_feature_monitoring = refusal("FeatureGroup.create_feature_monitoring")
    create_statistics_monitoring = refusal("FeatureGroup.create_statistics_monitoring")
    get_feature_monitoring_configs = refusal("FeatureGroup.get_feature_monitoring_configs")
    find_neighbors = refusal("FeatureGroup.find_neighbors")
    insert_stream = refusal("FeatureGroup.insert_stream")
    get_latest_online_ingestion = refusal("FeatureGroup.get_latest_online_ingestion")
    get_online_ingestion = refusal("FeatureGroup.get_online_ingestion")
    subject = refused_property("FeatureGroup.subject")
    materialization_job = refused_property("FeatureGroup.materialization_job")


class ViewMembers:
    """hsfs' FeatureView members beyond hopsml's own (mixed into FeatureView)."""

    store: ProjectStore
    name: str
    version: int
    labels: list[str]
    query: SourcedColumns

    @property
    def schema(self) -> list[TrainingDatasetFeature]:
        """The view's features (labels marked), each with its type and group, in the query's order."""
        out = []
        for index, (name, group, column) in enumerate(self.query.column_sources()):
            types = {f["name"]: f.get("type") for f in group.to_dict().get("features", [])}
            out.append(TrainingDatasetFeature(name, types.get(column), name in self.labels, group.name, index))
        return out

    def get_training_dataset_schema(self, training_dataset_version: int | None = None
                                    ) -> list[TrainingDatasetFeature]:
        """The columns of the view's training data as the model gets them (transformed): from the training
        dataset `training_dataset_version` when given, else from the view's own schema and functions."""
        if training_dataset_version is None:
            features = [f for f in self.schema]
            for function in self.transformation_functions:   # type: ignore[attr-defined]
                dropped = set(function.drop)
                features = [f for f in features if f.name not in dropped]
                features += [TrainingDatasetFeature(n, None, False, None) for n in function.output_column_names]
            return [TrainingDatasetFeature(f.name, f.type, f.label, f.feature_group_name, i)
                    for i, f in enumerate(features)]
        features, labels = self.get_training_data(training_dataset_version)   # type: ignore[attr-defined]
        columns = [(str(c), str(t), False) for c, t in features.dtypes.items()]
        if labels is not None:
            frame = labels.to_frame() if hasattr(labels, "to_frame") else labels
            columns += [(str(c), str(t), True) for c, t in frame.dtypes.items()]
        return [TrainingDatasetFeature(n, t, lab, None, i) for i, (n, t, lab) in enumerate(columns)]

    # --- tags: small JSON values kept beside the view's record --------------------------------------------------
    def _training_dataset_record(self, version: int) -> dict[str, Any]:
        """The record of training dataset `version`; refused when the view has none (FeatureView reads it)."""
        raise NotImplementedError

    def _tags_path(self) -> str:
        return layout.join(layout.feature_view_dir(self.store.project, self.name, self.version), layout.VIEW_TAGS)

    def _tags(self) -> dict[str, Any]:
        path = self._tags_path()
        return dict(self.store.storage.read_json(path)) if self.store.storage.exists(path) else {}

    def _save_tags(self, tags: dict[str, Any]) -> None:
        self.store.storage.write_json(self._tags_path(), tags)

    def add_tag(self, name: str, value: object) -> None:
        """Attach the tag `name` (any JSON value) to the view; an existing tag of that name is replaced."""
        tags = self._tags()
        tags.setdefault("view", {})[_tag_name(name)] = _tag_value(name, value)
        self._save_tags(tags)

    def get_tag(self, name: str) -> Any:
        """The value of the view's tag `name`, None when it has none."""
        return self._tags().get("view", {}).get(name)

    def get_tags(self) -> dict[str, Any]:
        """The view's tags, name -> value."""
        return dict(self._tags().get("view", {}))

    def delete_tag(self, name: str) -> None:
        """Remove the view's tag `name` (nothing happens if it has none)."""
        tags = self._tags()
        tags.get("view", {}).pop(name, None)
        self._save_tags(tags)

    def add_training_dataset_tag(self, training_dataset_version: int, name: str, value: object) -> None:
        """Attach the tag `name` to training dataset `training_dataset_version` of the view."""
        self._training_dataset_record(training_dataset_version)   # refuses a version that is not there
        tags = self._tags()
        tags.setdefault("training_datasets", {}).setdefault(str(int(training_dataset_version)), {})[
            _tag_name(name)] = _tag_value(name, value)
        self._save_tags(tags)

    def get_training_dataset_tag(self, training_dataset_version: int, name: str) -> Any:
        """The value of tag `name` of training dataset version `training_dataset_version`, None when unset."""
        return self._tags().get("training_datasets", {}).get(str(int(training_dataset_version)), {}).get(name)

    def get_training_dataset_tags(self, training_dataset_version: int) -> dict[str, Any]:
        """The tags of training dataset version `training_dataset_version`, name -> value."""
        return dict(self._tags().get("training_datasets", {}).get(str(int(training_dataset_version)), {}))

    def delete_training_dataset_tag(self, training_dataset_version: int, name: str) -> None:
        """Remove tag `name` from training dataset version `training_dataset_version`."""
        tags = self._tags()
        tags.get("training_datasets", {}).get(str(int(training_dataset_version)), {}).pop(name, None)
        self._save_tags(tags)

    create_feature_monitoring = refusal("FeatureView.create_feature_monitoring")
    create_statistics_monitoring = refusal("FeatureView.create_statistics_monitoring")
    get_feature_monitoring_configs = refusal("FeatureView.get_feature_monitoring_configs")
    find_neighbors = refusal("FeatureView.find_neighbors")


class QueryMembers:
    """hsfs' Query members beyond hopsml's own (mixed into Query)."""

    def pull_changes(self, wallclock_start_time: When, wallclock_end_time: When) -> Any:
        """The rows committed after `wallclock_start_time` up to `wallclock_end_time` (hsfs keeps it as the older
        spelling of `as_of(wallclock_end_time, exclude_until=wallclock_start_time)`)."""
        return self.as_of(wallclock_end_time, exclude_until=wallclock_start_time)   # type: ignore[attr-defined]


def _frame(table: pa.Table, dataframe_type: str) -> Any:
    """An Arrow table as `dataframe_type` asks (hsfs' names: default/pandas, polars, numpy, python, pyarrow)."""
    kind = str(dataframe_type).lower()
    if kind in ("pyarrow", "arrow"):
        return table
    if kind == "polars":
        import polars as pl

        return pl.from_arrow(table)
    frame = table.to_pandas()
    if kind == "numpy":
        return frame.to_numpy()
    if kind == "python":
        return frame.values.tolist()
    return frame


def _tag_name(name: object) -> str:
    if not isinstance(name, str) or not name.strip():
        raise FeatureStoreError(f"a tag's name must be a non-empty string, not {name!r}")
    return name


def _tag_value(name: str, value: object) -> object:
    """The tag's value as JSON keeps it (a Tag object: its value); refused when JSON cannot hold it."""
    value = getattr(value, "value", value)
    try:
        json.dumps(value)
    except (TypeError, ValueError) as exc:
        raise FeatureStoreError(f"tag {name!r}: its value must be JSON (a dict, list, string or number): "
                                f"{exc}") from None
    return value
