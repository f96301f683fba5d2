"""The public verbs: run a training function on the cluster and version everything about it.

    from hopsml import experiment
    logdir, result = experiment.launch(train, {"lr": 0.01}, name="digits")

Names and return values follow the hops library, so a Hopsworks user feels at home.
"""

from __future__ import annotations

import logging
import numbers
import re
from typing import Any
from collections.abc import Callable, Iterable, Iterator

from hopsml import checkpoint, config, session
from hopsml.errors import ClusterError, ExperimentFailed, HopsmlError
from hopsml.fs import Storage
from hopsml.launcher import tf_cluster
from hopsml.launcher.driver import (Live, check_barrier_stage, check_shippable, open_channel, run_stage,
                                    ship_by_value)
from hopsml.launcher.rank import barrier_partition
from hopsml.launcher.child import ChildRank
from hopsml.launcher.task import TaskSpec
from hopsml.layout import ExperimentDir
from hopsml.net import Network
from hopsml.search import space
from hopsml.search.early_stopping import RULES, MedianStoppingRule
from hopsml.search.evolution import DifferentialEvolution, Member
from hopsml.search.runner import Search, Trial
from hopsml.search.space import Direction, SearchSpaceError
from hopsml.tracking.record import ExperimentRun, ExperimentType

log = logging.getLogger(__name__)


def _check_function(train_fn: Any, args_dict: Any, name: str,
                    versioned_resources: Iterable[str] | None = None) -> dict[str, Any]:
    """What can be checked before Spark starts (seconds): the function, its arguments, the name, the files."""
    ExperimentRun.check_arguments(name, versioned_resources)
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


def _network(snapshot: config.RunSettings) -> Network:
    return Network(snapshot.network_interface, snapshot.port_range)


def _start_run(sc: Any, storage: Storage, settings: config.Settings, snapshot: config.RunSettings,
               train_fn: Callable[..., Any], *, name: str, versioned_resources: Iterable[str] | None,
               **fields: Any) -> ExperimentRun:
    return ExperimentRun.start(storage, settings.project, sc.applicationId, name=name, fn=train_fn,
                               versioned_resources=versioned_resources, heartbeat_s=snapshot.heartbeat_s,
                               user=snapshot.user,
                               spark_conf=dict(sc.getConf().getAll()), spark_version=sc.version, **fields)


def _executions(args: dict[str, Any]) -> list[dict[str, Any]] | None:
    """hops' launch semantics: list values give one execution per list index; None when all are scalars.

    Scalars beside lists go to every execution; lists of unequal length are refused here, before Spark.
    """
    lists = {k: v for k, v in args.items() if isinstance(v, list)}
    if not lists:
        return None
    lengths = {k: len(v) for k, v in lists.items()}
    if len(set(lengths.values())) != 1:
        raise HopsmlError("launch runs one execution per list index, so every list in args_dict must have the "
                          f"same length; got {', '.join(f'{k}: {n}' for k, n in lengths.items())}. Make them equal, "
                          "or wrap a value that is itself a list in one more list ([[64, 32]])")
    count = next(iter(lengths.values()))
    if count == 0:
        raise HopsmlError(f"the lists in args_dict are empty ({', '.join(lists)}): nothing to run")
    return [{k: (v[i] if k in lists else v) for k, v in args.items()} for i in range(count)]


