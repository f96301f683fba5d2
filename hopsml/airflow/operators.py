"""Airflow 3 operators for hopsml's pipeline steps: run a named job, prepare a dataset, insert into a feature
group, create a training dataset, run an experiment verb, export or pick a model, create/start/stop a serving,
and the gates that fail a run on drift or failed validation.

Each operator is thin: it maps its arguments to one function of `steps.py` (or `checks.py` for jobs), pushes the
small reference that returns to XCom, and emits events on its outlets, the Assets named after the project's
objects (assets.py), so `schedule=[Asset("hopsml://demo/featuregroups/iris/1")]` runs a DAG after each commit.
Bad input and missing objects fail the task at once (no retry); a failed job execution fails it with its log tail.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from airflow.sdk import Asset, AssetAlias, BaseOperator
from airflow.sdk.exceptions import AirflowFailException

from hopsml import config
from hopsml.airflow import assets, checks, steps

if TYPE_CHECKING:
    from airflow.sdk import Context

log = logging.getLogger(__name__)

# Errors that a retry cannot mend: a missing object, a bad argument, a gate over its thresholds.
_FINAL = (steps.StepError, steps.GateFailed, LookupError, ValueError, TypeError)


def _serving(name: str) -> str:
    """A serving's name checked when the DAG is parsed, so a bad one never reaches a run."""
    from hopsml.serving.definition import check_name

    return check_name(name)


def _int(value: int | str | None) -> int | None:
    """A version from an argument or a rendered template ('3', 3, None)."""
    return None if value in (None, "", "None") else int(value)


class HopsmlOperator(BaseOperator):
    """The base of every hopsml operator: the project (`root`, `project`, else HOPSML_ROOT/HOPSML_PROJECT), the
    step's reference to XCom (whole, and key by key), and events on the outlets it names."""

    ui_color = "#e8f1fb"

    def __init__(self, *, root: str | None = None, project: str | None = None, **kwargs: Any) -> None:
        self.root, self.project = root, project
        kwargs.setdefault("multiple_outputs", True)   # each key its own XCom too: train.output["experiment_id"]
        outlets = list(kwargs.pop("outlets", None) or [])
        outlets += [Asset(uri) for uri in self.asset_uris() if all(getattr(o, "uri", None) != uri for o in outlets)]
        super().__init__(outlets=outlets, **kwargs)

    @property
    def project_name(self) -> str:
        """The project at parse time (the Assets' names need it before the task runs)."""
        return str(config.value("project", self.project))

    def asset_uris(self) -> list[str]:
        """The Assets this operator changes, known before it runs (its outlets)."""
        return []

    def run_step(self, settings: config.Settings, context: Context) -> steps.Step:
        raise NotImplementedError

    def execute(self, context: Context) -> dict[str, Any]:
        settings = steps.settings_for(self.root, self.project)
        try:
            step = self.run_step(settings, context)
        except _FINAL as exc:
            raise AirflowFailException(f"{self.task_id}: {exc}") from exc
        self.emit(context, step.events)
        return step.ref

    def emit(self, context: Context, events: Sequence[tuple[str, Mapping[str, Any]]]) -> None:
        """The extra of each event on an outlet (its commit, version); objects known only now (what a job
        produced) through the operator's AssetAlias."""
        outlet_events = context["outlet_events"]
        declared = {getattr(o, "uri", None) for o in self.outlets}
        aliases = [o for o in self.outlets if isinstance(o, AssetAlias)]
        for uri, extra in events:
            if uri in declared:
                outlet_events[Asset(uri)].extra.update(extra)
            elif aliases:
                outlet_events[aliases[0]].add(Asset(uri), extra=dict(extra))


