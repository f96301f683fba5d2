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
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from hopsml import config
from hopsml.airflow import assets
from hopsml.airflow.steps import StepError
from hopsml.fs import Storage


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


def _literal(value: Any, indent: int) -> str:
    text = pprint.pformat(value, width=110 - indent, sort_dicts=False)
    return text.replace("\n", "\n" + " " * indent)


def _var(text: str) -> str:
    name = re.sub(r"\W+", "_", text).strip("_").lower() or "task"
    return name if not name[0].isdigit() else f"t_{name}"


def _defaults(fn: Any) -> dict[str, Any]:
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


def _args(hyperparameters: dict[str, Any], renamed: Mapping[str, str]) -> str:
    """The recorded parameters as a dict literal; one naming a training dataset takes the new one's name."""
    if not any(isinstance(v, str) and v in renamed for v in hyperparameters.values()):
        return _literal(hyperparameters, 12)
    items = [f"{k!r}: {renamed[v] if isinstance(v, str) and v in renamed else repr(v)}"
             for k, v in hyperparameters.items()]
    return "{" + ", ".join(items) + "}"


def _experiment_options(rec: Any, verb: str) -> dict[str, Any]:
    options: dict[str, Any] = {"seed": rec.seed} if rec.seed is not None else {}
    if verb == "launch" and rec.metric_key:
        options["metric_key"] = rec.metric_key
    if verb == "allreduce":
        options["num_workers"] = rec.executors
    if verb.endswith("_search") or verb == "differential_evolution":
        options.update(direction=rec.direction or "max", optimization_key=rec.optimization_key or "metric")
    return options


def plan(settings: config.Settings, model_name: str, serving_name: str | None = None) -> tuple[Any, _Plan]:
    """The model's current version and the tasks that would make it again."""
    from hopsml.data import dataset as ds
    from hopsml.model import registry
    from hopsml.runs.rerun import verb_of
    from hopsml.serving import lifecycle
    from hopsml.tracking.record import read_record

    storage = Storage(settings.root)
    mv = registry.get_model(model_name, settings=settings)
    if not mv.experiment or not mv.experiment.get("id"):
        raise StepError(f"model {model_name!r} version {mv.version} records no experiment (it was exported outside "
                        "a run and without experiment_id), so there is no lineage to re-run")
    rec = read_record(storage, settings.project, mv.experiment["id"])
    if not rec.module or not rec.function or "<locals>" in rec.function or rec.module == "__main__":
        raise StepError(f"experiment {rec.id} ran {rec.module}.{rec.function}, which cannot be imported by name; "
                        "move the training function into a module the Airflow workers can import")
    result = _Plan()
    data_tasks = []
    renamed: dict[str, str] = {}   # a training dataset's name -> the new one's, taken from its task's XCom
    for used in mv.datasets:
        name = used["name"]
        _, manifest = ds.open_dataset(storage, settings.project, name)
        if manifest.get("kind") == "training_dataset":
            data_tasks.append(_training_dataset_task(settings, name, result))
            renamed[name] = f'{data_tasks[-1].var}.output["dataset"]'
        else:
            data_tasks.append(_prep_task(name, manifest))
    verb = verb_of(rec)
    train = _Task("train", "ExperimentOperator",
                  {"function": repr(f"{rec.module}:{rec.function}"), "verb": repr(verb),
                   "args": _args(dict(rec.hyperparameters), renamed), "name": repr(rec.name),
                   "options": _literal(_experiment_options(rec, verb), 12)},
                  f"experiment {rec.id} as it ran: the same function, parameters and seed")
    model_file = mv.files[0]["path"].rsplit("/", 1)[-1] if mv.files else "model"
    export = _Task("export", "ModelExportOperator",
                   {"model_name": repr(mv.name), "experiment_id": 'train.output["experiment_id"]',
                    "model_file": repr(model_file), "metrics": repr(sorted(mv.metrics)) if mv.metrics else "None"},
                   f"a new version of model {mv.name!r} (version {mv.version} had {mv.metrics})")
    result.tasks = [*data_tasks, train, export]
    servings = [s.name for s in lifecycle.get_all(settings) if s.model_name == mv.name]
    if serving_name is not None:
        servings = [serving_name]
    for name in servings[:1]:
        result.tasks.append(_Task("serve", "CreateServingOperator",
                                  {"serving_name": repr(name), "model_name": repr(mv.name),
                                   "model_version": 'export.output["version"]'},
                                  f"serving {name!r} moves to the new version (restarted when it runs)"))
        result.tasks.append(_Task("gate", "MonitorGateOperator", {"serving_name": repr(name), "max_drifted": "0"},
                                  "fail the run when what the serving logged drifts from the training data"))
    return mv, result


def dag_source(settings: config.Settings, model_name: str, schedule: str | None = None,
               dag_id: str | None = None, serving_name: str | None = None) -> str:
    """The DAG file's text. `schedule`: a cron expression or preset ('@daily'), 'none', or None for the upstream
    feature groups' Assets (manual runs when there are none)."""
    mv, the_plan = plan(settings, model_name, serving_name)
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
