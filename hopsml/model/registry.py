"""The model registry: versions of trained models in `Projects/<project>/Models/<name>/<version>/`.

A version folder holds the model's files exactly as given, `.model.json` (name, version, metrics, description,
who and when, the experiment that produced it, the datasets that experiment read, the files with their sizes)
and `_SUCCESS`, written last. The record is a dot-file so that a model file named `model.json` (XGBoost's usual
name) is never overwritten; versions registered when the record was `model.json` are read from there. Export
copies into a hidden staging folder beside the versions and renames it into place, so a half-copied version is
never listed. Semantics follow
hops-util-py's `hops.model`: the next integer version when none is given, no silent overwrite.
"""

from __future__ import annotations

import getpass
import hashlib
import logging
import numbers
import os
import posixpath
import shutil
import sys
import tempfile
import uuid
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from hopsml import config, execution_notes, hdfs, layout
from hopsml.clock import utc_now as _now
from hopsml.errors import ModelError, StorageError
from hopsml.fs import Storage
from hopsml.layout import ModelDir
from hopsml.model.quantize import check_method, quantize_files, recorded_test_split
from hopsml.records import BrokenRecordError, Shape, read_record
from hopsml.search.space import Direction, SearchSpaceError
from hopsml.tracking import lineage
from hopsml.tracking.run_context import RunContext, current_or_none

log = logging.getLogger(__name__)

_MOVE_ATTEMPTS = 20


class ModelNotFoundError(ModelError, LookupError):
    """No such model, version or metric in the project's registry."""


class ModelExistsError(ModelError):
    """The version exists and overwrite was not asked for."""


class Metric:
    """hops' names for the direction of `get_best_model`: `Metric.MAX`, `Metric.MIN`."""

    MAX = "MAX"
    MIN = "MIN"


