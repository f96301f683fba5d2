"""What each of the provider's operators does, without Airflow: one function per pipeline step over hopsml's own
API. The operators are thin (they map arguments, push the returned reference to XCom and emit the Assets); the
work and its errors live here, so a step runs, and is measured, the same called directly.

Every step returns a `Step`: a small reference (ids, names, versions, paths: never data) and the Assets it
changed, with the extra each event carries (a feature group's commit, a model's version).
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from hopsml import config, layout
from hopsml.airflow import assets
from hopsml.errors import HopsmlError
from hopsml.fs import Storage

log = logging.getLogger(__name__)

VERBS = ("launch", "allreduce", "grid_search", "random_search", "differential_evolution", "tpe_search")


class StepError(HopsmlError, RuntimeError):
    """A pipeline step cannot run as asked (a missing object, a bad argument); the message names the object."""


class GateFailed(HopsmlError, RuntimeError):
    """A gate's check exceeded its thresholds: the message says which and by how much; `report` holds the data."""

    def __init__(self, message: str, report: Mapping[str, Any] | None = None) -> None:
        super().__init__(message)
        self.report = dict(report or {})


@dataclass
class Step:
    """A step's result: `ref` goes to XCom, `events` are (asset URI, extra) pairs to emit."""

    ref: dict[str, Any]
    events: list[tuple[str, dict[str, Any]]] = field(default_factory=list)


def settings_for(root: str | None = None, project: str | None = None) -> config.Settings:
    """The project a step works in: the arguments, else HOPSML_ROOT / HOPSML_PROJECT, else conf/hopsml.toml."""
    return config.load(root=root, project=project)


@contextlib.contextmanager
def project_environment(settings: config.Settings) -> Iterator[None]:
    """HOPSML_ROOT and HOPSML_PROJECT set to `settings`' for the hops-style verbs that read the environment
    (experiment.launch has no settings argument), and restored after."""
    saved = {key: os.environ.get(key) for key in ("HOPSML_ROOT", "HOPSML_PROJECT")}
    os.environ["HOPSML_ROOT"], os.environ["HOPSML_PROJECT"] = settings.root, settings.project
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


# --- data -----------------------------------------------------------------------------------------------
def prepare_dataset(settings: config.Settings, src: str, dataset: str, *, kind: str = "table",
                    options: Mapping[str, Any] | None = None) -> Step:
    """prepare_table (kind 'table') or prepare_images (kind 'images') of `src` into `dataset`."""
    from hopsml.data import dataset as ds

    if kind not in ("table", "images"):
        raise StepError(f"dataset {dataset!r}: kind must be 'table' or 'images', not {kind!r}")
    options = dict(options or {})
    if kind == "table":
        from hopsml.data.tables import prepare_table

        if "label" not in options:
            raise StepError(f"dataset {dataset!r}: a table needs options={{'label': COLUMN}}, the column to predict")
        prepare_table(src, dataset, settings=settings, **options)
    else:
        from hopsml.data.images import prepare_images

        prepare_images(src, dataset, settings=settings, **options)
    storage = Storage(settings.root)
    ddir, manifest = ds.open_dataset(storage, settings.project, dataset)
    rows = {split: info.get("rows") for split, info in manifest.get("splits", {}).items()}
    ref = {"dataset": dataset, "uri": storage.uri(ddir.path), "rows": rows}
    return Step(ref, [(assets.dataset(settings.project, dataset), {"rows": rows})])


def insert_into_group(settings: config.Settings, name: str, path: str, *, version: int = 1,
                      primary_key: Sequence[str] = (), event_time: str | None = None, description: str = "") -> Step:
    """A CSV or Parquet file inserted into feature group `name` as one commit (the group is created with
    `primary_key` when it does not exist)."""
    from hopsml.featurestore import frames
    from hopsml.featurestore.store import FeatureStore

    store = FeatureStore(settings)
    group = store.get_or_create_feature_group(name, version, description=description,
                                              primary_key=list(primary_key), event_time=event_time)
    if not group.saved and not primary_key:
        raise StepError(f"feature group {name!r} version {version} does not exist in project {settings.project!r}: "
                        "give primary_key (and event_time) to create it")
    if not os.path.exists(path):
        raise StepError(f"insert into feature group {name!r}: the file {path!r} does not exist")
    commit, report = group.commit(frames.read_file(path))
    ref = {"featuregroup": name, "version": group.version, "commit": commit.version, "inserted": commit.inserted,
           "updated": commit.updated, "validation": None if report is None else bool(report.get("success"))}
    return Step(ref, [(assets.featuregroup(settings.project, name, group.version), {"commit": commit.version})])