class HopsmlJobOperator(HopsmlOperator):
    """Run hopsml job `job_name` with `args`; with `wait_for_completion` wait up to `timeout_s` and fail with the
    execution's log tail when it does not succeed. Each try starts a new execution, never two at once; the
    awaited execution belongs to the task, so killing the task (or its worker) stops it and records it LOST.
    Without waiting the execution runs on by itself (a JobExecutionSensor awaits it). XCom: the execution's id,
    state and what it produced; each produced object gets an event through the AssetAlias
    `hopsml://<project>/jobs/<job>/produced`."""

    template_fields: Sequence[str] = ("job_name", "args")
    ui_color = "#d9ecd0"

    def __init__(self, *, job_name: str, args: str | Sequence[str] | None = None, wait_for_completion: bool = True,
                 timeout_s: float = 24 * 3600.0, **kwargs: Any) -> None:
        self.job_name, self.args = job_name, args
        self.wait_for_completion, self.timeout_s = wait_for_completion, float(timeout_s)
        super().__init__(**kwargs)
        self.outlets.append(AssetAlias(assets.job(self.project_name, job_name) + "/produced"))

    def asset_uris(self) -> list[str]:
        return [assets.job(self.project_name, self.job_name)]

    def run_step(self, settings: config.Settings, context: Context) -> steps.Step:
        if self.wait_for_completion:   # owned by this task: it ends with the task, whatever kills it
            return checks.job_step(settings, checks.run_job(settings, self.job_name, self.args, self.timeout_s))
        execution = checks.start_job(settings, self.job_name, self.args)
        log.info("job %s: execution %s started", self.job_name, execution.id)
        return steps.Step(checks.execution_ref(execution))


class PrepareDatasetOperator(HopsmlOperator):
    """prepare_table (kind 'table', `options` as its keywords: label=..., standardize=...) or prepare_images of
    `src` into dataset `dataset`."""

    template_fields: Sequence[str] = ("src", "dataset", "options")

    def __init__(self, *, src: str, dataset: str, kind: str = "table", options: Mapping[str, Any] | None = None,
                 **kwargs: Any) -> None:
        self.src, self.dataset, self.kind, self.options = src, dataset, kind, dict(options or {})
        super().__init__(**kwargs)

    def asset_uris(self) -> list[str]:
        return [assets.dataset(self.project_name, self.dataset)]

    def run_step(self, settings: config.Settings, context: Context) -> steps.Step:
        return steps.prepare_dataset(settings, self.src, self.dataset, kind=self.kind, options=self.options)


class FeatureGroupInsertOperator(HopsmlOperator):
    """A CSV or Parquet file inserted into a feature group as one commit (created with `primary_key` if new)."""

    template_fields: Sequence[str] = ("path",)

    def __init__(self, *, name: str, path: str, version: int = 1, primary_key: Sequence[str] = (),
                 event_time: str | None = None, description: str = "", **kwargs: Any) -> None:
        self.name, self.path, self.version = name, path, int(version)
        self.primary_key, self.event_time, self.description = list(primary_key), event_time, description
        super().__init__(**kwargs)

    def asset_uris(self) -> list[str]:
        return [assets.featuregroup(self.project_name, self.name, self.version)]

    def run_step(self, settings: config.Settings, context: Context) -> steps.Step:
        return steps.insert_into_group(settings, self.name, self.path, version=self.version,
                                       primary_key=self.primary_key, event_time=self.event_time,
                                       description=self.description)


class TrainingDatasetOperator(HopsmlOperator):
    """A new training dataset version of a feature view, written out as a dataset (XCom: its name)."""

    def __init__(self, *, view: str, view_version: int = 1, test_size: float | None = 0.2, seed: int | None = 0,
                 **kwargs: Any) -> None:
        self.view, self.view_version, self.test_size, self.seed = view, int(view_version), test_size, seed
        super().__init__(**kwargs)

    def asset_uris(self) -> list[str]:
        return [assets.featureview(self.project_name, self.view, self.view_version)]

    def run_step(self, settings: config.Settings, context: Context) -> steps.Step:
        return steps.create_training_dataset(settings, self.view, self.view_version, test_size=self.test_size,
                                             seed=self.seed)