@dataclass
class ModelVersion:
    """One registered version, as `model.json` records it; `mv["version"]` works as in hops."""

    name: str
    version: int
    project: str
    path: str
    metrics: dict[str, float] = field(default_factory=dict)
    description: str | None = None
    created: str | None = None
    user: str | None = None
    experiment: dict[str, Any] | None = None
    datasets: list[dict[str, Any]] = field(default_factory=list)
    files: list[dict[str, Any]] = field(default_factory=list)
    hopsml_version: str | None = None
    quantization: dict[str, Any] | None = None  # an int8 version: sizes, accuracy change (hopsml.model.quantize)

    def to_dict(self) -> dict[str, Any]:
        """The version as its model.json record holds it."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ModelVersion:
        """A version from its record; keys this hopsml does not know (written by a newer one) are left out."""
        names = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in data.items() if k in names})

    def __getitem__(self, key: str) -> Any:
        return self.to_dict()[key]

    @property
    def ref(self) -> str:
        """'name:version', as `predict` and the CLI accept it."""
        return f"{self.name}:{self.version}"




def _where(settings: config.Settings | None, ctx: RunContext | None,
           project: str | None = None) -> tuple[Storage, str]:
    """Storage and project: the run's inside a run, else the settings'; `project` names another
    project under the same root (hops' `project_name`)."""
    if settings is None and ctx is not None and ctx.run_dir.project:
        return ctx.storage, layout.validate_name(project, "project name") if project else ctx.run_dir.project
    settings = settings or config.load()
    return Storage(settings.root), layout.validate_name(project, "project name") if project else settings.project


# --- reading -------------------------------------------------------------------------------------
def _version_numbers(storage: Storage, project: str, name: str, complete: bool = True) -> list[int]:
    """Versions of `name`, ascending; only finished ones (with the marker) unless `complete=False`."""
    numbers_ = []
    for rel in storage.ls(layout.model_versions_dir(project, name)):
        base = posixpath.basename(rel)
        if base.isdigit() and int(base) > 0 and str(int(base)) == base:
            if not complete or storage.exists(layout.join(rel, layout.MODEL_DONE)):
                numbers_.append(int(base))
    return sorted(numbers_)


def _model_names(storage: Storage, project: str) -> list[str]:
    names = []
    for rel in storage.ls(layout.models_dir(project)):
        base = posixpath.basename(rel)
        if not base.startswith((".", "_")) and storage.isdir(rel) and _version_numbers(storage, project, base):
            names.append(base)
    return sorted(names)


# What model.json must hold for a ModelVersion to be made of it.
MODEL_SHAPE = Shape(layout.MODEL_RECORD, required=("name", "version"),
                    types={"name": (str,), "version": (int,), "project": (str,), "metrics": (dict,), "files": (list,),
                           "datasets": (list,), "experiment": (dict,), "description": (str,), "created": (str,),
                           "user": (str,), "quantization": (dict,)})


def _read(storage: Storage, project: str, name: str, version: int) -> ModelVersion:
    """One version's record through the guarded reader; BrokenRecordError saying why when it cannot be read."""
    mdir = ModelDir.of(project, name, version)
    try:
        data = read_record(storage, record_path(storage, mdir), MODEL_SHAPE)
    except StorageError as exc:
        reason = f"{layout.MODEL_RECORD} cannot be read: {exc}"
        raise BrokenRecordError(f"model {name} version {version} is BROKEN: {reason}", reason=reason) from exc
    data.setdefault("project", project)
    data["path"] = storage.uri(mdir.path)  # where it is now, even if the root moved
    return ModelVersion.from_dict(data)


def record_path(storage: Storage, mdir: ModelDir) -> str:
    """Where a version's record is: `.model.json`, or `model.json` for a version registered before the move."""
    if not storage.exists(mdir.record) and storage.exists(mdir.legacy_record):
        return mdir.legacy_record
    return mdir.record


def local_record(folder: str) -> ModelVersion | None:
    """The record a downloaded (or local) version folder holds, None when it has none that can be read."""
    import json

    for name in (layout.MODEL_RECORD, layout.LEGACY_MODEL_RECORD):
        path = os.path.join(folder, name)
        if os.path.isfile(path):
            try:
                with open(path, encoding="utf-8") as stream:
                    data = MODEL_SHAPE.check(json.load(stream))
                return ModelVersion.from_dict({**data, "path": folder})
            except (OSError, ValueError, TypeError, BrokenRecordError):
                if name == layout.MODEL_RECORD:
                    return None
    return None


def read_version(storage: Storage, project: str, name: str, version: int) -> ModelVersion:
    """A finished version's record, or BrokenRecordError with the reason (for listings that go on)."""
    return _read(storage, project, name, version)


def scan_models(settings: config.Settings | None = None) -> list[tuple[str, int, ModelVersion | BrokenRecordError]]:
    """The latest version of every model, by name: its record, or why it cannot be read (listed as BROKEN)."""
    storage, project = _where(settings, current_or_none())
    found: list[tuple[str, int, ModelVersion | BrokenRecordError]] = []
    for name in _model_names(storage, project):
        latest = _version_numbers(storage, project, name)[-1]
        try:
            found.append((name, latest, _read(storage, project, name, latest)))
        except BrokenRecordError as exc:
            found.append((name, latest, exc))
    return found


def _unknown_model(storage: Storage, project: str, name: str) -> ModelNotFoundError:
    known = ", ".join(_model_names(storage, project)) or "none"
    return ModelNotFoundError(f"no model {name!r} in project {project!r} under {storage.uri()} "
                              f"(models: {known}); export one with hopsml.model.export(path, {name!r})")


def versions(name: str, settings: config.Settings | None = None) -> list[ModelVersion]:
    """Every finished version of model `name`, oldest first."""
    storage, project = _where(settings, current_or_none())
    found = _version_numbers(storage, project, layout.validate_name(name, "model name"))
    if not found:
        raise _unknown_model(storage, project, name)
    return [_read(storage, project, name, v) for v in found]


def list_models(settings: config.Settings | None = None) -> list[ModelVersion]:
    """The latest version of every model in the project, by name."""
    storage, project = _where(settings, current_or_none())
    return [_read(storage, project, name, _version_numbers(storage, project, name)[-1])
            for name in _model_names(storage, project)]


def get_model(name: str, version: int | str | None = None, project_name: str | None = None,
              settings: config.Settings | None = None) -> ModelVersion:
    """Version `version` of model `name` (the latest when None), of this project or `project_name`."""
    storage, project = _where(settings, current_or_none(), project_name)
    found = _version_numbers(storage, project, layout.validate_name(name, "model name"))
    if not found:
        raise _unknown_model(storage, project, name)
    if version is None:
        return _read(storage, project, name, found[-1])
    number = layout.validate_version(version)
    if number not in found:
        raise ModelNotFoundError(f"model {name!r} has no version {number} in project {project!r} "
                                 f"(versions: {', '.join(map(str, found))})")
    return _read(storage, project, name, number)


def get_best_model(name: str, metric: str, direction: Direction | str = Direction.MAX,
                   settings: config.Settings | None = None) -> ModelVersion:
    """The version of `name` with the best value of `metric`; of equal ones, the newest.

    `direction` is 'max' or 'min', a hopsml Direction, or hops' `Metric.MAX` / `Metric.MIN`.
    """
    try:
        goal = Direction.of(direction)
    except SearchSpaceError:
        raise ModelError(f"direction must be 'max' or 'min' (or Metric.MAX / Metric.MIN), not {direction!r}") from None
    candidates = [mv for mv in reversed(versions(name, settings))
                  if isinstance(mv.metrics.get(metric), numbers.Real)]
    if not candidates:
        recorded = sorted({k for mv in versions(name, settings) for k in mv.metrics})
        raise ModelNotFoundError(f"no version of model {name!r} records metric {metric!r} "
                                 f"(recorded metrics: {', '.join(recorded) or 'none'}); pass "
                                 "metrics={...} to hopsml.model.export")
    return goal.best(candidates, key=lambda mv: float(mv.metrics[metric]))


def download_model(name: str, version: int | str | None = None, project_name: str | None = None,
                   overwrite: bool = False, *, local_dir: str | None = None,
                   settings: config.Settings | None = None) -> str:
    """Copy a version's files (the latest when `version` is None) to `local_dir/<name>/<version>`
    (below a new temporary folder when None) and return that local folder. An existing non-empty
    folder is replaced only with overwrite=True. The arguments before `*` are hops' own."""
    storage, project = _where(settings, current_or_none(), project_name)
    mv = get_model(name, version, project, settings)
    mdir = ModelDir.of(project, mv.name, mv.version)
    base = local_dir if local_dir is not None else tempfile.mkdtemp(prefix=f"hopsml-model-{mv.name}-")
    target = os.path.join(os.path.abspath(os.path.expanduser(base)), mv.name, str(mv.version))
    if os.path.isdir(target) and os.listdir(target):
        if not overwrite:
            raise ModelExistsError(f"{target} already exists; pass overwrite=True or another local_dir")
        shutil.rmtree(target)
    os.makedirs(target, exist_ok=True)
    for entry in mv.files:
        storage.download(mdir.file(entry["path"]), os.path.join(target, *entry["path"].split("/")))
    storage.download(record_path(storage, mdir), os.path.join(target, layout.MODEL_RECORD))
    return target


# --- export --------------------------------------------------------------------------------------
def _check_metrics(metrics: Mapping[str, Any] | None) -> dict[str, float]:
    if metrics is None:
        return {}
    if not isinstance(metrics, Mapping):
        raise ModelError(f"metrics must be a dict of name -> number, got {type(metrics).__name__}")
    out = {}
    for key, value in metrics.items():
        if hasattr(value, "item") and callable(value.item):  # numpy / cupy scalars
            value = value.item()
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise ModelError(f"metric {key!r} is {value!r}; metrics are numbers (e.g. {{'accuracy': 0.93}})")
        out[str(key)] = float(value)
    return out


def _source(storage: Storage, project: str, model_path: str) -> tuple[str | None, str | None]:
    """(local path, None) or (None, root-relative path) of what to export."""
    if not isinstance(model_path, (str, os.PathLike)):
        raise ModelError(f"model_path must be a path, got {type(model_path).__name__}")
    text = os.fspath(model_path)
    local = text[len("file://"):] if text.startswith("file://") else text
    if os.path.exists(os.path.expanduser(local)):
        local = os.path.abspath(os.path.expanduser(local))
        root_local = storage.local_path()
        if root_local and (local + os.sep).startswith(root_local.rstrip(os.sep) + os.sep):
            return local, os.path.relpath(local, root_local).replace(os.sep, "/")
        return local, None
    try:   # any path form hdfs reads: project-relative, /Projects/<p>/..., hdfs://, the root's URIs
        rel = hdfs.root_relative(text, storage, project) if text.strip("/") else ""
    except hdfs.InvalidPathError as exc:
        raise ModelError(f"model_path {model_path!r} does not exist locally, and {exc}") from None
    if not rel or not storage.exists(rel):
        raise ModelError(f"model_path {model_path!r} does not exist, neither locally nor under "
                         f"{storage.uri()}; save the model first and pass the file or folder it went to")
    return None, rel


def _experiment_of(storage: Storage, rel: str) -> dict[str, Any] | None:
    """The experiment (and trial) a root-relative path lies in, else None."""
    parts = rel.strip("/").split("/")
    if len(parts) < 4 or parts[0] != layout.PROJECTS or parts[2] != layout.EXPERIMENTS:
        return None
    run = parts[:4]
    trial = None
    if len(parts) > 4 and storage.exists(layout.join(*parts[:5], layout.HPARAMS)):
        trial, run = parts[4], parts[:5]
    run_path = layout.join(*run)
    return {"id": parts[3], "project": parts[1], "trial": trial, "logdir": storage.uri(run_path),
            "dir": run_path}


def _digest(stream: Any) -> str:
    sha = hashlib.sha256()
    while chunk := stream.read(1 << 20):
        sha.update(chunk)
    return sha.hexdigest()


def _local_files(path: str) -> list[str]:
    if os.path.isfile(path):
        return [path]
    return sorted(os.path.join(d, f) for d, _, files in os.walk(path) for f in files)


def _session_experiment(storage: Storage, project: str, local: str) -> dict[str, Any] | None:
    """The newest experiment of this driver's Spark application, if it wrote (a file of) the model."""
    if "pyspark" not in sys.modules:  # no session in this process: do not import Spark for nothing
        return None
    from hopsml.cluster import session
    from hopsml.cluster.handle import SparkHandle
    from hopsml.tracking.record import list_records

    active = session.active()
    if active is None:
        return None
    app_id = SparkHandle.of(active).app_id
    runs = [r for r in list_records(storage, project) if r.app_id == app_id]
    if not runs:
        return None
    exp_dir = layout.ExperimentDir.from_id(project, runs[0].id)
    wanted: dict[int, list[str]] = {}
    for path in _local_files(local)[:50]:
        wanted.setdefault(os.path.getsize(path), []).append(path)
    digests: dict[str, str] = {}
    for info in storage.walk(exp_dir.path):
        if not info.is_file or info.size not in wanted:
            continue  # only files of the same size are worth reading
        with storage.open_input(storage.relative(info.path)) as theirs:
            digest = _digest(theirs)
        for path in wanted[info.size]:
            if path not in digests:
                with open(path, "rb") as mine:
                    digests[path] = _digest(mine)
            if digests[path] == digest:
                return _experiment_of(storage, storage.relative(info.path))
    return None


def _find_experiment(storage: Storage, project: str, ctx: RunContext | None, local: str | None,
                     rel: str | None, experiment_id: str | None) -> dict[str, Any] | None:
    if experiment_id is not None:
        from hopsml.tracking.record import read_record

        read_record(storage, project, experiment_id)  # a clear error for an unknown id
        return _experiment_of(storage, layout.ExperimentDir.from_id(project, experiment_id).path)
    if ctx is not None:
        return _experiment_of(storage, ctx.run_dir.path)
    if rel is not None:
        found = _experiment_of(storage, rel)
        if found is not None:
            return found
    return _session_experiment(storage, project, local) if local is not None else None


def _datasets(storage: Storage, ctx: RunContext | None, experiment: dict[str, Any] | None) -> list[dict[str, Any]]:
    """What the producing run read: from the live run, else from its datasets.json."""
    if ctx is not None:
        return lineage.read(ctx.local_dir)
    if experiment is None:
        return []
    rel = layout.join(experiment["dir"], layout.DATASETS_USED)
    try:
        return list(storage.read_json(rel).get("datasets", [])) if storage.exists(rel) else []
    except (StorageError, ValueError) as exc:
        log.warning("cannot read %s: %s", storage.uri(rel), exc)
        return []


def _copy_in(storage: Storage, local: str | None, rel: str | None, stage: str) -> None:
    """A file lands as stage/<its name>; a folder's contents land in stage (as hops does)."""
    if rel is None:
        if local is not None:
            storage.upload(local, stage if os.path.isdir(local) else layout.join(stage, os.path.basename(local)))
        return
    storage.copy_tree(rel, stage if storage.isdir(rel) else layout.join(stage, posixpath.basename(rel)))


def _file_list(storage: Storage, stage: str) -> list[dict[str, Any]]:
    base = storage.path(stage)
    return sorted(({"path": posixpath.relpath(i.path, base), "size": int(i.size or 0)} for i in storage.walk(stage)
                   if i.is_file), key=lambda f: f["path"])


def _next_version(storage: Storage, project: str, name: str) -> int:
    return max(_version_numbers(storage, project, name, complete=False), default=0) + 1


def _commit(storage: Storage, stage: str, mv: ModelVersion, project: str, overwrite: bool, pinned: bool) -> None:
    """Rename the staging folder to the version folder, then write the marker.

    An unpinned version that another export took meanwhile moves on to the next number."""
    for _ in range(_MOVE_ATTEMPTS):
        final = ModelDir.of(project, mv.name, mv.version)
        mv.path = storage.uri(final.path)
        old = None
        if storage.exists(final.path):
            if not pinned:
                mv.version += 1
                continue
            if not overwrite:
                raise ModelExistsError(f"model {mv.name!r} version {mv.version} already exists at "
                                       f"{storage.uri(final.path)}; pass overwrite=True or leave "
                                       "model_version out to get the next version")
            old = layout.join(posixpath.dirname(final.path), f".{mv.version}.old-{uuid.uuid4().hex[:12]}")
            storage.delete(final.done)  # not a finished version from here on
            storage.move_dir(final.path, old)
        storage.write_json(layout.join(stage, layout.MODEL_RECORD), mv.to_dict())
        try:
            storage.move_dir(stage, final.path)
        except OSError as exc:  # taken between the check and the rename (local disks, HDFS)
            if old is not None:  # put the version being replaced back as it was
                storage.move_dir(old, final.path)
                storage.write_text(final.done, _now() + "\n")
            if pinned or not storage.exists(final.path):
                raise StorageError(f"cannot move the exported model into {storage.uri(final.path)}: {exc}") from exc
            mv.version += 1
            continue
        storage.write_text(final.done, _now() + "\n")  # the last file of a complete version
        execution_notes.note("model", name=mv.name, version=mv.version, path=mv.path)
        if old is not None:
            storage.delete(old)
        return
    raise ModelError(f"could not find a free version for model {mv.name!r} after {_MOVE_ATTEMPTS} tries; "
                     "too many exports at once: pass model_version explicitly")


def export(model_path: str, model_name: str, model_version: int | None = None, overwrite: bool = False,
           metrics: Mapping[str, Any] | None = None, description: str | None = None,
           synchronous: bool = True, synchronous_timeout: float = 120, project: str | None = None, *,
           experiment_id: str | None = None, settings: config.Settings | None = None, quantize: str | None = None,
           eval_data: object = None, quantized_from: ModelVersion | None = None) -> ModelVersion:
    """Register a model file or folder as `Models/<model_name>/<version>/`; returns its record.

    `model_path` is a local file or folder, or a path under the root (absolute URI, 'Projects/...',
    or relative to the project). Inside a run the run is linked; on the driver `experiment_id`, else
    the experiment whose folder holds `model_path`, else this Spark application's newest experiment
    if it wrote the same file. `synchronous` and `synchronous_timeout` are accepted for hops
    notebooks and have nothing to wait for: the version is listed as soon as export returns.
    `quantize="int8"` registers an int8 copy instead (hopsml.model.quantize), its sizes and the accuracy
    change recorded under `quantization`: on `eval_data=(inputs, labels)`, else on the test split of the
    dataset the model's lineage names.
    """
    del synchronous, synchronous_timeout
    ctx = current_or_none()
    storage, project = _where(settings, ctx, project)
    name = layout.validate_name(str(model_name), "model name")
    pinned = model_version is not None
    version = layout.validate_version(model_version) if pinned else _next_version(storage, project, name)
    checked_metrics = _check_metrics(metrics)
    local, rel = _source(storage, project, model_path)
    experiment = _find_experiment(storage, project, ctx, local, rel, experiment_id) if quantized_from is None else None
    # a quantized copy keeps the lineage of its source version
    datasets = list(quantized_from.datasets) if quantized_from is not None else _datasets(storage, ctx, experiment)
    quantized = None
    if quantize is not None:
        if local is None:
            raise ModelError(f"quantize={quantize!r} needs the model on local disk; download {model_path!r} first")
        quantized = quantize_files(local, quantize, eval_data,
                                   source_ref=quantized_from.ref if quantized_from else None,
                                   test_split=lambda: recorded_test_split(storage, project, datasets))
        local, rel = quantized.folder, None
    from hopsml import __version__

    mv = ModelVersion(name=name, version=version, project=project, path="", metrics=checked_metrics,
                      description=description or f"A collection of models for {name}", created=_now(),
                      user=os.environ.get("HOPSML_USER") or getpass.getuser(),
                      experiment={k: v for k, v in experiment.items() if k != "dir"} if experiment else None,
                      datasets=datasets, hopsml_version=__version__,
                      quantization=quantized.record if quantized else None)
    if quantized_from is not None:
        mv.experiment = quantized_from.experiment
    stage = layout.join(layout.model_versions_dir(project, name), f".staging-{uuid.uuid4().hex[:12]}")
    storage.makedirs(stage)
    try:
        _copy_in(storage, local, rel, stage)
        mv.files = _file_list(storage, stage)
        if not mv.files:
            raise ModelError(f"{model_path!r} is an empty folder: there is nothing to export")
        taken = [f["path"] for f in mv.files if f["path"] in (layout.MODEL_RECORD, layout.MODEL_DONE)]
        if taken:
            raise ModelError(f"{model_path!r} holds {taken[0]!r}, the name of the registry's own file in a version "
                             "folder; rename that file")
        _commit(storage, stage, mv, project, overwrite, pinned)
    except BaseException:
        try:
            storage.delete(stage)
        except OSError as exc:  # keep the original error; the staging folder is hidden anyway
            log.warning("could not remove staging folder %s: %s", storage.uri(stage), exc)
        raise
    finally:
        if quantized is not None:
            shutil.rmtree(quantized.folder, ignore_errors=True)
    log.info("exported model %s version %d to %s", name, mv.version, mv.path)
    return mv


def resolve(model_ref: ModelVersion | str | tuple[str, int], settings: config.Settings | None = None) -> ModelVersion:
    """A ModelVersion from a reference: a ModelVersion, 'name' (latest), 'name:3' or ('name', 3)."""
    if isinstance(model_ref, ModelVersion):
        return model_ref
    if isinstance(model_ref, tuple) and len(model_ref) == 2:
        return get_model(model_ref[0], model_ref[1], settings=settings)
    if isinstance(model_ref, str):
        name, sep, version = model_ref.partition(":")
        return get_model(name, version if sep else None, settings=settings)
    raise ModelError(f"a model is named by 'name', 'name:version', ('name', version) or a ModelVersion, "
                     f"not {model_ref!r}")


def quantize(model_name: str, model_version: int | None = None, method: str = "int8", *, eval_data: object = None,
             metrics: Mapping[str, Any] | None = None, description: str | None = None,
             settings: config.Settings | None = None) -> ModelVersion:
    """A new version of `model_name`: version `model_version` (the latest when None) with int8 weights.

    The new version names its source under `quantization.source.model` and keeps its lineage; the accuracy
    (or MSE) of both is recorded on `eval_data` = (inputs, labels), else on the source's recorded test split."""
    check_method(method)
    source = get_model(model_name, model_version, settings=settings)
    local = tempfile.mkdtemp(prefix="hopsml-int8-source-")
    try:
        folder = download_model(source.name, source.version, local_dir=local, settings=settings)
        return export(folder, source.name, metrics=metrics,
                      description=description or f"{source.name} version {source.version} with {method} weights",
                      settings=settings, quantize=method, eval_data=eval_data, quantized_from=source)
    finally:
        shutil.rmtree(local, ignore_errors=True)
