"""The search driver: trials as parallel Spark tasks, each in its own folder of the experiment,
with live progress, early stopping over the authenticated channel, and a summary kept up to date.

Each trial's function runs in a process of its own (launcher/task/child.py; for the asynchronous searches a
slot task's worker process, launcher/task/worker.py): a trial that ends its process (os._exit, a segfault, an
out-of-memory kill) is recorded FAILED with its exit cause and the search goes on; the other trials and
the shared Python workers are not affected. A search is two parts: the trials and their records
(`trials.Trials`) and the slot loop that holds them (`slot_loop.SlotLoop`: one job per free slot, as the request's
`Scheduler` hands them out: a fixed list of points for grid and random search, generations for evolution, rungs
for ASHA and Hyperband, a model for TPE)."""

from __future__ import annotations

import json
import logging
from typing import Any

from hopsml import config
from hopsml.errors import HopsmlError
from hopsml.fs import Storage
from hopsml.layout import ExperimentDir
from hopsml.runs.request import SearchRequest
from hopsml.runs.slot_loop import SlotLoop
from hopsml.runs.start import Start, check_function, ship
from hopsml.runs.trials import Trials
from hopsml.search.space import SearchSpaceError
from hopsml.tracking.record import ExperimentType

log = logging.getLogger(__name__)


def run_search(request: SearchRequest, settings: config.Settings) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """What every search verb shares: checks, the experiment record, the trials (the request's scheduler hands
    them out to the slot loop), the best result."""
    asked = request.run
    check_function(asked.train_fn, None, asked.name, asked.versioned_resources)
    ship(asked.train_fn)
    start = Start.of(settings, asked.train_fn, asked.seed)
    spark = start.spark()
    run = start.start_run(spark, asked, type=ExperimentType.PARALLEL_EXPERIMENTS.value, hyperparameters=request.space,
                          direction=request.direction.value, optimization_key=request.optimization_key,
                          metric_key=request.optimization_key, executors=spark.default_parallelism)
    log.info("search %s started: %s", run.id, run.logdir)
    with run:
        trials = Trials(run, optimization_key=request.optimization_key, direction=request.direction,
                        early_stopping=request.stopping_rule(), timeline=bool(asked.timeline))
        if request.resume is not None:
            trials.adopt(request.resume)
            request.scheduler.restore(trials.adopted)
        loop = SlotLoop(spark, trials, asked.train_fn, start.snapshot, checks=start.checks, seed=start.seed,
                        local_logdir=bool(asked.local_logdir), timeline=bool(asked.timeline))
        plan = request.plan
        loop.run_async(request.scheduler, total=plan.total, num_workers=plan.num_workers, budget=plan.budget,
                       max_parallel=plan.max_parallel)
        fields = dict(request.record_fields)
        if request.strategy == "ablation":   # each left-out part beside the base
            fields["ablation"] = trials.ablation_table()
        best = trials.conclude(strategy=request.strategy, **fields)
    return run.logdir, best.params, best.outputs


def previous_search(settings: config.Settings, exp_id: str, strategy: str, space_description: dict[str, Any]
                    ) -> tuple[ExperimentDir, int]:
    """The search `resume=` names and its seed, checked before anything starts: the same strategy over the
    same space, with a summary of its trials."""
    storage = Storage(settings.root)
    try:
        source = ExperimentDir.from_id(settings.project, exp_id)
        record = storage.read_json(source.record)
    except (HopsmlError, ValueError) as exc:
        raise HopsmlError(f"resume={exp_id!r}: {exc}; see 'hopsml experiments list'") from None
    if record.get("strategy") not in (None, strategy):
        raise SearchSpaceError(f"resume={exp_id!r} is a {record.get('strategy')} search; resume it with that verb")
    if record.get("hyperparameters") != json.loads(json.dumps(space_description)):
        raise SearchSpaceError(f"resume={exp_id!r} searched {record.get('hyperparameters')}, not "
                               f"{space_description}; give the same space to take it up")
    if not storage.exists(source.summary):
        raise HopsmlError(f"resume={exp_id!r}: it has no trials to take up ({storage.uri(source.summary)} is "
                          "missing); start the search anew")
    return source, int(record["seed"])


def recorded(settings: config.Settings, source: ExperimentDir, key: str) -> Any:
    """One field of a search's experiment record (None when it has none): what a resumed search keeps."""
    return Storage(settings.root).read_json(source.record).get(key)