class ExperimentOperator(HopsmlOperator):
    """An experiment verb ('launch', 'allreduce', 'grid_search', ...) of the importable function `function`
    ('package.module:function'); `args` is launch's args_dict or a search's space, `options` the verb's other
    keywords. XCom: the experiment id, its logdir and the numbers the function returned."""

    template_fields: Sequence[str] = ("args", "options", "reads")

    def __init__(self, *, function: str, verb: str = "launch", args: Mapping[str, Any] | None = None,
                 name: str = "no-name", options: Mapping[str, Any] | None = None,
                 reads: str | Sequence[str] | None = None, reads_view: Mapping[str, Any] | None = None,
                 **kwargs: Any) -> None:
        self.function, self.verb, self.args, self.name = function, verb, dict(args or {}), name
        self.options = dict(options or {})
        self.reads, self.reads_view = reads, dict(reads_view) if reads_view else None
        super().__init__(**kwargs)

    def asset_uris(self) -> list[str]:
        return [assets.experiment(self.project_name, self.name)]

    def run_step(self, settings: config.Settings, context: Context) -> steps.Step:
        reads = [self.reads] if isinstance(self.reads, str) else list(self.reads or [])
        return steps.run_experiment(settings, self.function, verb=self.verb, args=self.args, name=self.name,
                                    reads=reads, reads_view=self.reads_view, **self.options)


class ModelExportOperator(HopsmlOperator):
    """The file `model_file` an experiment wrote (its best trial's for a search) registered as the next version of
    `model_name`, with the experiment's results as metrics. `experiment_id` is usually
    ``train.output["experiment_id"]`` or a template pulling it."""

    template_fields: Sequence[str] = ("experiment_id",)

    def __init__(self, *, model_name: str, experiment_id: str, model_file: str,
                 metrics: Sequence[str] | None = None, **kwargs: Any) -> None:
        self.model_name, self.experiment_id, self.model_file = model_name, experiment_id, model_file
        self.metrics = list(metrics) if metrics else None
        super().__init__(**kwargs)

    def asset_uris(self) -> list[str]:
        return [assets.model(self.project_name, self.model_name)]

    def run_step(self, settings: config.Settings, context: Context) -> steps.Step:
        return steps.export_model(settings, self.model_name, str(self.experiment_id), model_file=self.model_file,
                                  metrics=self.metrics)


class BestModelOperator(HopsmlOperator):
    """The version of `model_name` with the best `metric` (XCom: model, version): the one to serve."""

    def __init__(self, *, model_name: str, metric: str, direction: str = "max", **kwargs: Any) -> None:
        self.model_name, self.metric, self.direction = model_name, metric, direction
        super().__init__(**kwargs)

    def run_step(self, settings: config.Settings, context: Context) -> steps.Step:
        return steps.best_model(settings, self.model_name, self.metric, self.direction)


class CreateServingOperator(HopsmlOperator):
    """Create or update a serving on `model_version` of `model_name` (the newest when None); `options` are
    create_or_update's keywords, an option group as a dict of its fields (`{"inference_log": {"roll_seconds": 1}}`)."""

    template_fields: Sequence[str] = ("model_version",)

    def __init__(self, *, serving_name: str, model_name: str, model_version: int | str | None = None,
                 options: Mapping[str, Any] | None = None, **kwargs: Any) -> None:
        self.serving_name, self.model_name, self.model_version = _serving(serving_name), model_name, model_version
        self.options = dict(options or {})
        super().__init__(**kwargs)

    def asset_uris(self) -> list[str]:
        return [assets.serving(self.project_name, self.serving_name)]

    def run_step(self, settings: config.Settings, context: Context) -> steps.Step:
        return steps.create_serving(settings, self.serving_name, self.model_name, _int(self.model_version),
                                    **self.options)


class DeployCanaryOperator(HopsmlOperator):
    """`model_version` of `model_name` as the canary of the running serving `serving_name`, taking
    `traffic_percent` of its requests beside the stable version; everything else of the serving's stored
    definition (scripts, batching, instances, resources, inference logging) is carried over. XCom: the canary and
    stable versions and `since`, when the canary began answering."""

    template_fields: Sequence[str] = ("model_version",)

    def __init__(self, *, serving_name: str, model_name: str, model_version: int | str | None,
                 traffic_percent: int = 20, **kwargs: Any) -> None:
        self.serving_name, self.model_name, self.model_version = _serving(serving_name), model_name, model_version
        self.traffic_percent = int(traffic_percent)
        super().__init__(**kwargs)

    def asset_uris(self) -> list[str]:
        return [assets.serving(self.project_name, self.serving_name)]

    def run_step(self, settings: config.Settings, context: Context) -> steps.Step:
        version = _int(self.model_version)
        if version is None:
            raise steps.StepError(f"{self.task_id}: no model version to deploy as the canary")
        return steps.deploy_canary(settings, self.serving_name, self.model_name, version, self.traffic_percent)