def create_training_dataset(settings: config.Settings, view: str, version: int | None = None, *,
                            test_size: float | None = 0.2, seed: int | None = 0) -> Step:
    """A new training dataset version of feature view `view`, written out as a prepared dataset (train and test
    splits, or one split with test_size None), which every hopsml reader and trainer takes by name."""
    from hopsml.featurestore.store import FeatureStore

    fv = FeatureStore(settings).get_feature_view(view, version)
    if test_size:
        td_version, _ = fv.create_train_test_split(test_size=test_size, seed=seed)
    else:
        td_version, _ = fv.create_training_data()
    name = fv.training_dataset_name(td_version)
    ref = {"view": fv.name, "view_version": fv.version, "training_dataset_version": td_version, "dataset": name}
    return Step(ref, [(assets.featureview(settings.project, fv.name, fv.version), {"training_dataset": td_version}),
                      (assets.dataset(settings.project, name), {})])


# --- experiments and models -----------------------------------------------------------------------------
def import_function(ref: str) -> Callable[..., Any]:
    """'package.module:function' (or 'package.module.function') imported; the error names what is missing."""
    module_name, sep, qualname = ref.partition(":")
    if not sep:
        module_name, _, qualname = ref.rpartition(".")
    if not module_name or not qualname:
        raise StepError(f"function {ref!r}: name it as 'package.module:function'")
    try:
        target: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise StepError(f"function {ref!r}: module {module_name!r} cannot be imported ({exc}); install it where "
                        "the Airflow workers run or put it on their PYTHONPATH") from exc
    for part in qualname.split("."):
        target = getattr(target, part, None)
        if target is None:
            raise StepError(f"function {ref!r}: module {module_name!r} has no {qualname!r}")
    if not callable(target):
        raise StepError(f"function {ref!r} is not callable")
    return target


def run_experiment(settings: config.Settings, function: str, *, verb: str = "launch",
                   args: Mapping[str, Any] | None = None, name: str = "no-name",
                   **options: Any) -> Step:
    """An experiment verb (`launch`, `allreduce`, a search) of an importable function; `args` are launch's
    args_dict or a search's space. The reference: the experiment id, its logdir and its numeric metrics."""
    from hopsml import experiment
    from hopsml.tracking.record import read_record

    if verb not in VERBS:
        raise StepError(f"experiment {name!r}: verb {verb!r} is not one of {', '.join(VERBS)}")
    fn = import_function(function)
    call = getattr(experiment, verb)
    with project_environment(settings):
        if verb == "launch":
            result = call(fn, dict(args or {}), name=name, **options)
        elif verb == "allreduce":
            result = call(fn, name=name, **options)
        else:
            result = call(fn, dict(args or {}), name=name, **options)
    logdir = str(result[0])
    exp_id = logdir.rstrip("/").rsplit("/", 1)[-1]
    record = read_record(Storage(settings.root), settings.project, exp_id)
    answer = result[-1]
    metrics = {k: v for k, v in answer.items() if isinstance(v, (int, float)) and not isinstance(v, bool)} \
        if isinstance(answer, Mapping) else {}
    ref = {"experiment_id": exp_id, "logdir": logdir, "name": name, "state": record.state, "metrics": metrics}
    return Step(ref, [(assets.experiment(settings.project, name), {"experiment_id": exp_id})])


def _best_trial(exp_dir: str, record: Any) -> str:
    """A search's best trial folder (its record names it); the run's own folder for the other verbs."""
    best = (getattr(record, "extra", None) or {}).get("best_logdir")
    return layout.join(exp_dir, str(best).rstrip("/").rsplit("/", 1)[-1]) if best else exp_dir


def _results(record: Any) -> dict[str, float]:
    """The numeric values a run returned: the function's dict (rank 0's of a distributed run, the best trial's
    of a search)."""
    results = record.results[0] if isinstance(record.results, list) and record.results else record.results
    if not isinstance(results, Mapping):
        return {}
    return {k: float(v) for k, v in results.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}


def export_model(settings: config.Settings, model_name: str, experiment_id: str, *, model_file: str,
                 metrics: Sequence[str] | None = None) -> Step:
    """Register the file `model_file` that experiment `experiment_id` wrote (in its folder, or in its best trial's
    for a search) as the next version of `model_name`, with the experiment's numeric results as metrics (only
    `metrics` when given). The version is linked to the experiment and the datasets it read."""
    from hopsml.model import registry
    from hopsml.tracking.record import read_record

    storage = Storage(settings.root)
    record = read_record(storage, settings.project, experiment_id)
    if record.state != "FINISHED":
        raise StepError(f"experiment {experiment_id} ended {record.state}: there is no model of it to export")
    exp_dir = layout.ExperimentDir.from_id(settings.project, experiment_id).path
    folder = _best_trial(exp_dir, record)
    found = sorted(storage.relative(e.path) for e in storage.walk(folder)
                   if e.is_file and storage.relative(e.path).rsplit("/", 1)[-1] == model_file)
    if not found:
        raise StepError(f"experiment {experiment_id} wrote no file {model_file!r} under {storage.uri(folder)}; "
                        "save the model in the run (tensorboard.logdir() + 'model.joblib') or name the file it wrote")
    numeric = _results(record)
    chosen = {k: numeric[k] for k in metrics if k in numeric} if metrics else numeric
    mv = registry.export(storage.uri(found[0]), model_name, metrics=chosen, experiment_id=experiment_id,
                         settings=settings)
    ref = {"model": mv.name, "version": mv.version, "path": mv.path, "metrics": mv.metrics,
           "experiment_id": experiment_id}
    return Step(ref, [(assets.model(settings.project, mv.name), {"version": mv.version})])


