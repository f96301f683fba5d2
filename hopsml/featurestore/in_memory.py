"""Training data a run takes in memory (`fv.train_test_split`, `train_validation_test_split`, `training_data`,
`get_train_test_split`, ...) kept as hsfs keeps it: a training dataset version in the view's metadata with its
statistics (per split, in the form a written training dataset's stats.json has), and a lineage entry in the run
that read it. So a model trained from it names its view and training dataset version, `serving.monitor` compares
served vectors with its statistics, and `hopsml pipelines dag` knows the function splits the view itself."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from hopsml.featurestore import materialize
from hopsml.featurestore.refs import StoreRef, ViewRef
from hopsml.tracking import lineage

if TYPE_CHECKING:
    from hopsml.featurestore.training import Splits


def record_statistics(view: ViewRef, version: int, rows: Splits) -> None:
    """The statistics of each split of a new in-memory version (`rows`: its training.Splits; the model's features
    and labels, as the caller gets them), and the names of its numeric features in vector order, into its
    record."""
    visible = rows.shown(*view._shown(rows.columns, False, False))
    left = view.query.left
    keys = [k for k in left.keys() if k in visible.columns]
    statistics, features = visible.statistics(view.labels, keys, f"feature view {view.key}, training dataset "
                                                                  f"version {version}")
    view.store.update_training_dataset(view, version, statistics=statistics, features=features)


def note_read(view: ViewRef, version: int, splits: Iterable[str]) -> None:
    """The running experiment (if any) read these splits of the view's training dataset version."""
    record = view.store.read_training_dataset(view, version)
    name = str(record.get("dataset") or materialize.dataset_name(view.name, view.version, version))
    for split in splits:
        lineage.record_dataset(name, f"hopsml-view://{view.store.project}/{view.name}/{view.version}/{version}",
                               split, {"kind": "training_dataset", "created": record.get("created")},
                               extra={"view": view.name, "view_version": view.version,
                                      "training_dataset_version": int(version),
                                      "in_memory": not record.get("dataset")})


def training_reference(store: StoreRef, entry: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """(statistics, feature names) of the in-memory training dataset version a lineage entry names."""
    view = store.get_feature_view(str(entry["view"]), int(entry["view_version"]))
    record = view.store.read_training_dataset(view, int(entry["training_dataset_version"]))
    return dict(record.get("statistics") or {}), list(record.get("features") or [])
