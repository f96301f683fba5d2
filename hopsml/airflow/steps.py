"""What each of the provider's operators does, without Airflow: one function per pipeline step over hopsml's own
API. The operators are thin (they map arguments, push the returned reference to XCom and emit the Assets); the
work and its errors live here, so a step runs, and is measured, the same called directly.

Every step returns a `Step`: a small reference (ids, names, versions, paths: never data) and the Assets it
changed, with the extra each event carries (a feature group's commit, a model's version).
"""

from __future__ import annotations

import importlib
import logging
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from hopsml import config, layout
from hopsml.airflow import assets
from hopsml.errors import HopsmlError
from hopsml.fs import Storage

log = logging.getLogger(__name__)

VERBS = ("launch", "allreduce", "grid_search", "random_search", "differential_evolution", "tpe_search")

if TYPE_CHECKING:
    from hopsml.model.registry import ModelVersion
    from hopsml.tracking.record import ExperimentRecord


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
                   reads: Sequence[str] | None = None, reads_view: Mapping[str, Any] | None = None,
                   **options: object) -> Step:
    """An experiment verb (`launch`, `allreduce`, a search) of an importable function; `args` are launch's
    args_dict or a search's space. The reference: the experiment id, its logdir, its numeric metrics and the
    datasets the run read (`datasets`). `reads`: datasets the run must have read, and `reads_view` ({"name",
    "version", "after"}): a training dataset version of that view newer than `after` it must have made (a function
    that splits the view itself); a run that read something else fails the step, naming what it read."""
    from hopsml import experiment
    from hopsml.runs.rerun import read_lineage
    from hopsml.tracking.record import read_record

    if verb not in VERBS:
        raise StepError(f"experiment {name!r}: verb {verb!r} is not one of {', '.join(VERBS)}")
    fn = import_function(function)
    call = getattr(experiment, verb)
    # the settings go with the call: an Airflow worker runs many tasks in one process, and an environment set
    # for one of them would reach the others
    if verb == "allreduce":
        result = call(fn, name=name, settings=settings, **options)
    else:
        result = call(fn, dict(args or {}), name=name, settings=settings, **options)
    logdir = str(result[0])
    exp_id = logdir.rstrip("/").rsplit("/", 1)[-1]
    record = read_record(Storage(settings.root), settings.project, exp_id)
    answer = result[-1]
    metrics = {k: v for k, v in answer.items() if isinstance(v, (int, float)) and not isinstance(v, bool)} \
        if isinstance(answer, Mapping) else {}
    storage = Storage(settings.root)
    read = read_lineage(storage, layout.ExperimentDir.from_id(settings.project, exp_id))
    _check_reads(function, exp_id, read, reads, reads_view)
    ref = {"experiment_id": exp_id, "logdir": logdir, "name": name, "state": record.state, "metrics": metrics,
           "datasets": [str(d.get("name")) for d in read]}
    return Step(ref, [(assets.experiment(settings.project, name), {"experiment_id": exp_id})])


def _check_reads(function: str, exp_id: str, read: Sequence[Mapping[str, Any]], reads: Sequence[str] | None,
                 view: Mapping[str, Any] | None) -> None:
    """StepError when the run did not read the training data the pipeline made for it (the DAG retrained on
    old data otherwise, silently)."""
    names = [str(d.get("name")) for d in read]
    missing = [n for n in reads or () if n not in names]
    if missing:
        raise StepError(f"experiment {exp_id} ({function}) did not read {', '.join(map(repr, missing))}, the "
                        f"training data this pipeline made for it; it read {', '.join(names) or 'no dataset'}. "
                        "Pass the dataset's name in the argument the function reads it from")
    if view:
        newer = [d for d in read if d.get("view") == view.get("name") and d.get("view_version") == view.get("version")
                 and int(d.get("training_dataset_version") or 0) > int(view.get("after") or 0)]
        if not newer:
            raise StepError(f"experiment {exp_id} ({function}) made no training dataset version of feature view "
                            f"{view.get('name')}_{view.get('version')} newer than version {view.get('after')} (it "
                            f"read {', '.join(names) or 'no dataset'}); the function must split the view itself "
                            "(fv.train_test_split), not read a fixed version")


