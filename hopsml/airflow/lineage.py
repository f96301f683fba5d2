"""A pipeline from lineage: the Airflow DAG file that re-runs what produced a model's current version.

The model's record names the experiment that trained it and the datasets that experiment read; each dataset's
manifest says how it was made (a table or image prep from a source, or a feature view's training dataset over
feature groups). `dag_source` turns that into readable Python a user keeps and edits: prepare (or a training
dataset) -> the experiment with its recorded function, parameters and seed -> export -> serving update -> monitor
gate, scheduled on the upstream feature groups' Assets when there are any. No Airflow import: the text is written
anywhere, Airflow reads it where it runs.
"""

from __future__ import annotations

import datetime as dt
import inspect
import pprint
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from hopsml import config
from hopsml.airflow import assets
from hopsml.airflow.steps import StepError
from hopsml.fs import Storage

if TYPE_CHECKING:
    from hopsml.tracking.record import ExperimentRecord


@dataclass
class _Task:
    """One task of the DAG to write: its variable, operator, keyword arguments (Python source text each)."""

    var: str
    operator: str
    kwargs: dict[str, str]
    comment: str = ""


@dataclass
class _Plan:
    tasks: list[_Task] = field(default_factory=list)
    upstream_assets: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _literal(value: object, indent: int) -> str:
    text = pprint.pformat(value, width=110 - indent, sort_dicts=False)
    return text.replace("\n", "\n" + " " * indent)


def _var(text: str) -> str:
    name = re.sub(r"\W+", "_", text).strip("_").lower() or "task"
    return name if not name[0].isdigit() else f"t_{name}"


def _defaults(fn: Callable[..., Any]) -> dict[str, Any]:
    return {n: p.default for n, p in inspect.signature(fn).parameters.items() if p.default is not p.empty}


def _prep_task(name: str, manifest: Mapping[str, Any]) -> _Task:
    """A PrepareDatasetOperator with the options the dataset was made with (those that differ from the defaults)."""
    from hopsml.data.images import prepare_images
    from hopsml.data.tables import prepare_table

    kind = manifest.get("kind")
    fn = prepare_table if kind == "table" else prepare_images
    defaults = _defaults(fn)
    recorded = manifest.get("options") or {}
    options = {k: (list(v) if isinstance(v, tuple) else v) for k, v in recorded.items()
               if k in defaults and k not in ("settings", "spark", "overwrite")
               and (list(defaults[k]) if isinstance(defaults[k], tuple) else defaults[k]) != v}
    if kind == "table":
        options = {"label": recorded.get("label"), **options}
    options["overwrite"] = True   # a re-run replaces the dataset it made before
    source = str(manifest.get("source") or "")
    if not source or source.startswith("hopsml-sample:"):
        raise StepError(f"dataset {name!r} was prepared from {source or 'an unrecorded source'!r}, which a DAG "
                        "cannot read again; prepare it from a file or folder the workers can reach")
    return _Task(f"prepare_{_var(name)}", "PrepareDatasetOperator",
                 {"src": repr(source), "dataset": repr(name), "kind": repr("table" if kind == "table" else "images"),
                  "options": _literal(options, 12)}, f"dataset {name!r}, as it was prepared")


def _training_dataset_task(settings: config.Settings, name: str, plan: _Plan) -> _Task:
    """A TrainingDatasetOperator for the feature view whose training dataset `name` is; its groups' Assets
    become the DAG's schedule."""
    from hopsml.featurestore.store import FeatureStore

    store = FeatureStore(settings)
    for view in store.get_feature_views():
        for record in view.get_training_datasets():
            if record.get("dataset") != name:
                continue
            split = record.get("split") or {}
            test_size = (split.get("sizes") or {}).get("test") if split.get("type") == "random" else None
            for group in view.query.groups():
                uri = assets.featuregroup(settings.project, group.name, group.version)
                if uri not in plan.upstream_assets:
                    plan.upstream_assets.append(uri)
            return _Task(f"training_dataset_{_var(view.name)}", "TrainingDatasetOperator",
                         {"view": repr(view.name), "view_version": repr(view.version),
                          "test_size": repr(test_size), "seed": repr(split.get("seed"))},
                         f"a new training dataset of feature view {view.key!r} (the model read version "
                         f"{record.get('version')}, {name!r})")
    raise StepError(f"dataset {name!r} is a training dataset, but no feature view of project {settings.project!r} "
                    "lists it; was the view deleted?")