def launch(train_fn: Callable[..., Any], args_dict: dict[str, Any] | None = None, name: str = "no-name",
           local_logdir: bool = False, description: str | None = None, metric_key: str | None = None,
           versioned_resources: list[str] | None = None) -> tuple[str, Any]:
    """Run `train_fn(**args_dict)` in a Spark task; returns (logdir, return_dict).

    As in hops, list values run the function once per list index, in parallel Spark tasks:
    `{'a': [1, 2], 'b': [5, 3]}` runs fn(a=1, b=5) and fn(a=2, b=3); each execution gets its own
    folder `<k=v&...>/` (like a search trial) and the return value is then the list of the executions'
    return dicts, in index order. The run directory gets experiment.json, the calling notebook or
    script, conda.yml, the function's output.log, its metrics and TensorBoard events (with
    `local_logdir=True` written to the executor's disk first and copied in at the end), and any file
    whose path it returns.
    """
    args = _check_function(train_fn, args_dict, name, versioned_resources)
    executions = _executions(args)
    ship_by_value(train_fn)
    check_shippable(train_fn, args)
    settings = config.load()
    snapshot = config.RunSettings.of(settings)
    storage = Storage(settings.root)
    sc = session.get_or_create(settings).sparkContext
    run = _start_run(sc, storage, settings, snapshot, train_fn, name=name, versioned_resources=versioned_resources,
                     description=description, metric_key=metric_key, hyperparameters=args,
                     type=ExperimentType.EXPERIMENT.value, executors=len(executions or [None]))
    log.info("experiment %s started: %s", run.id, run.logdir)
    with run:
        if executions is not None:
            return run.logdir, _run_executions(sc, run, snapshot, train_fn, executions, metric_key, local_logdir)
        channel = open_channel(sc, Live(), _network(snapshot))
        spec = TaskSpec(storage, run.dir.path, channel.address, channel.secret, local_logdir=bool(local_logdir),
                        settings=snapshot)

        def one_task(_: Iterator[int]) -> Iterator[dict[str, Any]]:
            # in a child process, as trials are: a function that ends its process is a FAILED run with the cause
            yield ChildRank(train_fn, spec, kwargs=args, rank=0, world_size=1, write_metrics=True,
                            native_output=True).wait()

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


def _run_executions(sc: Any, run: ExperimentRun, snapshot: config.RunSettings, train_fn: Callable[..., Any], executions: list[dict[str, Any]],
                    metric_key: str | None, local_logdir: bool) -> list[dict[str, Any]]:
    """launch's list form: every execution in parallel, each in its own folder with its record."""
    search = Search(sc, run, train_fn, snapshot, optimization_key=metric_key or "metric", direction=Direction.MAX,
                    local_logdir=bool(local_logdir), metric_required=False, unit="execution")
    trials = search.run_batch(executions, len(executions))
    search.close_progress()
    failed = [t for t in trials if t.state != "FINISHED"]
    if failed:
        first = failed[0]
        raise ExperimentFailed(f"{len(failed)} of {len(trials)} executions of experiment {run.id} failed; "
                               f"the first, {first.params}: {first.error}", traceback=first.traceback or "",
                               logdir=run.logdir)
    results = [t.outputs for t in trials]
    metrics = [t.metric for t in trials]
    run.finish(metric=metrics[0] if len(metrics) == 1 else None, results=results,
               executions=[{"params": t.params, "logdir": run.storage.uri(t.dir), "metric": t.metric}
                           for t in trials])
    return results


