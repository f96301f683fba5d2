"""The public verbs: run a training function on the cluster and version everything about it.

    from hopsml import experiment
    logdir, result = experiment.launch(train, {"lr": 0.01}, name="digits")

Names and return values follow the hops library, so a Hopsworks user feels at home.
"""

from __future__ import annotations

import logging
import numbers
from typing import Any, Callable, Iterable, Iterator

from hopsml import config, session
from hopsml.errors import ExperimentFailed, HopsmlError
from hopsml.fs import Storage
from hopsml.launcher.driver import Live, open_channel, run_stage, ship_by_value
from hopsml.launcher.task import TaskSpec, run_function
from hopsml.tracking.record import ExperimentRun, ExperimentType

log = logging.getLogger(__name__)


def _check_function(train_fn: Any, args_dict: Any) -> dict[str, Any]:
    if not callable(train_fn):
        raise HopsmlError(f"train_fn must be a function, got {type(train_fn).__name__}")
    if args_dict is not None and not isinstance(args_dict, dict):
        raise HopsmlError(f"args_dict must be a dict of keyword arguments, got {type(args_dict).__name__}")
    return dict(args_dict or {})


def _metric(result: dict[str, Any], metric_key: str | None) -> Any:
    key = metric_key or "metric"
    value = result.get(key)
    if metric_key and key not in result:
        log.warning("metric_key %r is not in the function's return value (keys: %s)",
                    metric_key, ", ".join(result) or "none")
    return value if isinstance(value, numbers.Real) else None


def _start_run(sc: Any, storage: Storage, settings: config.Settings, train_fn: Callable[..., Any], *,
               name: str, versioned_resources: Iterable[str] | None, **fields: Any) -> ExperimentRun:
    return ExperimentRun.start(storage, settings.project, sc.applicationId, name=name, fn=train_fn,
                               versioned_resources=versioned_resources,
                               spark_conf=dict(sc.getConf().getAll()), spark_version=sc.version, **fields)


def launch(train_fn: Callable[..., Any], args_dict: dict[str, Any] | None = None, name: str = "no-name",
           description: str | None = None, metric_key: str | None = None,
           versioned_resources: list[str] | None = None) -> tuple[str, dict[str, Any]]:
    """Run `train_fn(**args_dict)` once in a Spark task; returns (logdir, return_dict).

    The run directory gets experiment.json, the calling notebook or script, conda.yml, the
    function's output.log, its metrics and TensorBoard events, and any file whose path it returns.
    """
    args = _check_function(train_fn, args_dict)
    ship_by_value(train_fn)
    settings = config.load()
    storage = Storage(settings.root)
    sc = session.get_or_create(settings).sparkContext
    run = _start_run(sc, storage, settings, train_fn, name=name, versioned_resources=versioned_resources,
                     description=description, metric_key=metric_key, hyperparameters=args,
                     type=ExperimentType.EXPERIMENT.value, executors=1)
    log.info("experiment %s started: %s", run.id, run.logdir)
    with run:
        channel = open_channel(sc, Live())
        spec = TaskSpec(storage, run.dir.path, channel.address, channel.secret)

        def one_task(_: Iterator[int]) -> Iterator[dict[str, Any]]:
            yield run_function(train_fn, args, spec)

        try:
            (report,) = run_stage(sc, one_task, 1, job_group=run.id,
                                  description=f"hopsml experiment '{name}' ({run.id})")
        finally:
            channel.close()
        if not report["ok"]:
            raise ExperimentFailed(f"experiment {run.id} failed: {report['error']}",
                                   traceback=report.get("traceback", ""), output_tail=report.get("tail", ""),
                                   logdir=run.logdir)
        result = report["result"]
        run.finish(metric=_metric(result, metric_key), results=result)
    return run.logdir, result