def best_model(settings: config.Settings, model_name: str, metric: str, direction: str = "max") -> Step:
    """The version of `model_name` with the best `metric`: the one to promote to the serving."""
    from hopsml.model import registry

    mv = registry.get_best_model(model_name, metric, direction, settings=settings)
    return Step({"model": mv.name, "version": mv.version, "metric": metric, "value": mv.metrics[metric]})


# --- servings -------------------------------------------------------------------------------------------
def _serving_ref(settings: config.Settings, serving_name: str) -> dict[str, Any]:
    from hopsml.serving import lifecycle

    s = lifecycle.get(serving_name, settings)
    return {"serving": serving_name, "status": str(s.status), "model": s.model_name, "version": s.model_version,
            "port": s.port}


def create_serving(settings: config.Settings, serving_name: str, model_name: str, model_version: int | None = None,
                   **options: Any) -> Step:
    """Define (or redefine) serving `serving_name` on a version of `model_name` (the newest when None); a running
    serving restarts on it."""
    from hopsml.model import registry
    from hopsml.serving import lifecycle

    version = int(model_version) if model_version else registry.get_model(model_name, settings=settings).version
    lifecycle.create_or_update(serving_name, layout.model_versions_dir(settings.project, model_name),
                               model_version=version, settings=settings, **options)
    ref = _serving_ref(settings, serving_name)
    return Step(ref, [(assets.serving(settings.project, serving_name), {"model": model_name, "version": version})])


def start_serving(settings: config.Settings, serving_name: str, timeout_s: float = 300.0) -> Step:
    from hopsml.serving import lifecycle

    lifecycle.start(serving_name, timeout_s=timeout_s, settings=settings)
    return Step(_serving_ref(settings, serving_name), [(assets.serving(settings.project, serving_name), {})])


def stop_serving(settings: config.Settings, serving_name: str) -> Step:
    from hopsml.serving import lifecycle

    lifecycle.stop(serving_name, settings=settings)
    return Step(_serving_ref(settings, serving_name), [(assets.serving(settings.project, serving_name), {})])


# --- gates ----------------------------------------------------------------------------------------------
def monitor_gate(settings: config.Settings, serving_name: str, *, psi_threshold: float = 0.2,
                 ks_threshold: float = 0.2, max_drifted: int = 0, require_preprocessing: bool = True,
                 dataset: str | None = None) -> Step:
    """serving.monitor on what the serving logged; GateFailed when more than `max_drifted` features drift or (with
    `require_preprocessing`) the served rows were not preprocessed as in training."""
    from hopsml.serving.monitor import monitor, report_text

    report = monitor(serving_name, dataset, psi_threshold=psi_threshold, ks_threshold=ks_threshold,
                             settings=settings)
    problems = []
    if len(report["drifted"]) > max_drifted:
        problems.append(f"{len(report['drifted'])} features drift ({', '.join(report['drifted'])}), more than "
                        f"max_drifted={max_drifted}")
    if require_preprocessing and not report["preprocessing"]["ok"]:
        problems.append("the served rows are not preprocessed as in training")
    path = Storage(settings.root).uri(layout.ServingDir.of(settings.project, serving_name).monitor_report)
    if problems:
        raise GateFailed(f"gate on serving {serving_name!r} failed: {'; '.join(problems)}\n\n"
                         f"{report_text(report)}\n\nthe report: {path}", report)
    return Step({"serving": serving_name, "drifted": report["drifted"], "rows": report["rows"], "report": path})


def validation_gate(settings: config.Settings, name: str, version: int | None = None, *,
                    max_failed: int = 0) -> Step:
    """The feature group's expectation suite checked on its current rows; GateFailed when more than `max_failed`
    expectations fail."""
    from hopsml.featurestore.store import FeatureStore

    group = FeatureStore(settings).get_feature_group(name, version)
    if group.expectation_suite is None:
        raise StepError(f"feature group {group.key!r} has no expectation suite to validate against: "
                        "save_expectation_suite first")
    report = group.validate(group.read(dataframe_type="pandas"), save_report=True)
    failed = [r.get("expectation_type") for r in report["results"] if not r["success"]]
    if len(failed) > max_failed:
        raise GateFailed(f"gate on feature group {group.key!r} failed: {len(failed)} of "
                         f"{len(report['results'])} expectations fail ({', '.join(map(str, failed))}), more than "
                         f"max_failed={max_failed}", report)
    return Step({"featuregroup": group.name, "version": group.version, "failed": failed,
                 "evaluated": len(report["results"])})