def _run_ranks(train_fn: Callable[..., Any], settings: config.Settings, *, name: str, description: str | None, metric_key: str | None,
               versioned_resources: list[str] | None, workers: int, gpus: int, kind: str,
               make_partition: Callable[[TaskSpec], Callable[[Iterator[int]], Iterator[dict[str, Any]]]],
               local_logdir: bool, retries: int = 0, resume: str | None = None,
               **fields: Any) -> tuple[str, dict[str, Any]]:
    """What every distributed verb shares: checks, the record, a barrier stage (again, up to `retries`
    times, when a rank died), rank 0's result (`fields` go into the finished record)."""
    if not isinstance(retries, int) or isinstance(retries, bool) or retries < 0:
        raise HopsmlError(f"retries must be 0 or more, got {retries!r}")
    _check_function(train_fn, None, name, versioned_resources)
    if gpus < 0:
        raise HopsmlError(f"gpus_per_worker must be 0 or more, got {gpus}")
    ship_by_value(train_fn)
    check_shippable(train_fn)
    snapshot = config.RunSettings.of(settings)
    storage = Storage(settings.root)
    sc = session.get_or_create(settings).sparkContext
    check_barrier_stage(sc, workers, gpus)
    source = _resume_source(storage, settings.project, resume) if resume else None
    run = _start_run(sc, storage, settings, snapshot, train_fn, name=name, versioned_resources=versioned_resources,
                     description=description, metric_key=metric_key,
                     type=ExperimentType.DISTRIBUTED_TRAINING.value, executors=workers, gpus_per_executor=gpus)
    log.info("distributed experiment %s started with %d ranks: %s", run.id, workers, run.logdir)
    with run:
        if source is not None:
            step = checkpoint.copy_latest(storage, source.path, run.dir.path)
            fields["resumed_from"] = {"experiment": source.id, "step": step}
            log.info("experiment %s resumes from step %s of %s", run.id, step, source.id)
        for attempt in range(1, retries + 2):
            reports, failures, live = _barrier_attempt(sc, storage, run, snapshot, make_partition, workers=workers,
                                                       local_logdir=local_logdir, description=(
                                                           f"hopsml {kind} '{name}' ({run.id}, {workers} ranks)"),
                                                       late_after_s=snapshot.late_rank_s)
            if live.late:
                raise _late_ranks(live, run, snapshot.late_rank_s)
            if not failures:
                break
            if attempt > retries or not all(_lost_rank(f) for f in failures):
                raise _rank_failure(failures, run)
            log.warning("experiment %s: rank %s failed (%s); starting the ranks again (attempt %d of %d), "
                        "from the last checkpoint if the function saved one", run.id, failures[0].get("rank"),
                        failures[0].get("error", "").splitlines()[0], attempt + 1, retries + 1)
        fields["attempts"] = attempt
        by_rank = {r["rank"]: r["result"] for r in reports}
        result = by_rank[0]
        run.finish(metric=_metric(result, metric_key), results=[by_rank[r] for r in sorted(by_rank)], **fields)
    return run.logdir, result


def allreduce(train_fn: Callable[[], Any], name: str = "no-name", local_logdir: bool = False,
              description: str | None = None, metric_key: str | None = None, num_workers: int | None = None,
              gpus_per_worker: int | None = None, versioned_resources: list[str] | None = None,
              timeout_s: float | None = None, all_ranks_write_metrics: bool = False, retries: int = 0,
              resume: str | None = None) -> tuple[str, dict[str, Any]]:
    """Data-parallel training: `train_fn()` runs once per rank, in one barrier-mode Spark task each,
    with `hopsml.collective` connected between the ranks; returns (logdir, rank 0's return_dict).

    When a rank's process dies (or a peer loses it), the ranks start again up to `retries` times;
    `resume=<experiment id>` starts from that experiment's newest checkpoint. Either way
    `hopsml.checkpoint.load()` in the function returns the latest checkpoint to continue from.

    Each rank's output goes to logs/worker_<rank>.log and streams here prefixed with its rank. If a
    rank fails, the others are stopped and ExperimentFailed names the rank and shows its last lines.
    RANK, WORLD_SIZE, MASTER_ADDR/PORT and TF_CONFIG name fresh ports for frameworks' own servers.
    """
    settings = config.load(num_workers=num_workers)
    workers, gpus = settings.num_workers, int(gpus_per_worker or 0)
    return _run_ranks(train_fn, settings, name=name, description=description, metric_key=metric_key,
                      versioned_resources=versioned_resources, workers=workers, gpus=gpus, kind="allreduce",
                      local_logdir=local_logdir, retries=retries, resume=resume,
                      make_partition=lambda spec: barrier_partition(
                          train_fn, spec, gpus_per_worker=gpus, timeout_s=timeout_s,
                          all_ranks_write_metrics=all_ranks_write_metrics))


collective_all_reduce = allreduce


