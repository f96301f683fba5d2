"""The public verbs: run a training function on the cluster and version everything about it.

    from hopsml import experiment
    logdir, result = experiment.launch(train, {"lr": 0.01}, name="digits")

Names and return values follow the hops library, so a Hopsworks user feels at home. Only the
signatures live here; the engine behind them is hopsml.runs. Every verb also takes `settings=` (keyword only):
the project, root and settings to run with, resolved once by the caller; by default they are resolved at the call
(arguments, HOPSML_* environment, conf/hopsml.toml).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from hopsml import config, util
from hopsml.errors import HopsmlError
from hopsml.launcher import seeds
from hopsml.launcher.task import tf_cluster
from hopsml.runs import engine
from hopsml.runs.request import RunRequest, SearchRequest, SlotPlan
from hopsml.runs.search_run import previous_search, recorded, run_search
from hopsml.search import space
from hopsml.search.asha import SuccessiveHalving, budgets
from hopsml.search.evolution import DifferentialEvolution, Generations
from hopsml.search.scheduler import PointList
from hopsml.search.space import Direction, SearchSpaceError


def launch(train_fn: Callable[..., Any], args_dict: dict[str, Any] | None = None, name: str = "no-name",
           local_logdir: bool = False, description: str | None = None, metric_key: str | None = None,
           versioned_resources: list[str] | None = None, seed: int | None = None,
           timeline: bool = True, *, settings: config.Settings | None = None) -> tuple[str, Any]:
    """Run `train_fn(**args_dict)` in a Spark task; returns (logdir, return_dict).

    As in hops, list values run the function once per list index, in parallel Spark tasks:
    `{'a': [1, 2], 'b': [5, 3]}` runs fn(a=1, b=5) and fn(a=2, b=3); each execution gets its own
    folder `<k=v&...>/` (like a search trial) and the return value is then the list of the executions'
    return dicts, in index order. The run directory gets experiment.json, the calling notebook or
    script, conda.yml, the function's output.log, its metrics and TensorBoard events (with
    `local_logdir=True` written to the executor's disk first and copied in at the end), and any file
    whose path it returns.

    `timeline` records where the function's time goes (timeline/trace.json: its `hopsml.timeline.span`s, reader
    waits, checkpoint saves) and its system metrics every 2 s (CPU, memory, network, GPU; peaks in the record);
    timeline=False turns it off.
    """
    return engine.launch(RunRequest(train_fn, name, description, metric_key, versioned_resources, local_logdir, seed,
                                    timeline), args_dict, _settings(settings))


def allreduce(train_fn: Callable[[], Any], name: str = "no-name", local_logdir: bool = False,
              description: str | None = None, metric_key: str | None = None, num_workers: int | None = None,
              gpus_per_worker: int | None = None, versioned_resources: list[str] | None = None,
              timeout_s: float | None = None, all_ranks_write_metrics: bool = False, retries: int = 0,
              resume: str | None = None, seed: int | None = None, timeline: bool = True,
              *, settings: config.Settings | None = None
              ) -> tuple[str, dict[str, Any]]:
    """Data-parallel training: `train_fn()` runs once per rank, in one barrier-mode Spark task each,
    with `hopsml.collective` connected between the ranks; returns (logdir, rank 0's return_dict).

    When a rank's process dies (or a peer loses it), the ranks start again up to `retries` times;
    `resume=<experiment id>` starts from that experiment's newest checkpoint. Either way
    `hopsml.checkpoint.load()` in the function returns the latest checkpoint to continue from.

    Each rank's output goes to logs/worker_<rank>.log and streams here prefixed with its rank. If a
    rank fails, the others are stopped and ExperimentFailed names the rank and shows its last lines.
    RANK, WORLD_SIZE, MASTER_ADDR/PORT and TF_CONFIG name fresh ports for frameworks' own servers.
    `timeline` records where each rank's time goes (timeline/trace.json) and names stragglers as the run goes;
    timeline=False turns it off.
    """
    settings = _settings(settings, num_workers)
    ranks = engine.collective_ranks(train_fn, workers=settings.num_workers, gpus=int(gpus_per_worker or 0),
                                    timeout_s=timeout_s, all_ranks_write_metrics=all_ranks_write_metrics,
                                    timeline=timeline)
    request = RunRequest(train_fn, name, description, metric_key, versioned_resources, local_logdir, seed, timeline)
    return engine.run_ranks(request, settings, ranks, retries=retries, resume=resume)


collective_all_reduce = allreduce


def mirrored(train_fn: Callable[[], Any], name: str = "no-name", local_logdir: bool = False,
             description: str | None = None, evaluator: bool = False, metric_key: str | None = None,
             num_workers: int | None = None, gpus_per_worker: int | None = None,
             versioned_resources: list[str] | None = None, seed: int | None = None,
             timeline: bool = True, *, settings: config.Settings | None = None) -> tuple[str, dict[str, Any]]:
    """TensorFlow MultiWorkerMirroredStrategy across `num_workers` Spark ranks; returns (logdir, the
    chief's return_dict).

    As in hops, `num_workers` defaults to one rank per executor of the application
    (`util.executors_of_application()`: 1 in local mode). Each rank runs `train_fn()` in a fresh Python
    process, with TF_CONFIG set when there is more than one rank (every rank a worker, worker 0 the
    chief; with `evaluator=True` the last rank is the evaluator), so
    `tf.distribute.MultiWorkerMirroredStrategy()` inside it finds its peers. `timeline` records each rank's
    spans (`hopsml.timeline.keras.callback()` for model.fit's batches) and system metrics, as allreduce does;
    timeline=False turns it off.
    """
    settings = _settings(settings)
    workers = num_workers if num_workers is not None else util.executors_of_application()
    tf_cluster.roles(tf_cluster.MIRRORED, workers, evaluator=evaluator)  # refuse a bad layout before Spark
    ranks = engine.tensorflow_ranks(train_fn, strategy=tf_cluster.MIRRORED, workers=workers,
                                    gpus=int(gpus_per_worker or 0), evaluator=bool(evaluator), timeline=timeline)
    request = RunRequest(train_fn, name, description, metric_key, versioned_resources, local_logdir, seed, timeline)
    return engine.run_ranks(request, settings, ranks, strategy=tf_cluster.MIRRORED, evaluator=bool(evaluator))


def parameter_server(train_fn: Callable[[], Any], name: str = "no-name", local_logdir: bool = False,
                     description: str | None = None, evaluator: bool = False, metric_key: str | None = None,
                     num_workers: int = 1, num_ps: int = 1, gpus_per_worker: int | None = None,
                     versioned_resources: list[str] | None = None, seed: int | None = None, timeline: bool = True,
                     *, settings: config.Settings | None = None
                     ) -> tuple[str, dict[str, Any]]:
    """TensorFlow 2 ParameterServerStrategy on 1 + num_ps + num_workers (+ 1 evaluator) Spark ranks;
    returns (logdir, the chief's return_dict).

    Rank 0 is the chief: it runs `train_fn()`, which builds the strategy from TF_CONFIG and drives the
    training with a ClusterCoordinator. The ps and worker ranks host a `tf.distribute.Server` until the
    chief's function has ended, then stop; if the chief fails, they are stopped with it. `timeline` records every
    rank's system metrics (the servers' too) and the chief's spans; timeline=False turns it off.
    """
    for label, value in (("num_workers", num_workers), ("num_ps", num_ps)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise HopsmlError(f"parameter_server needs {label} >= 1, got {value!r}")
    ranks = engine.tensorflow_ranks(train_fn, strategy=tf_cluster.PARAMETER_SERVER,
                                    workers=1 + num_ps + num_workers + (1 if evaluator else 0),
                                    gpus=int(gpus_per_worker or 0), num_ps=num_ps, evaluator=bool(evaluator),
                                    timeline=timeline)
    request = RunRequest(train_fn, name, description, metric_key, versioned_resources, local_logdir, seed, timeline)
    return engine.run_ranks(request, _settings(settings), ranks, strategy=tf_cluster.PARAMETER_SERVER, num_ps=num_ps,
                            evaluator=bool(evaluator))


def grid_search(train_fn: Callable[..., Any], grid_dict: dict[str, list[Any]], direction: Direction | str = "max",
                name: str = "no-name", local_logdir: bool = False, description: str | None = None,
                optimization_key: str = "metric",
                versioned_resources: list[str] | None = None, early_stopping: str | None = None,
                early_stopping_min_steps: int = 3, seed: int | None = None, num_workers: int = 1,
                resume: str | None = None, timeline: bool = True,
                *, settings: config.Settings | None = None) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """Every combination of `grid_dict` as its own trial, in parallel; returns (logdir, best_params, best_return).
    `num_workers` > 1 makes every trial an allreduce job of that many ranks, as many at once as the slots hold.
    `resume=<experiment id>` takes up a search whose driver was killed (call it with the same grid): its
    ended trials are kept, the ones that were running run again in their folders (from their last
    checkpoint), then the rest. `timeline` records each trial's spans and system samples (its
    timeline/trace.json, as allreduce does for a run); timeline=False turns it off."""
    combos = space.grid(grid_dict)
    _check_workers(num_workers, None)
    if num_workers > 1 and early_stopping:
        raise SearchSpaceError("early_stopping works with trials of one rank; leave it out with num_workers > 1")
    settings = _settings(settings)
    source, seed = previous_search(settings, resume, "grid", dict(grid_dict)) if resume else (None, seed)
    request = SearchRequest.of(RunRequest(train_fn, name, description, None, versioned_resources, local_logdir, seed,
                                          timeline), dict(grid_dict), direction, optimization_key, "grid",
                               PointList(combos), SlotPlan(len(combos), num_workers),
                               early_stopping=early_stopping, early_stopping_min_steps=early_stopping_min_steps,
                               resume=source)
    return run_search(request, settings)


def random_search(train_fn: Callable[..., Any], boundary_dict: dict[str, Any], direction: Direction | str = "max",
                  samples: int = 10, name: str = "no-name", local_logdir: bool = False,
                  description: str | None = None, optimization_key: str = "metric", seed: int | None = None,
                  versioned_resources: list[str] | None = None, log_scale: list[str] | None = None,
                  early_stopping: str | None = None, early_stopping_min_steps: int = 3,
                  resume: str | None = None, timeline: bool = True,
                  *, settings: config.Settings | None = None) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """`samples` random points within `boundary_dict` ([low, high] numbers, or lists as categories;
    names in `log_scale` are sampled on a log scale); the same seed gives the same trials.
    `resume=<experiment id>` takes up a search whose driver was killed, as grid_search does (with its seed);
    `timeline` as grid_search."""
    settings = _settings(settings)
    source, seed = _resumed(settings, resume, "random", boundary_dict, seed)
    points = space.Space.from_bounds(boundary_dict, log_scale or ()).sample(samples, seed)
    request = SearchRequest.of(RunRequest(train_fn, name, description, None, versioned_resources, local_logdir, seed,
                                          timeline), dict(boundary_dict), direction, optimization_key, "random",
                               PointList(points), SlotPlan(len(points)),
                               early_stopping=early_stopping, early_stopping_min_steps=early_stopping_min_steps,
                               resume=source,
                               # recorded: the web view draws those axes on a log scale
                               record_fields={"log_scale": list(log_scale or [])})
    return run_search(request, settings)


def differential_evolution(train_fn: Callable[..., Any], boundary_dict: dict[str, Any],
                           direction: Direction | str = "max", generations: int = 4, population: int = 6,
                           mutation: float = 0.5, crossover: float = 0.7, name: str = "no-name",
                           local_logdir: bool = False, description: str | None = None,
                           optimization_key: str = "metric", seed: int | None = None,
                           versioned_resources: list[str] | None = None, log_scale: list[str] | None = None,
                           resume: str | None = None, timeline: bool = True, *, settings: config.Settings | None = None
                           ) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """Evolve a population over `generations`, each generation one parallel batch of trials.
    `resume=<experiment id>` takes up a search whose driver was killed (same space and settings): with its
    seed the generations are proposed again alike, the trials that ended are kept and not run again, the
    ones that were running run again in their folders (from their last checkpoint). `timeline` as grid_search."""
    settings = _settings(settings)
    source, seed = _resumed(settings, resume, "differential_evolution", boundary_dict, seed)
    evolution = DifferentialEvolution(space.Space.from_bounds(boundary_dict, log_scale or ()),
                                      population=population, mutation=mutation, crossover=crossover,
                                      direction=Direction.of(direction), seed=seed)
    if not isinstance(generations, int) or generations < 1:
        raise SearchSpaceError(f"generations must be a positive integer, got {generations!r}")
    best_per_generation: list[float | None] = []   # filled as the generations end, recorded at the end
    request = SearchRequest.of(
        RunRequest(train_fn, name, description, None, versioned_resources, local_logdir, seed, timeline),
        dict(boundary_dict), direction, optimization_key, "differential_evolution",
        Generations(evolution, generations, best_per_generation), SlotPlan(population * generations),
        resume=source, record_fields={"generations": generations, "population": population,
                                      "best_per_generation": best_per_generation, "log_scale": list(log_scale or [])})
    return run_search(request, settings)


def _settings(given: config.Settings | None, num_workers: int | None = None) -> config.Settings:
    """The settings a verb runs with: the caller's (one process that serves several projects, such as an Airflow
    worker, passes each run its own), else resolved now; `num_workers` over either."""
    if given is None:
        return config.load(num_workers=num_workers)
    return given if num_workers is None else replace(given, num_workers=config.value("num_workers", num_workers))


def _resumed(settings: config.Settings, resume: str | None, strategy: str, boundary_dict: dict[str, Any],
             seed: int | None) -> tuple[Any, int]:
    """The search `resume=` takes up and its seed, or none and the seed drawn (or given)."""
    if resume:
        return previous_search(settings, resume, strategy, dict(boundary_dict))
    return None, seeds.resolve(seed)


@dataclass(frozen=True)
class _Rungs:
    """How asha and hyperband spend a trial's budget: the function's parameter that takes it, its range and
    reduction factor, how many configurations and brackets, what draws new ones, and how trials run."""

    budget: str
    min_budget: float
    max_budget: float
    eta: float
    num_trials: int
    brackets: int | None   # None: one per rung (hyperband); 1: asha
    sampler: str | None
    num_workers: int
    max_parallel: int | None


def _successive_halving(strategy: str, run: RunRequest, boundary_dict: dict[str, Any], direction: Direction | str,
                        optimization_key: str, log_scale: list[str] | None, rungs: _Rungs, resume: str | None,
                        settings: config.Settings) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """What asha and hyperband share: the checks, the configurations (random, or drawn by TPE), the scheduler."""
    budget = rungs.budget
    if not isinstance(budget, str) or not budget.isidentifier():
        raise SearchSpaceError(f"budget must name the function's parameter that takes the budget, got {budget!r}")
    if budget in (boundary_dict or {}):
        raise SearchSpaceError(f"{budget!r} is the budget and cannot be in the search space too; "
                               "leave it out of boundary_dict")
    _check_workers(rungs.num_workers, rungs.max_parallel)
    source, seed = _resumed(settings, resume, strategy, boundary_dict, run.seed)
    sampler = rungs.sampler
    if sampler is None:   # TPE, or for a resumed search what it drew with (records before TPE: random)
        sampler = (recorded(settings, source, "sampler") or "random") if source is not None else "tpe"
    if sampler not in ("random", "tpe"):
        raise SearchSpaceError(f"sampler must be 'random' or 'tpe' (new configurations drawn as BOHB does), "
                               f"not {sampler!r}")
    budgets_ = budgets(rungs.min_budget, rungs.max_budget, rungs.eta)
    searched = space.Space.from_bounds(boundary_dict, log_scale or ())
    num_trials = rungs.num_trials
    points = searched.sample(num_trials, seed) if isinstance(num_trials, int) and num_trials >= 1 else []
    model = None
    if sampler == "tpe":
        from hopsml.search.tpe import ConfigModel

        model = ConfigModel(searched, direction=Direction.of(direction), seed=seed, random_configs=points.__getitem__,
                            ahead=True)
    scheduler = SuccessiveHalving(points.__getitem__, budgets_, eta=rungs.eta, direction=Direction.of(direction),
                                  num_trials=num_trials,
                                  brackets=len(budgets_) if rungs.brackets is None else rungs.brackets, model=model)

    request = SearchRequest.of(
        replace(run, seed=seed), dict(boundary_dict), direction, optimization_key, strategy, scheduler,
        SlotPlan(num_trials, rungs.num_workers, budget, rungs.max_parallel), resume=source,
        record_fields={"budget": budget, "min_budget": rungs.min_budget, "max_budget": rungs.max_budget,
                       "num_trials": num_trials, "log_scale": list(log_scale or [])})
    return run_search(request, settings)


def _check_workers(num_workers: int, max_parallel: int | None) -> None:
    for label, value in (("num_workers", num_workers), ("max_parallel", max_parallel)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise SearchSpaceError(f"{label} must be a positive integer, got {value!r}")


def asha(train_fn: Callable[..., Any], boundary_dict: dict[str, Any], direction: Direction | str = "max",
         budget: str = "epochs", min_budget: float = 1, max_budget: float = 27, eta: float = 3,
         num_trials: int = 27, name: str = "no-name", local_logdir: bool = False, description: str | None = None,
         optimization_key: str = "metric", seed: int | None = None, versioned_resources: list[str] | None = None,
         log_scale: list[str] | None = None, num_workers: int = 1, max_parallel: int | None = None,
         resume: str | None = None, sampler: str | None = None, timeline: bool = True,
         *, settings: config.Settings | None = None
         ) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """Asynchronous successive halving: `num_trials` configurations, each first run with
    `budget=min_budget` (the function's parameter named by `budget`: epochs, steps, a data fraction); a
    configuration in the top 1/eta of those completed at its rung runs again with eta times the budget,
    up to `max_budget`, in the same folder (so `hopsml.checkpoint.load()` continues where it stopped).
    A free slot never waits: it promotes a configuration if one is due, else starts a new one.
    `num_workers` > 1 makes every trial an allreduce job of that many ranks. `resume=<experiment id>` takes
    up a search whose driver was killed (call it with the same space): its ended trials are kept, the
    ones that were running run their rung again from their last checkpoint, and the search goes on with
    its seed. New configurations are drawn as BOHB does (`sampler="tpe"`, the default): Optuna's TPE fitted
    on every configuration so far, ranked by the highest rung it reached and its metric there (random ones
    until a few have a result); `sampler="random"` draws them all at random, as the ASHA paper does, a
    schedule reproducible from the seed alone. A resumed search draws as it did. `timeline` records each trial's
    spans and system samples, a part per rung it ran (timeline=False: off). Returns (logdir, best_params,
    best_return) of the best trial at the top rung."""
    return _successive_halving(
        "asha", RunRequest(train_fn, name, description, None, versioned_resources, local_logdir, seed, timeline),
        boundary_dict, direction, optimization_key, log_scale,
        _Rungs(budget, min_budget, max_budget, eta, num_trials, 1, sampler, num_workers, max_parallel), resume,
        _settings(settings))


def hyperband(train_fn: Callable[..., Any], boundary_dict: dict[str, Any], direction: Direction | str = "max",
              budget: str = "epochs", min_budget: float = 1, max_budget: float = 27, eta: float = 3,
              num_trials: int = 27, brackets: int | None = None, name: str = "no-name", local_logdir: bool = False,
              description: str | None = None, optimization_key: str = "metric", seed: int | None = None,
              versioned_resources: list[str] | None = None, log_scale: list[str] | None = None,
              num_workers: int = 1, max_parallel: int | None = None, resume: str | None = None,
              sampler: str | None = None, timeline: bool = True,
              *, settings: config.Settings | None = None) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """Asynchronous Hyperband: brackets of asha, bracket s starting its configurations at rung s (so the
    later brackets give fewer configurations more budget from the start); new configurations go to the
    brackets in turn. `brackets` defaults to one per rung. Otherwise as asha."""
    return _successive_halving(
        "hyperband", RunRequest(train_fn, name, description, None, versioned_resources, local_logdir, seed, timeline),
        boundary_dict, direction, optimization_key, log_scale,
        _Rungs(budget, min_budget, max_budget, eta, num_trials, brackets, sampler, num_workers, max_parallel), resume,
        _settings(settings))


def tpe_search(train_fn: Callable[..., Any], boundary_dict: dict[str, Any], direction: Direction | str = "max",
               samples: int = 20, name: str = "no-name", local_logdir: bool = False, description: str | None = None,
               optimization_key: str = "metric", seed: int | None = None,
               versioned_resources: list[str] | None = None, log_scale: list[str] | None = None,
               sampler: str = "tpe", startup_trials: int | None = None, num_workers: int = 1,
               max_parallel: int | None = None, resume: str | None = None, timeline: bool = True,
               *, settings: config.Settings | None = None
               ) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """Model-based search over the same `boundary_dict` as random_search: Optuna's TPE sampler (or
    `sampler="gp"`) proposes each next trial from the finished ones, the first `startup_trials` at random;
    trials run asynchronously, one per free slot. The same seed proposes the same trials when they end
    in the same order (max_parallel=1 makes that so). `resume=<experiment id>` takes up a search whose
    driver was killed: its ended trials are told to the sampler, the running ones run again. `timeline` as
    grid_search."""
    from hopsml.search.tpe import ModelBased

    _check_workers(num_workers, max_parallel)
    settings = _settings(settings)
    source, seed = _resumed(settings, resume, sampler, boundary_dict, seed)
    scheduler = ModelBased(space.Space.from_bounds(boundary_dict, log_scale or ()), direction=Direction.of(direction),
                           samples=samples, seed=seed, sampler=sampler, startup_trials=startup_trials)
    request = SearchRequest.of(
        RunRequest(train_fn, name, description, None, versioned_resources, local_logdir, seed, timeline),
        dict(boundary_dict), direction, optimization_key, sampler, scheduler,
        SlotPlan(samples, num_workers, max_parallel=max_parallel), resume=source,
        record_fields={"samples": samples, "log_scale": list(log_scale or [])})
    return run_search(request, settings)


def ablation(train_fn: Callable[..., Any], features: list[str] | None = None, layers: list[str] | None = None,
             direction: Direction | str = "max", name: str = "no-name", local_logdir: bool = False,
             description: str | None = None, optimization_key: str = "metric", seed: int | None = None,
             versioned_resources: list[str] | None = None, num_workers: int = 1, timeline: bool = True,
             *, settings: config.Settings | None = None
             ) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """An ablation study, as maggy has them: the base model, then one trial per feature (a column of the
    prepared table) and per layer left out. `train_fn(ablated_feature=None, ablated_layer=None)` gets the
    name to leave out (None for the base); the record's `ablation` table compares each with the base."""
    points: list[dict[str, str | None]] = [{"ablated_feature": None, "ablated_layer": None}]
    for label, names in (("features", features), ("layers", layers)):
        if names is not None and (isinstance(names, str) or not all(isinstance(n, str) and n for n in names)):
            raise SearchSpaceError(f"{label} must be a list of names, got {names!r}")
    points += [{"ablated_feature": f, "ablated_layer": None} for f in features or []]
    points += [{"ablated_feature": None, "ablated_layer": layer} for layer in layers or []]
    if len(points) == 1:
        raise SearchSpaceError("an ablation study needs features or layers to leave out, e.g. features=['age']")
    _check_workers(num_workers, None)

    request = SearchRequest.of(
        RunRequest(train_fn, name, description, None, versioned_resources, local_logdir, seed, timeline),
        {"features": list(features or []), "layers": list(layers or [])}, direction, optimization_key, "ablation",
        PointList([dict(p) for p in points]), SlotPlan(len(points), num_workers))
    return run_search(request, _settings(settings))