def _best_trial(exp_dir: str, record: object) -> str:
    """A search's best trial folder (its record names it); the run's own folder for the other verbs."""
    best = (getattr(record, "extra", None) or {}).get("best_logdir")
    return layout.join(exp_dir, str(best).rstrip("/").rsplit("/", 1)[-1]) if best else exp_dir


def _results(record: ExperimentRecord) -> dict[str, float]:
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
    try:
        previous = registry.versions(model_name, settings)
    except registry.ModelNotFoundError:
        previous = []
    mv = registry.export(storage.uri(found[0]), model_name, metrics=chosen, experiment_id=experiment_id,
                         settings=settings)
    linked = record_feature_view(settings, mv, previous[-1].version if previous else None)
    ref = {"model": mv.name, "version": mv.version, "path": mv.path, "metrics": mv.metrics,
           "experiment_id": experiment_id}
    if linked:   # the hsml record: the view and training dataset version it was trained on
        ref.update(feature_view=linked["feature_view"], training_dataset_version=linked["training_dataset_version"])
    return Step(ref, [(assets.model(settings.project, mv.name), {"version": mv.version})])


def training_dataset_of(settings: config.Settings, entry: Mapping[str, Any]) -> tuple[Any, int] | None:
    """(feature view, training dataset version) of a dataset a run read, None when it is no view's: an in-memory
    split names them in its lineage entry; a written one is found among the views' training dataset records."""
    from hopsml.featurestore.store import FeatureStore

    if entry.get("kind") != "training_dataset":
        return None
    store = FeatureStore(settings)
    if entry.get("view"):
        return (store.get_feature_view(str(entry["view"]), int(entry["view_version"])),
                int(entry["training_dataset_version"]))
    for view in store.get_feature_views():
        for record in view.get_training_datasets():
            if record.get("dataset") == entry.get("name"):
                return view, int(record["version"])
    return None


def record_feature_view(settings: config.Settings, mv: ModelVersion, previous: int | None) -> dict[str, Any]:
    """The hsml record of a version exported from a run that read a feature view's training dataset: its view
    and training dataset version (so `model.get_feature_view()` and a predictor's `init_serving` use that
    version's statistics), with the framework, input example and schema of the version before it."""
    found = next(filter(None, (training_dataset_of(settings, d) for d in mv.datasets)), None)
    if found is None:
        return {}
    storage = Storage(settings.root)
    before: dict[str, Any] = {}
    if previous is not None:
        rel = layout.join(layout.model_dir(settings.project, mv.name, previous), layout.HSML_RECORD)
        before = dict(storage.read_json(rel)) if storage.exists(rel) else {}
    view, td_version = found
    record = {"framework": before.get("framework", "python"), "input_example": before.get("input_example"),
              "model_schema": before.get("model_schema"),
              "feature_view": {"name": view.name, "version": view.version},
              "training_dataset_version": td_version}
    storage.write_json(layout.join(layout.model_dir(settings.project, mv.name, mv.version), layout.HSML_RECORD),
                       record)
    log.info("model %s version %d: trained on feature view %s training dataset version %d", mv.name, mv.version,
             view.key, td_version)
    return record


def best_model(settings: config.Settings, model_name: str, metric: str, direction: str = "max") -> Step:
    """The version of `model_name` with the best `metric`: the one to promote to the serving."""
    from hopsml.model import registry

    mv = registry.get_best_model(model_name, metric, direction, settings=settings)
    return Step({"model": mv.name, "version": mv.version, "metric": metric, "value": mv.metrics[metric]})


# --- servings -------------------------------------------------------------------------------------------
def _serving_ref(settings: config.Settings, serving_name: str) -> dict[str, Any]:
    from hopsml.serving.control import lifecycle

    s = lifecycle.get(serving_name, settings)
    return {"serving": serving_name, "status": str(s.status), "model": s.model_name, "version": s.model_version,
            "port": s.port}