def mirrored(train_fn: Callable[[], Any], name: str = "no-name", local_logdir: bool = False,
             description: str | None = None, evaluator: bool = False, metric_key: str | None = None,
             num_workers: int | None = None, gpus_per_worker: int | None = None,
             versioned_resources: list[str] | None = None) -> tuple[str, dict[str, Any]]:
    """TensorFlow MultiWorkerMirroredStrategy across `num_workers` Spark ranks; returns (logdir, the
    chief's return_dict).

    Each rank runs `train_fn()` in a fresh Python process with TF_CONFIG set (every rank a worker,
    worker 0 the chief; with `evaluator=True` the last rank is the evaluator), so
    `tf.distribute.MultiWorkerMirroredStrategy()` inside it finds its peers.
    """
    settings = config.load(num_workers=num_workers)
    workers, gpus = settings.num_workers, int(gpus_per_worker or 0)
    tf_cluster.roles(tf_cluster.MIRRORED, workers, evaluator=evaluator)  # refuse a bad layout before Spark
    return _run_ranks(train_fn, name=name, description=description, metric_key=metric_key,
                      versioned_resources=versioned_resources, workers=workers, gpus=gpus, kind="mirrored",
                      local_logdir=local_logdir, strategy=tf_cluster.MIRRORED, evaluator=bool(evaluator),
                      make_partition=lambda spec: tf_cluster.tf_partition(
                          train_fn, spec, strategy=tf_cluster.MIRRORED, num_ps=0, evaluator=bool(evaluator),
                          gpus_per_worker=gpus))