def _args(hyperparameters: Mapping[str, Any], bound: Mapping[str, str]) -> str:
    """The recorded parameters as a dict literal, with each argument in `bound` (a parameter that names a training
    dataset) taking the new dataset's name (Python source text: an XCom of the task that makes it)."""
    if not bound:
        return _literal(dict(hyperparameters), 12)
    items = [f"{k!r}: {bound[k] if k in bound else repr(v)}" for k, v in hyperparameters.items()]
    items += [f"{k!r}: {expr}" for k, expr in bound.items() if k not in hyperparameters]
    return "{" + ", ".join(items) + "}"


def _bind(rec: ExperimentRecord, fn: Callable[..., Any], verb: str, old: str, new: str, bound: dict[str, str]) -> None:
    """The rule that hands a re-run its new training dataset: the argument whose recorded value named the old
    one, else the parameter whose default named it, gets the new name; with neither, the DAG is refused (the run
    would read the old rows again)."""
    where = f"{rec.module}.{rec.function}"
    named = [k for k, v in rec.hyperparameters.items() if v == old]
    if not named:
        named = [k for k, v in _defaults(fn).items() if v == old]
        if named and verb != "launch":
            raise StepError(f"{where} read training dataset {old!r} through the default of its parameter "
                            f"{named[0]!r}, which a {verb} run cannot be given; pass it as an argument "
                            "(experiment.launch(fn, {...})) or in the search space, and run it again")
    if not named:
        raise StepError(f"{where} read training dataset {old!r}, but neither an argument it was given nor a default "
                        "of its parameters names it, so a DAG cannot hand it the new training dataset (it would "
                        f"train on {old!r} again); give the function a parameter for it (def "
                        f"{rec.function}(dataset={old!r})) or pass the name in its arguments, and run it again")
    bound[named[0]] = new


def _function(rec: ExperimentRecord) -> Callable[..., Any]:
    """The experiment's training function, imported by name as the workers will; StepError naming it and why
    when it cannot be re-run."""
    from hopsml.airflow.steps import import_function

    where = f"{rec.module}.{rec.function}" if rec.module else str(rec.function)
    if not rec.module or not rec.function or "<locals>" in rec.function or rec.module == "__main__":
        raise StepError(f"experiment {rec.id} ran {where}, which cannot be re-run: a function defined in a notebook "
                        "or script (__main__) or inside another function cannot be imported by name; move it into "
                        "a module the Airflow workers can import and run it again")
    try:
        return import_function(f"{rec.module}:{rec.function}")
    except StepError as exc:
        raise StepError(f"experiment {rec.id} ran {where}, which cannot be re-run here: {exc}") from None


def _experiment_options(rec: ExperimentRecord, verb: str) -> dict[str, Any]:
    options: dict[str, Any] = {"seed": rec.seed} if rec.seed is not None else {}
    if verb == "launch" and rec.metric_key:
        options["metric_key"] = rec.metric_key
    if verb == "allreduce":
        options["num_workers"] = rec.executors
    if verb.endswith("_search") or verb == "differential_evolution":
        options.update(direction=rec.direction or "max", optimization_key=rec.optimization_key or "metric")
    return options


@dataclass(frozen=True)
class Canary:
    """How the DAG rolls a new version out: the canary's share of the requests, how many of its own requests the
    gate waits for (and how long, polling every `poke_interval_s`), and the window the gate judges."""

    traffic_percent: int = 20
    min_requests: int = 50
    timeout_s: float = 3600.0
    poke_interval_s: float = 30.0
    window_s: float = 3600.0
    max_p99_ratio: float = 1.5       # the canary's p99 latency over the stable version's

    def __post_init__(self) -> None:
        if not 0 < self.traffic_percent < 100:
            raise StepError(f"canary traffic_percent {self.traffic_percent}: give 1-99 (the stable version keeps "
                            "the rest)")
        if self.min_requests < 1 or self.timeout_s <= 0 or self.poke_interval_s <= 0:
            raise StepError("canary min_requests, timeout_s and poke_interval_s must be above 0")