def create_serving(settings: config.Settings, serving_name: str, model_name: str, model_version: int | None = None,
                   **options: Any) -> Step:
    """Define (or redefine) serving `serving_name` on a version of `model_name` (the newest when None); a running
    serving restarts on it. `options` are create_or_update's keywords; an option group may be a dict of its fields
    (`{"batching": {"max_batch_size": 8}}`), so that a DAG file holds plain data."""
    from hopsml.model import registry
    from hopsml.serving import definition as defs
    from hopsml.serving.control import lifecycle

    groups = {group.KEYWORD: group for group in defs.OPTION_GROUPS}
    options = {key: groups[key](**value) if key in groups and isinstance(value, Mapping) else value
               for key, value in options.items()}
    version = int(model_version) if model_version else registry.get_model(model_name, settings=settings).version
    lifecycle.create_or_update(serving_name, layout.model_versions_dir(settings.project, model_name),
                               model_version=version, settings=settings, **options)
    ref = _serving_ref(settings, serving_name)
    return Step(ref, [(assets.serving(settings.project, serving_name), {"model": model_name, "version": version})])


def deploy_canary(settings: config.Settings, serving_name: str, model_name: str, model_version: int,
                  traffic_percent: int = 20) -> Step:
    """Version `model_version` as the canary of the running serving `serving_name`, beside its stable version,
    with the serving's stored definition carried over (canary.deploy). The reference says when the canary began
    taking requests (`since`), so the traffic the gate judges is the canary's own."""
    import datetime as dt

    from hopsml.serving.control import canary, lifecycle

    serving = lifecycle.get(serving_name, settings)
    if serving.model_name != model_name:
        raise StepError(f"serving {serving_name!r} serves model {serving.model_name!r}, not {model_name!r}")
    if str(serving.status) != "Running":
        raise StepError(f"serving {serving_name!r} is {serving.status}: a canary is judged on the requests a running "
                        f"serving gets; start it (hopsml serving start {serving_name}) and run the task again")
    canary.deploy(serving_name, int(model_version), int(traffic_percent), settings)
    since = dt.datetime.now(dt.timezone.utc).isoformat()
    ref = _serving_ref(settings, serving_name) | {"canary": int(model_version), "stable": serving.model_version,
                                                  "percent": int(traffic_percent), "since": since}
    return Step(ref, [(assets.serving(settings.project, serving_name),
                       {"model": model_name, "canary": int(model_version)})])


def canary_gate(settings: config.Settings, serving_name: str, *, window_s: float = 3600.0, min_requests: int = 50,
                **thresholds: Any) -> Step:
    """The skew-gated decision on the serving's canary (canary.gate, judging the canary's own requests against its
    own training dataset), not carried out: the reference says 'promote' or 'roll back', with the reasons."""
    from hopsml.serving.control import canary

    report = canary.gate(serving_name, window_s=window_s, min_requests=min_requests, act=False, settings=settings,
                         **thresholds)
    decision = str(report["decision"])
    if decision.startswith("waiting"):
        raise StepError(f"gate on serving {serving_name!r} cannot decide: {'; '.join(report['reasons'])}")
    return Step({"serving": serving_name, "decision": "promote" if decision.startswith("promoted") else "roll back",
                 "canary": report["canary"], "stable": report["stable"], "reasons": report["reasons"],
                 "figures": report["figures"]})


def canary_rollout(settings: config.Settings, serving_name: str, decision: str,
                   reasons: Sequence[str] = (), figures: Mapping[str, Any] | None = None) -> Step:
    """Carry out the gate's decision: 'promote' makes the canary the stable version, 'roll back' drops it (the
    stable version takes every request again) and then fails the step with the gate's reasons (GateFailed), so the
    run says the new version was refused."""
    from hopsml.serving.control import canary, lifecycle

    if decision not in ("promote", "roll back"):
        raise StepError(f"serving {serving_name!r}: decision {decision!r} is neither 'promote' nor 'roll back'")
    d = lifecycle.get(serving_name, settings)
    if d.canary_version is None:
        raise StepError(f"serving {serving_name!r} has no canary to {decision} (was it decided by hand?)")
    if figures is None:   # the gate's figures, from its record of the decision it did not carry out
        gated = canary.last_decision(serving_name, settings) or {}
        figures = gated.get("figures") if gated.get("canary") == d.canary_version else None
    act = canary.promote if decision == "promote" else canary.rollback
    act(serving_name, settings, reasons=list(reasons) or [f"{decision} as the gate decided"],
        figures=dict(figures or {}))
    ref = _serving_ref(settings, serving_name) | {"decision": decision, "canary": d.canary_version,
                                                  "previous": d.model_version}
    if decision == "roll back":
        raise GateFailed(f"serving {serving_name!r}: canary version {d.canary_version} rolled back, version "
                         f"{d.model_version} serves every request again: {'; '.join(reasons)}", ref)
    return Step(ref, [(assets.serving(settings.project, serving_name),
                       {"model": d.model_name, "version": d.canary_version})])