def parameter_server(train_fn: Callable[[], Any], name: str = "no-name", local_logdir: bool = False,
                     description: str | None = None, evaluator: bool = False, metric_key: str | None = None,
                     num_workers: int = 1, num_ps: int = 1, gpus_per_worker: int | None = None,
                     versioned_resources: list[str] | None = None) -> tuple[str, dict[str, Any]]:
    """TensorFlow 2 ParameterServerStrategy on 1 + num_ps + num_workers (+ 1 evaluator) Spark ranks;
    returns (logdir, the chief's return_dict).

    Rank 0 is the chief: it runs `train_fn()`, which builds the strategy from TF_CONFIG and drives the
    training with a ClusterCoordinator. The ps and worker ranks host a `tf.distribute.Server` until the
    chief's function has ended, then stop; if the chief fails, they are stopped with it.
    """
    for label, value in (("num_workers", num_workers), ("num_ps", num_ps)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise HopsmlError(f"parameter_server needs {label} >= 1, got {value!r}")
    ranks, gpus = 1 + num_ps + num_workers + (1 if evaluator else 0), int(gpus_per_worker or 0)
    return _run_ranks(train_fn, config.load(), name=name, description=description, metric_key=metric_key,
                      versioned_resources=versioned_resources, workers=ranks, gpus=gpus, kind="parameter_server",
                      local_logdir=local_logdir, strategy=tf_cluster.PARAMETER_SERVER, num_ps=num_ps,
                      evaluator=bool(evaluator),
                      make_partition=lambda spec: tf_cluster.tf_partition(
                          train_fn, spec, strategy=tf_cluster.PARAMETER_SERVER, num_ps=num_ps,
                          evaluator=bool(evaluator), gpus_per_worker=gpus))


def _worker_log_tail(run: ExperimentRun, rank: int, lines: int = 30) -> str:
    path = run.dir.worker_log(rank)
    return "\n".join(run.storage.read_text(path).splitlines()[-lines:]) if run.storage.exists(path) else ""


# What a rank's CollectiveError says of the peer it waited on: it died, or it never joined the call.
_PEER_DIED = re.compile(r"rank (\d+) probably died")
_PEER_STUCK = re.compile(r"rank (\d+) made no progress")


def _silent_peer(failures: list[dict[str, Any]]) -> tuple[int, dict[str, Any], bool] | None:
    """The rank that peers' CollectiveErrors name as dead or stuck, with the report naming it.

    With three or more ranks a waiting rank may name another waiting one; the rank that never
    reported anything itself is the cause, so it is preferred.
    """
    if not failures or "CollectiveError" not in failures[0].get("error", ""):
        return None  # a rank's own error, or Spark's, comes first: that is the cause
    reporters = {f.get("rank") for f in failures}
    named = []
    for report in failures:
        error = report.get("error", "")
        if "CollectiveError" not in error:
            continue
        for pattern, died in ((_PEER_DIED, True), (_PEER_STUCK, False)):
            match = pattern.search(error)
            if match is not None:
                named.append((int(match.group(1)), report, died))
    silent = [n for n in named if n[0] not in reporters]
    return (silent or named or [None])[0]


def _rank_failure(failures: list[dict[str, Any]], run: ExperimentRun) -> ExperimentFailed:
    """The error for a failed distributed run, about the rank that caused it.

    When the only reports are peers that lost a rank, or that waited in vain for one, that rank never
    said a word itself: name it and show its own last log lines rather than the survivor's.
    """
    blamed = _silent_peer(failures)
    if blamed is not None:
        rank, witness, died = blamed
        what = "died or disconnected" if died else "made no progress (hung, or stuck before a collective its peers called)"
        return ExperimentFailed(f"experiment {run.id} failed: rank {rank} {what} "
                                f"(rank {witness['rank']} saw: {witness['error']})",
                                output_tail=_worker_log_tail(run, rank), logdir=run.logdir)
    first = failures[0]
    error = first.get("error", "")
    if first.get("rank") is None:
        return ExperimentFailed(f"experiment {run.id} failed: {error}", logdir=run.logdir)
    return ExperimentFailed(f"experiment {run.id} failed: rank {first['rank']} raised {error}",
                            traceback=first.get("traceback", ""), output_tail=first.get("tail", ""),
                            logdir=run.logdir)


def _barrier_attempt(sc: Any, storage: Storage, run: ExperimentRun, snapshot: config.RunSettings, make_partition: Callable[..., Any], *,
                     workers: int, local_logdir: bool, description: str, late_after_s: float
                     ) -> tuple[list[dict[str, Any]], list[dict[str, Any]], Live]:
    """One barrier stage of the run: the ranks' reports, the failures (cause first), what was seen live."""
    live = Live(prefix_ranks=True, abort_on_failure=True)
    channel = open_channel(sc, live, _network(snapshot))
    spec = TaskSpec(storage, run.dir.path, channel.address, channel.secret, local_logdir=bool(local_logdir),
                    settings=snapshot)
    watch = live.watch_for_late_ranks(workers, late_after_s)
    try:
        reports = run_stage(sc, make_partition(spec), workers, barrier=True, abort=live.failed,
                            job_group=run.id, description=description)
    except ClusterError as error:  # a rank's process died: say which, with its last lines
        reports = [_crashed_rank(error, run)]
    finally:
        watch.set()
        channel.close()
    failures = sorted(live.failures() + [r for r in reports if not r["ok"]], key=_first_cause)
    return reports, failures, live


def _lost_rank(report: dict[str, Any]) -> bool:
    """A failure that starting the ranks again can cure: a rank's process died, or a peer lost it."""
    error = report.get("error", "")
    return error.startswith("its process died") or error.startswith("CollectiveError")


def _resume_source(storage: Storage, project: str, exp_id: str) -> ExperimentDir:
    """The experiment `resume=` names, checked before anything starts: it must have a checkpoint."""
    try:
        source = ExperimentDir.from_id(project, exp_id)
    except HopsmlError as exc:
        raise HopsmlError(f"resume={exp_id!r}: {exc}; see 'hopsml experiments list'") from None
    if not checkpoint.steps(storage, source.path):
        raise HopsmlError(f"resume={exp_id!r}: that experiment has no checkpoint to resume from "
                          f"({storage.uri(source.checkpoint)} is empty or missing); its function must call "
                          "hopsml.checkpoint.save(state, step)")
    return source


def _late_ranks(live: Live, run: ExperimentRun, late_after_s: float) -> ExperimentFailed:
    """The error for ranks that did not return long after a peer did (hung, or waiting on a peer)."""
    first = live.finished[0].get("rank") if live.finished else "?"
    names = ", ".join(str(r) for r in live.late)
    tails = "\n".join(f"--- rank {r}, last lines of logs/worker_{r}.log:\n{_worker_log_tail(run, r) or '(nothing)'}"
                      for r in live.late)
    return ExperimentFailed(f"experiment {run.id} failed: rank(s) {names} did not return within "
                            f"{late_after_s:.0f} s after rank {first} had (setting late_rank_s); they were "
                            "stopped. A rank that stops calling the collectives its peers call, or hangs in "
                            "its own code, looks like this", output_tail=tails, logdir=run.logdir)


# How Spark names the task it saw fail: a task failure ('Task 1 in stage 3.0 failed 1 times') or the
# barrier stage's abort ('barrier task ResultTask(3, 1) finished unsuccessfully'); partition = rank.
_FAILED_TASK = (re.compile(r"Task (\d+) in stage"), re.compile(r"ResultTask\(\d+, (\d+)\)"))


def _crashed_rank(error: ClusterError, run: ExperimentRun) -> dict[str, Any]:
    """A failure report for the rank whose task Spark saw die (its partition id is its rank)."""
    text = str(error)
    first_line = text.splitlines()[0] if text else "no message"
    for pattern in _FAILED_TASK:
        match = pattern.search(text)
        if match is not None:
            rank = int(match.group(1))
            return {"ok": False, "rank": rank, "tail": _worker_log_tail(run, rank), "traceback": "",
                    "error": f"its process died ({first_line})"}
    return {"ok": False, "rank": None, "tail": "", "traceback": "", "error": text}


def _first_cause(report: dict[str, Any]) -> tuple[int, int]:
    """Order failures so the rank that caused them comes first, not a peer that lost it."""
    lost_peer = "CollectiveError" in report.get("error", "")
    if report.get("rank") is None:  # Spark failed the stage without naming a task: any named cause first
        return (2, 0)
    return (1 if lost_peer else 0, report["rank"])


def _search(train_fn: Callable[..., Any], space_description: dict[str, Any], direction: Direction | str,
            optimization_key: str, name: str, description: str | None, versioned_resources: list[str] | None,
            early_stopping: str | None, early_stopping_min_steps: int, local_logdir: bool,
            batches: Callable[[Search], None], **record_fields: Any) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """What every search verb shares: checks, the experiment record, the trials, the best result."""
    _check_function(train_fn, None, name, versioned_resources)
    if not isinstance(optimization_key, str) or not optimization_key:
        raise SearchSpaceError(f"optimization_key must name the metric to optimise, got {optimization_key!r}")
    goal = Direction.of(direction)
    if early_stopping not in (None, *RULES):
        raise SearchSpaceError(f"early_stopping must be one of {', '.join(RULES)} or None, not {early_stopping!r}")
    rule = MedianStoppingRule(goal, min_steps=early_stopping_min_steps) if early_stopping else None
    ship_by_value(train_fn)
    check_shippable(train_fn)
    settings = config.load()
    snapshot = config.RunSettings.of(settings)
    storage = Storage(settings.root)
    sc = session.get_or_create(settings).sparkContext
    run = _start_run(sc, storage, settings, snapshot, train_fn, name=name, versioned_resources=versioned_resources,
                     description=description, type=ExperimentType.PARALLEL_EXPERIMENTS.value,
                     hyperparameters=space_description, direction=goal.value, optimization_key=optimization_key,
                     metric_key=optimization_key, executors=sc.defaultParallelism)
    log.info("search %s started: %s", run.id, run.logdir)
    with run:
        search = Search(sc, run, train_fn, snapshot, optimization_key=optimization_key, direction=goal, early_stopping=rule,
                        local_logdir=bool(local_logdir))
        batches(search)
        best = search.conclude(**record_fields)
    return run.logdir, best.params, best.outputs


def grid_search(train_fn: Callable[..., Any], grid_dict: dict[str, list[Any]], direction: Direction | str = "max",
                name: str = "no-name", local_logdir: bool = False, description: str | None = None,
                optimization_key: str = "metric",
                versioned_resources: list[str] | None = None, early_stopping: str | None = None,
                early_stopping_min_steps: int = 3) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """Every combination of `grid_dict` as its own trial, in parallel; returns (logdir, best_params, best_return)."""
    combos = space.grid(grid_dict)
    return _search(train_fn, dict(grid_dict), direction, optimization_key, name, description, versioned_resources,
                   early_stopping, early_stopping_min_steps, local_logdir, lambda s: s.run_batch(combos, len(combos)),
                   strategy="grid")


def random_search(train_fn: Callable[..., Any], boundary_dict: dict[str, Any], direction: Direction | str = "max",
                  samples: int = 10, name: str = "no-name", local_logdir: bool = False,
                  description: str | None = None, optimization_key: str = "metric", seed: int | None = None,
                  versioned_resources: list[str] | None = None, log_scale: list[str] | None = None,
                  early_stopping: str | None = None, early_stopping_min_steps: int = 3
                  ) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """`samples` random points within `boundary_dict` ([low, high] numbers, or lists as categories;
    names in `log_scale` are sampled on a log scale); the same seed gives the same trials."""
    points = space.Space.from_bounds(boundary_dict, log_scale or ()).sample(samples, seed)
    return _search(train_fn, dict(boundary_dict), direction, optimization_key, name, description,
                   versioned_resources, early_stopping, early_stopping_min_steps, local_logdir,
                   lambda s: s.run_batch(points, len(points)), strategy="random", seed=seed)


def differential_evolution(train_fn: Callable[..., Any], boundary_dict: dict[str, Any],
                           direction: Direction | str = "max", generations: int = 4, population: int = 6,
                           mutation: float = 0.5, crossover: float = 0.7, name: str = "no-name",
                           local_logdir: bool = False, description: str | None = None,
                           optimization_key: str = "metric", seed: int | None = None,
                           versioned_resources: list[str] | None = None,
                           log_scale: list[str] | None = None) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """Evolve a population over `generations`, each generation one parallel batch of trials."""
    evolution = DifferentialEvolution(space.Space.from_bounds(boundary_dict, log_scale or ()),
                                      population=population, mutation=mutation, crossover=crossover,
                                      direction=Direction.of(direction), seed=seed)
    if not isinstance(generations, int) or generations < 1:
        raise SearchSpaceError(f"generations must be a positive integer, got {generations!r}")
    total = population * generations
    best_per_generation: list[float | None] = []

    def evolve(search: Search) -> None:
        def members(trials: list[Trial]) -> list[Member]:
            return [Member(t.params, t.metric if t.state == "FINISHED" else None) for t in trials]

        current = members(search.run_batch(evolution.initial(), total))
        best_per_generation.append(_best_metric(current, evolution))
        for _ in range(generations - 1):
            offspring = members(search.run_batch(evolution.offspring(current), total))
            current = evolution.select(current, offspring)
            best_per_generation.append(_best_metric(current, evolution))

    return _search(train_fn, dict(boundary_dict), direction, optimization_key, name, description,
                   versioned_resources, None, 3, local_logdir, evolve, strategy="differential_evolution",
                   generations=generations, population=population, best_per_generation=best_per_generation)


def _best_metric(members: list[Member], evolution: DifferentialEvolution) -> float | None:
    return evolution.direction.best([m.metric for m in members if m.metric is not None])