def plan(settings: config.Settings, model_name: str, serving_name: str | None = None,
         canary: Canary | None = None) -> tuple[Any, _Plan]:
    """The model's current version and the tasks that would make it again and roll it out."""
    from hopsml.data import dataset as ds
    from hopsml.model import registry
    from hopsml.runs.rerun import verb_of
    from hopsml.serving.control import lifecycle
    from hopsml.tracking.record import read_record

    canary = canary or Canary()
    storage = Storage(settings.root)
    mv = registry.get_model(model_name, settings=settings)
    if not mv.experiment or not mv.experiment.get("id"):
        raise StepError(f"model {model_name!r} version {mv.version} records no experiment (it was exported outside "
                        "a run and without experiment_id), so there is no lineage to re-run")
    rec = read_record(storage, settings.project, mv.experiment["id"])
    fn = _function(rec)
    verb = verb_of(rec)
    result = _Plan()
    data_tasks = []
    bound: dict[str, str] = {}        # argument -> the new training dataset's name (an XCom)
    reads: list[str] = []
    reads_view: dict[str, Any] | None = None
    for used in mv.datasets:
        name = used["name"]
        if used.get("kind") == "training_dataset" and used.get("view"):   # split in memory by the function itself
            _upstream(settings, str(used["view"]), int(used["view_version"]), result)
            reads_view = {"name": used["view"], "version": int(used["view_version"]),
                          "after": int(used["training_dataset_version"])}
            result.notes.append(f"{rec.module}.{rec.function} splits feature view {used['view']} itself; the run "
                                "must make a newer training dataset version of it")
            continue
        _, manifest = ds.open_dataset(storage, settings.project, name)
        if manifest.get("kind") == "training_dataset":
            data_tasks.append(_training_dataset_task(settings, name, result))
            new = f'{data_tasks[-1].var}.output["dataset"]'
            _bind(rec, fn, verb, name, new, bound)
            reads.append(new)
        else:
            data_tasks.append(_prep_task(name, manifest))
    train_kwargs = {"function": repr(f"{rec.module}:{rec.function}"), "verb": repr(verb),
                    "args": _args(dict(rec.hyperparameters), bound), "name": repr(rec.name),
                    "options": _literal(_experiment_options(rec, verb), 12)}
    if reads:
        train_kwargs["reads"] = "[" + ", ".join(reads) + "]"
    if reads_view:
        train_kwargs["reads_view"] = repr(reads_view)
    how = f"; the new training dataset goes in as {', '.join(map(repr, bound))}" if bound else ""
    train = _Task("train", "ExperimentOperator", train_kwargs,
                  f"experiment {rec.id} as it ran: the same function, parameters and seed{how}")
    model_file = mv.files[0]["path"].rsplit("/", 1)[-1] if mv.files else "model"
    export = _Task("export", "ModelExportOperator",
                   {"model_name": repr(mv.name), "experiment_id": 'train.output["experiment_id"]',
                    "model_file": repr(model_file), "metrics": repr(sorted(mv.metrics)) if mv.metrics else "None"},
                   f"a new version of model {mv.name!r} (version {mv.version} had {mv.metrics}), with its feature view "
                   "and training dataset")
    result.tasks = [*data_tasks, train, export]
    servings = [s.name for s in lifecycle.get_all(settings) if s.model_name == mv.name]
    if serving_name is not None:   # 'none': no rollout, the loop ends at the new version
        servings = [] if serving_name.lower() == "none" else [lifecycle.get(serving_name, settings).name]
    for name in servings[:1]:
        result.tasks += _rollout_tasks(settings, name, mv.name, canary)
    return mv, result


def _upstream(settings: config.Settings, view_name: str, view_version: int, plan: _Plan) -> None:
    """The view's feature groups' Assets, the DAG's schedule."""
    from hopsml.featurestore.store import FeatureStore

    view = FeatureStore(settings).get_feature_view(view_name, view_version)
    for group in view.query.groups():
        uri = assets.featuregroup(settings.project, group.name, group.version)
        if uri not in plan.upstream_assets:
            plan.upstream_assets.append(uri)


def _rollout_tasks(settings: config.Settings, serving_name: str, model_name: str, canary: Canary) -> list[_Task]:
    """The new version as a canary of the serving, the wait for its own requests, the gate, the rollout and the
    final check."""
    from hopsml.serving import definition as defs

    d = defs.read(Storage(settings.root), settings.project, serving_name)
    if not d.logs_inferences:
        raise StepError(f"serving {serving_name!r} logs no inferences (inference_logging={d.inference_logging!r}), "
                        "and the canary gate judges the canary's logged requests; turn logging on "
                        f"(create_or_update({serving_name!r}, ..., inference_logging='ALL')) or pass --serving")
    return [
        _Task("canary", "DeployCanaryOperator",
              {"serving_name": repr(serving_name), "model_name": repr(model_name),
               "model_version": 'export.output["version"]', "traffic_percent": "CANARY_PERCENT"},
              f"the new version beside the one serving {serving_name!r} takes CANARY_PERCENT% of its requests; "
              "the serving's definition (scripts, batching, instances, logging) is read when this runs"),
        _Task("canary_requests", "CanaryRequestsSensor",
              {"serving_name": repr(serving_name), "canary_version": 'canary.output["canary"]',
               "since": 'canary.output["since"]', "min_requests": "MIN_REQUESTS", "timeout_s": "CANARY_TIMEOUT_S",
               "poke_interval": "POKE_INTERVAL_S"},
              "wait for MIN_REQUESTS of the clients' requests answered by the canary (none are made up)"),
        _Task("canary_gate", "CanaryGateOperator",
              {"serving_name": repr(serving_name), "min_requests": "MIN_REQUESTS", "window_s": "GATE_WINDOW_S",
               "thresholds": "GATE_THRESHOLDS"},
              "the canary's own requests against its own training dataset (skew), and against the stable version"),
        _Task("rollout", "CanaryRolloutOperator",
              {"serving_name": repr(serving_name), "decision": 'canary_gate.output["decision"]',
               "reasons": 'canary_gate.output["reasons"]'},
              "promote the canary, or roll it back (the task then fails with the gate's reasons)"),
        _Task("check", "ServingCheckOperator", {"serving_name": repr(serving_name),
                                                "canary_version": 'canary.output["canary"]'},
              "whatever the rollout did, the deployment answers; the run fails when the canary was rolled back"),
    ]