class CanaryGateOperator(HopsmlOperator):
    """The skew-gated decision on the serving's canary over its own requests of the last `window_s` seconds
    (its features against its own training dataset, its predictions, errors and p99 latency against the stable
    version's); XCom `decision`: 'promote' or 'roll back', with the reasons. Nothing is changed here."""

    def __init__(self, *, serving_name: str, window_s: float = 3600.0, min_requests: int = 50,
                 thresholds: Mapping[str, float] | None = None, **kwargs: Any) -> None:
        self.serving_name, self.window_s, self.min_requests = _serving(serving_name), float(window_s), int(min_requests)
        self.thresholds = dict(thresholds or {})
        super().__init__(**kwargs)

    def run_step(self, settings: config.Settings, context: Context) -> steps.Step:
        return steps.canary_gate(settings, self.serving_name, window_s=self.window_s, min_requests=self.min_requests,
                                 **self.thresholds)


class CanaryRolloutOperator(HopsmlOperator):
    """Carries out the gate's `decision` ('promote' or 'roll back', usually ``gate.output["decision"]``): the canary
    becomes the stable version, or is dropped; a roll back fails the task (no retry) with the gate's reasons, so
    the run shows the new version was refused while the old one serves on."""

    template_fields: Sequence[str] = ("decision", "reasons")

    def __init__(self, *, serving_name: str, decision: str,
                 reasons: str | Sequence[str] | None = None, **kwargs: Any) -> None:
        self.serving_name, self.decision, self.reasons = _serving(serving_name), decision, reasons
        super().__init__(**kwargs)

    def asset_uris(self) -> list[str]:
        return [assets.serving(self.project_name, self.serving_name)]

    def run_step(self, settings: config.Settings, context: Context) -> steps.Step:
        reasons = [self.reasons] if isinstance(self.reasons, str) else list(self.reasons or [])
        return steps.canary_rollout(settings, self.serving_name, str(self.decision), reasons)


class ServingCheckOperator(HopsmlOperator):
    """The deployment answers: Running, no canary undecided, its stable version AVAILABLE (and, with
    `instances`, a prediction for them). Runs after the rollout whatever it did (trigger_rule 'all_done'); with
    `canary_version` (the canary this run deployed) it fails, after those checks, when that canary was rolled
    back, so the run ends failed while the deployment answers on."""

    template_fields: Sequence[str] = ("canary_version",)

    def __init__(self, *, serving_name: str, instances: Sequence[Any] | None = None, timeout_s: float = 60.0,
                 canary_version: int | str | None = None, **kwargs: Any) -> None:
        self.serving_name, self.instances, self.timeout_s = _serving(serving_name), instances, float(timeout_s)
        self.canary_version = canary_version
        kwargs.setdefault("trigger_rule", "all_done")
        super().__init__(**kwargs)

    def run_step(self, settings: config.Settings, context: Context) -> steps.Step:
        return steps.check_serving(settings, self.serving_name, self.instances, self.timeout_s,
                                   _int(self.canary_version))


class StartServingOperator(HopsmlOperator):
    """Start a serving and wait (up to `timeout_s`) until it answers."""

    def __init__(self, *, serving_name: str, timeout_s: float = 300.0, **kwargs: Any) -> None:
        self.serving_name, self.timeout_s = _serving(serving_name), float(timeout_s)
        super().__init__(**kwargs)

    def asset_uris(self) -> list[str]:
        return [assets.serving(self.project_name, self.serving_name)]

    def run_step(self, settings: config.Settings, context: Context) -> steps.Step:
        return steps.start_serving(settings, self.serving_name, self.timeout_s)