def check_serving(settings: config.Settings, serving_name: str, instances: Sequence[Any] | None = None,
                  timeout_s: float = 60.0, canary_version: int | None = None) -> Step:
    """The deployment answers: Running, no canary left undecided, its stable version AVAILABLE at the model's
    status endpoint, and (with `instances`) a prediction for them. With `canary_version` (the canary a run
    deployed), GateFailed after those checks when that canary was rolled back, so the run ends failed while the
    deployment answers on."""
    import json
    import urllib.error
    import urllib.request

    from hopsml.serving.control import lifecycle

    serving = lifecycle.get(serving_name, settings)
    if str(serving.status) != "Running" or not serving.internal_ips:
        raise StepError(f"serving {serving_name!r} is {serving.status}, not Running: "
                        f"{serving.status.reason or 'see hopsml serving logs ' + serving_name}")
    if serving.canary_version is not None:
        raise StepError(f"serving {serving_name!r} still has canary version {serving.canary_version} undecided; "
                        f"promote or roll it back (hopsml serving promote|rollback {serving_name})")
    host = serving.internal_ips[0]
    url = (f"http://{'[' + host + ']' if ':' in host else host}:{serving.internal_port}/v1/models/{serving_name}"
           f"/versions/{serving.model_version}")
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as answer:
            status = json.loads(answer.read())
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise StepError(f"serving {serving_name!r} does not answer at {url}: {exc}") from None
    states = [s.get("state") for s in status.get("model_version_status", [])]
    if "AVAILABLE" not in states:
        raise StepError(f"serving {serving_name!r}: version {serving.model_version} is {states or 'not listed'}, "
                        f"not AVAILABLE, at {url}")
    ref: dict[str, Any] = {"serving": serving_name, "model": serving.model_name, "version": serving.model_version,
                           "status": str(serving.status)}
    if instances:
        answer = lifecycle.make_inference_request(serving_name, list(instances), timeout_s=timeout_s,
                                                  settings=settings)
        ref["predictions"] = len(answer.get("predictions") or [])
    if canary_version is not None:
        from hopsml.serving.control import canary

        decided = canary.last_decision(serving_name, settings) or {}
        if decided.get("canary") == int(canary_version) and decided.get("decision") == "rolled back":
            raise GateFailed(f"serving {serving_name!r} answers on version {serving.model_version}; canary version "
                             f"{canary_version} was rolled back: {'; '.join(decided.get('reasons', []))}", ref)
    return Step(ref)


def start_serving(settings: config.Settings, serving_name: str, timeout_s: float = 300.0) -> Step:
    from hopsml.serving.control import lifecycle

    lifecycle.start(serving_name, timeout_s=timeout_s, settings=settings)
    return Step(_serving_ref(settings, serving_name), [(assets.serving(settings.project, serving_name), {})])


def stop_serving(settings: config.Settings, serving_name: str) -> Step:
    from hopsml.serving.control import lifecycle

    lifecycle.stop(serving_name, settings=settings)
    return Step(_serving_ref(settings, serving_name), [(assets.serving(settings.project, serving_name), {})])


# --- gates ----------------------------------------------------------------------------------------------
def monitor_gate(settings: config.Settings, serving_name: str, *, psi_threshold: float = 0.2,
                 ks_threshold: float = 0.2, max_drifted: int = 0, require_preprocessing: bool = True,
                 dataset: str | None = None) -> Step:
    """serving.monitor on what the serving logged; GateFailed when more than `max_drifted` features drift or (with
    `require_preprocessing`) the served rows were not preprocessed as in training."""
    from hopsml.serving.analysis.monitor import monitor, report_text

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
