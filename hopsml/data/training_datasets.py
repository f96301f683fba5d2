"""A feature view's training dataset named by its view, as ranks read it: ``fv:<view>:<version>/td<n>``.

``create_training_data`` / ``create_train_test_split`` / ``create_train_validation_test_split`` write a
training dataset version out as a prepared dataset (``Datasets/<view>_<version>_td<n>/``), recorded in
``Training_Datasets/<view>_<version>/<n>/training_dataset.json``. A rank names it the way a Hopsworks user
thinks of it (view, view version, training dataset version) and reads it as any prepared dataset, with the
same readers and the same sharding rule; the split is the readers' ``split=`` as for every dataset:

    hopsml.data.reader("fv:fraud:1/td2", split="test")
    hopsml.torch.data_loader("fv:fraud:1/td2", batch_size=64)     # split 'train' by default

The rank resolves the name from those two records alone (no feature store object, no Spark, no row through the
driver) and says what exists when a part of it does not. A reference holds a '/', which no dataset name can,
so it never shadows a prepared dataset.

>>> ref = TrainingDatasetRef.parse("fv:fraud:1/td2")
>>> ref.view, ref.view_version, ref.version, str(ref)
('fraud', 1, 2, 'fv:fraud:1/td2')
>>> is_reference("digits"), is_reference("fv:fraud:1/td2")
(False, True)
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass

from hopsml import layout
from hopsml.data import dataset as ds
from hopsml.errors import FeatureStoreError, InvalidNameError
from hopsml.fs import Storage
from hopsml.records import Shape, read_record

__all__ = ["PREFIX", "TrainingDatasetNotFoundError", "TrainingDatasetRef", "is_reference", "resolve"]

PREFIX = "fv:"
FORM = "fv:<view>:<version>/td<n>"
# What a rank needs of a training dataset version's record (the feature store checks the rest when it loads it).
_RECORD_SHAPE = Shape(layout.TRAINING_DATASET_RECORD, types={"dataset": (str,), "split": (dict,)})


class TrainingDatasetNotFoundError(ds.DatasetNotFoundError, FeatureStoreError):
    """The view, its version or the training dataset version a reference names is not there (or was never
    written out); the message lists what is."""


def is_reference(name: str) -> bool:
    """Whether a reader's dataset argument names a feature view's training dataset rather than a dataset."""
    return isinstance(name, str) and name.startswith(PREFIX)


@dataclass(frozen=True)
class TrainingDatasetRef:
    """Training dataset version `version` of feature view `view` version `view_version`."""

    view: str
    view_version: int
    version: int

    def __str__(self) -> str:
        return f"{PREFIX}{self.view}:{self.view_version}/td{self.version}"

    def described(self) -> str:
        return f"training dataset version {self.version} of feature view {self.view!r} version {self.view_version}"

    @classmethod
    def parse(cls, text: str) -> TrainingDatasetRef:
        """The reference in `text`; InvalidNameError showing the form when it is not one."""
        head, _, tail = text[len(PREFIX):].partition("/")
        view, _, version = head.rpartition(":")
        problem = None
        if "/" in tail:
            problem = (f"it has more than the training dataset version after the view; give the split as the "
                       f"readers' split= (e.g. reader({text.rsplit('/', 1)[0]!r}, split={tail.rsplit('/', 1)[1]!r}))")
        elif not view or not version.isdigit():
            problem = "it names no feature view and version (fv:<view>:<version>)"
        elif not tail.startswith("td") or not tail[2:].isdigit():
            problem = "it names no training dataset version (/td<n>)"
        if problem is None and int(version) >= 1 and int(tail[2:]) >= 1:
            return cls(layout.validate_name(view, "feature view name"), int(version), int(tail[2:]))
        raise InvalidNameError(f"{text!r} is not a training dataset reference: {problem or 'versions start at 1'}. "
                               f"Write {FORM}, e.g. 'fv:fraud:1/td2' for fv.get_train_test_split(2) of feature "
                               "view 'fraud' version 1, and pick the split with split='train'|'test'|'validation'")


def resolve(storage: Storage, project: str, ref: TrainingDatasetRef) -> str:
    """The name of the prepared dataset `ref`'s version was written to, once both records say it is there;
    TrainingDatasetNotFoundError naming what exists otherwise."""
    view_record = layout.join(layout.feature_view_dir(project, ref.view, ref.view_version), layout.VIEW_RECORD)
    if not storage.exists(view_record):
        raise TrainingDatasetNotFoundError(f"{ref}: {_no_view(storage, project, ref)}")
    folder = layout.training_datasets_dir(project, ref.view, ref.view_version)
    path = layout.join(folder, str(ref.version), layout.TRAINING_DATASET_RECORD)
    if not storage.exists(path):
        versions = _versions(storage, project, ref)
        known = ", ".join(f"{v} ({state})" if state else str(v) for v, state in versions) or "none yet"
        raise TrainingDatasetNotFoundError(
            f"{ref}: feature view {ref.view!r} version {ref.view_version} has no training dataset version "
            f"{ref.version}; its training dataset versions: {known}. Ranks read versions written out by "
            "fv.create_training_data(), fv.create_train_test_split() or fv.create_train_validation_test_split()")
    name = read_record(storage, path, _RECORD_SHAPE).get("dataset")
    if not name:
        raise TrainingDatasetNotFoundError(
            f"{ref}: {ref.described()} was taken in memory (train_test_split, training_data, ...), not written "
            "out, so there are no files for ranks to read; write one with fv.create_train_test_split(...) (or "
            "create_training_data, create_train_validation_test_split) and read the version it returns")
    if not _finished(storage, project, str(name)):
        raise TrainingDatasetNotFoundError(
            f"{ref}: {ref.described()} is incomplete: its dataset {name!r} is not there (its write failed, was "
            "killed or is still running, or it was removed); create another version")
    return str(name)


def _finished(storage: Storage, project: str, name: str) -> bool:
    try:
        ddir = ds.DatasetDir.of(project, name)
    except InvalidNameError:
        return False
    return storage.exists(ddir.success) and storage.exists(ddir.manifest)


def _views(storage: Storage, project: str) -> dict[str, list[int]]:
    """Saved feature views by name, with their versions (folders `<name>_<version>` holding a view.json)."""
    found: dict[str, list[int]] = {}
    for rel in storage.ls(layout.feature_views_dir(project)):
        name, _, version = posixpath.basename(rel).rpartition("_")
        if name and version.isdigit() and storage.exists(layout.join(rel, layout.VIEW_RECORD)):
            found.setdefault(name, []).append(int(version))
    return {name: sorted(versions) for name, versions in sorted(found.items())}


def _no_view(storage: Storage, project: str, ref: TrainingDatasetRef) -> str:
    views = _views(storage, project)
    if ref.view in views:
        return (f"feature view {ref.view!r} has no version {ref.view_version} in project {project!r}; its versions: "
                f"{', '.join(map(str, views[ref.view]))}")
    known = "; ".join(f"{name} (versions {', '.join(map(str, versions))})" for name, versions in views.items())
    return (f"no feature view {ref.view!r} in project {project!r}; "
            + (f"its views: {known}" if known else "it has no feature views yet"))


def _versions(storage: Storage, project: str, ref: TrainingDatasetRef) -> list[tuple[int, str]]:
    """The view version's training dataset versions, each with what keeps ranks from reading it ('' when
    nothing does)."""
    folder = layout.training_datasets_dir(project, ref.view, ref.view_version)
    out = []
    for rel in storage.ls(folder):
        base = posixpath.basename(rel)
        record = layout.join(rel, layout.TRAINING_DATASET_RECORD)
        if not base.isdigit() or not storage.exists(record):
            continue
        try:
            name = read_record(storage, record, _RECORD_SHAPE).get("dataset")
        except (OSError, ValueError) as exc:   # a broken record is listed, not a reason to hide the others
            out.append((int(base), f"unreadable: {exc}"))
            continue
        state = "" if name and _finished(storage, project, str(name)) else "incomplete" if name else "in memory"
        out.append((int(base), state))
    return sorted(out)