class StopServingOperator(HopsmlOperator):
    """Stop a serving (its inference log is flushed, for the monitor gate)."""

    def __init__(self, *, serving_name: str, **kwargs: Any) -> None:
        self.serving_name = _serving(serving_name)
        super().__init__(**kwargs)

    def asset_uris(self) -> list[str]:
        return [assets.serving(self.project_name, self.serving_name)]

    def run_step(self, settings: config.Settings, context: Context) -> steps.Step:
        return steps.stop_serving(settings, self.serving_name)


class MonitorGateOperator(HopsmlOperator):
    """serving.monitor as a gate: the task fails (without retry) when more than `max_drifted` features drift
    (PSI over `psi_threshold` or KS over `ks_threshold`) or the served rows were not preprocessed as in training."""

    def __init__(self, *, serving_name: str, psi_threshold: float = 0.2, ks_threshold: float = 0.2,
                 max_drifted: int = 0, require_preprocessing: bool = True, dataset: str | None = None,
                 **kwargs: Any) -> None:
        self.serving_name, self.psi_threshold, self.ks_threshold = _serving(serving_name), psi_threshold, ks_threshold
        self.max_drifted, self.require_preprocessing, self.dataset = max_drifted, require_preprocessing, dataset
        super().__init__(**kwargs)

    def run_step(self, settings: config.Settings, context: Context) -> steps.Step:
        return steps.monitor_gate(settings, self.serving_name, psi_threshold=self.psi_threshold,
                                  ks_threshold=self.ks_threshold, max_drifted=self.max_drifted,
                                  require_preprocessing=self.require_preprocessing, dataset=self.dataset)


class ValidationGateOperator(HopsmlOperator):
    """A feature group's expectation suite as a gate: fails when more than `max_failed` expectations fail on the
    group's current rows."""

    def __init__(self, *, name: str, version: int | None = None, max_failed: int = 0, **kwargs: Any) -> None:
        self.name, self.version, self.max_failed = name, version, max_failed
        super().__init__(**kwargs)

    def run_step(self, settings: config.Settings, context: Context) -> steps.Step:
        return steps.validation_gate(settings, self.name, self.version, max_failed=self.max_failed)


class HopsworksLaunchOperator(HopsmlJobOperator):
    """Hopsworks' name and arguments (project_name, job_arguments, wait_timeout_s, ignore_failure), for DAGs that
    move over; the connection arguments are accepted and unused (the project is reached through its root)."""

    def __init__(self, *, job_name: str, project_name: str | None = None, job_arguments: str | None = None,
                 wait_for_completion: bool = True, wait_timeout_s: float = -1, ignore_failure: bool = False,
                 hopsworks_conn_id: str | None = None, project_id: int | None = None, poke_interval_s: float = 1,
                 wait_for_state: object = None, **kwargs: Any) -> None:
        del hopsworks_conn_id, project_id, poke_interval_s, wait_for_state
        self.ignore_failure = ignore_failure
        super().__init__(job_name=job_name, args=job_arguments, wait_for_completion=wait_for_completion,
                         timeout_s=wait_timeout_s if wait_timeout_s and wait_timeout_s > 0 else 24 * 3600.0,
                         project=kwargs.pop("project", None) or project_name, **kwargs)

    def run_step(self, settings: config.Settings, context: Context) -> steps.Step:
        try:
            return super().run_step(settings, context)
        except checks.ExecutionFailed as exc:
            if not self.ignore_failure:
                raise
            log.warning("%s (ignore_failure=True)", exc)
            return steps.Step(exc.ref)


__all__ = ["BestModelOperator", "CanaryGateOperator", "CanaryRolloutOperator", "CreateServingOperator",
           "DeployCanaryOperator", "ExperimentOperator", "FeatureGroupInsertOperator",
           "HopsmlJobOperator", "HopsmlOperator", "HopsworksLaunchOperator", "ModelExportOperator",
           "MonitorGateOperator", "PrepareDatasetOperator", "StartServingOperator", "StopServingOperator",
           "ServingCheckOperator", "TrainingDatasetOperator", "ValidationGateOperator"]