def dag_source(settings: config.Settings, model_name: str, schedule: str | None = None,
               dag_id: str | None = None, serving_name: str | None = None, canary: Canary | None = None) -> str:
    """The DAG file's text. `schedule`: a cron expression or preset ('@daily'), 'none', or None for the upstream
    feature groups' Assets (manual runs when there are none)."""
    canary = canary or Canary()
    mv, the_plan = plan(settings, model_name, serving_name, canary)
    dag_id = dag_id or f"retrain_{_var(mv.name)}"
    operators = sorted({t.operator for t in the_plan.tasks})
    if schedule is None and the_plan.upstream_assets:
        schedule_text = "[" + ", ".join(f"Asset({uri!r})" for uri in the_plan.upstream_assets) + "]"
        schedule_note = "a new commit to any of these feature groups starts a run"
    elif schedule is None or schedule.lower() == "none":
        schedule_text, schedule_note = "None", "runs when triggered (airflow dags trigger, or dag.test())"
    else:
        schedule_text, schedule_note = repr(schedule), "on this schedule"
    chain = " -> ".join(t.var for t in the_plan.tasks)
    lines = [
        f'"""Re-runs what produced model {mv.name!r} version {mv.version} of project {settings.project!r}, from its '
        "recorded lineage:",
        f"{chain}.",
        *the_plan.notes,
        "",
        f"Written by `hopsml pipelines dag {mv.name}` on {dt.date.today().isoformat()}; keep it and edit it. Run it "
        "here with",
        f"`airflow dags test {dag_id}` (no Airflow services needed) or on an Airflow whose workers reach the "
        'project root."""',
        "",
        "import datetime as dt",
        "",
        "from airflow.sdk import DAG" + (", Asset" if "Asset(" in schedule_text else ""),
        "",
        "from hopsml.airflow import " + ", ".join(operators),
        "",
        f"PROJECT = {settings.project!r}",
        "ROOT = None  # the workers' HOPSML_ROOT; set a path or URI (hdfs://, s3://) to pin it",
        "",
    ]
    if any(t.operator == "DeployCanaryOperator" for t in the_plan.tasks):
        lines += [
            f"CANARY_PERCENT = {canary.traffic_percent}  # of the serving's requests the new version takes",
            f"MIN_REQUESTS = {canary.min_requests}  # the canary's own answered requests the gate waits for",
            f"CANARY_TIMEOUT_S = {canary.timeout_s:g}  # fail the wait when fewer came in this long",
            f"POKE_INTERVAL_S = {canary.poke_interval_s:g}",
            f"GATE_WINDOW_S = {canary.window_s:g}  # the gate judges the requests of this last window",
            "# canary.gate's thresholds: psi_threshold, ks_threshold (the canary's features against its training",
            "# data), max_prediction_psi, max_error_rate_increase, max_p99_ratio (against the stable version)",
            f"GATE_THRESHOLDS = {{'max_p99_ratio': {canary.max_p99_ratio:g}}}",
            "",
        ]
    lines += [
        "with DAG(",
        f"    dag_id={dag_id!r},",
        f"    schedule={schedule_text},  # {schedule_note}",
        "    start_date=dt.datetime(2026, 1, 1),",
        "    catchup=False,",
        "    max_active_runs=1,",
        "    default_args={\"retries\": 1},",
        f"    tags=[\"hopsml\", {('model:' + mv.name)!r}],",
        ") as dag:",
    ]
    for task in the_plan.tasks:
        if task.comment:
            lines.append(f"    # {task.comment}")
        lines.append(f"    {task.var} = {task.operator}(")
        lines.append(f"        task_id={task.var!r},")
        lines += [f"        {key}={value}," for key, value in task.kwargs.items()]
        lines.append("        project=PROJECT,")
        lines.append("        root=ROOT,")
        lines.append("    )")
    lines.append("    " + " >> ".join(t.var for t in the_plan.tasks))
    lines += ["", "", 'if __name__ == "__main__":', "    dag.test()", ""]
    return "\n".join(lines)
