"""Run a verb's stages: what launch and the distributed verbs share (a search's trials run in
`hopsml.runs.search_run`); what every run needs at its start is `hopsml.runs.start`.
"""

from __future__ import annotations

import functools
import logging
import numbers
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from hopsml import checkpoint, config
from hopsml.cluster.handle import SparkHandle
from hopsml.collective.options import CollectiveOptions
from hopsml.errors import ClusterError, ExperimentFailed, HopsmlError
from hopsml.fs import Storage
from hopsml.launcher.driver import StageMonitor, check_barrier_stage, open_channel, run_stage
from hopsml.launcher.messages import RankReport
from hopsml.launcher.task.child import ChildRank
from hopsml.launcher.task.rank import CollectiveRank, RankFramework, barrier_task
from hopsml.layout import ExperimentDir
from hopsml.runs import blame, rerun
from hopsml.runs.request import RunRequest
from hopsml.runs.slot_loop import SlotLoop
from hopsml.runs.start import Start, check_function, ship
from hopsml.runs.trials import Trials
from hopsml.search.scheduler import PointList
from hopsml.search.space import Direction
from hopsml.tracking.record import ExperimentRun, ExperimentType

log = logging.getLogger(__name__)


def metric_of(result: dict[str, Any], metric_key: str | None) -> Any:
    """The run's metric: the value under `metric_key` (else 'metric') when it is a number."""
    key = metric_key or "metric"
    value = result.get(key)
    if metric_key and key not in result:
        log.warning("metric_key %r is not in the function's return value (keys: %s)",
                    metric_key, ", ".join(result) or "none")
    return value if isinstance(value, numbers.Real) else None


def executions(args: dict[str, Any]) -> list[dict[str, Any]] | None:
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


def launch(request: RunRequest, args_dict: dict[str, Any] | None, settings: config.Settings | None = None
           ) -> tuple[str, Any]:
    """experiment.launch: one task (or one per execution of list arguments), each in a child process; with
    `timeline`, the single task records its timeline and system metrics (the executions of the list form run as
    a search's trials)."""
    train_fn, name, metric_key = request.train_fn, request.name, request.metric_key
    args = rerun.arguments(name, train_fn, check_function(train_fn, args_dict, name, request.versioned_resources))
    runs = executions(args)
    ship(train_fn, args)
    start = Start.of(settings or config.load(), train_fn, request.seed)
    spark = start.spark()
    run = start.start_run(spark, request, hyperparameters=args, type=ExperimentType.EXPERIMENT.value,
                          executors=len(runs) if runs else 1)
    log.info("experiment %s started: %s", run.id, run.logdir)
    with run:
        if runs is not None:
            return run.logdir, _run_executions(spark, start, run, request, runs)
        monitor = StageMonitor()
        channel = open_channel(spark, monitor, start.network)
        spec = start.spec(run.dir.path, channel, local_logdir=bool(request.local_logdir))
        timeline = bool(request.timeline)

        def one_task(_: Iterator[int]) -> Iterator[dict[str, Any]]:
            # in a child process, as trials are: a function that ends its process is a FAILED run with the cause
            yield ChildRank(train_fn, spec, kwargs=args, rank=0, world_size=1, write_metrics=True,
                            native_output=True, timeline=timeline, fork=True).wait()

        try:
            collected = run_stage(spark, one_task, 1, job_group=run.id, checks=start.checks,
                                  description=f"hopsml experiment '{name}' ({run.id})")
        finally:
            channel.close()
        (report,) = monitor.settle(collected)
        if not report.ok:
            raise ExperimentFailed(f"experiment {run.id} failed: {report.error}", traceback=report.traceback,
                                   output_tail=report.tail, logdir=run.logdir, rank=0, report=report)
        fields = monitor.timeline.finish(start.storage, run.dir) if timeline else {"timeline": {"enabled": False}}
        run.finish(metric=metric_of(report.result, metric_key), results=report.result, seeds=report.seeded, **fields)
    return run.logdir, report.result


def _run_executions(spark: SparkHandle, start: Start, run: ExperimentRun, request: RunRequest,
                    runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """launch's list form: every execution in parallel, each in its own folder with its record."""
    trials = Trials(run, optimization_key=request.metric_key or "metric", direction=Direction.MAX,
                    metric_required=False, unit="execution")
    loop = SlotLoop(spark, trials, request.train_fn, start.snapshot, checks=start.checks, seed=start.seed,
                    local_logdir=bool(request.local_logdir))
    loop.run_async(PointList(runs), total=len(runs))
    trials.close_progress()
    ended = sorted(trials.trials, key=lambda t: t.index)
    failed = [t for t in ended if t.state != "FINISHED"]
    if failed:
        first = failed[0]
        raise ExperimentFailed(f"{len(failed)} of {len(ended)} executions of experiment {run.id} failed; "
                               f"the first, {first.params}: {first.error}", traceback=first.traceback or "",
                               logdir=run.logdir)
    results = [t.outputs for t in ended]
    metrics = [t.metric for t in ended]
    run.finish(metric=metrics[0] if len(metrics) == 1 else None, results=results,
               executions=[{"params": t.params, "logdir": run.storage.uri(t.dir), "metric": t.metric}
                           for t in ended])
    return results


@dataclass(frozen=True)
class Ranks:
    """How a distributed verb runs its ranks: how many, GPUs each, the framework's hooks (given the run's
    snapshot, on the driver) and teardown hooks for the end of each rank."""

    workers: int
    gpus: int
    kind: str  # the verb, for the Spark UI
    framework: Callable[[config.RunSettings], Callable[[], RankFramework]]
    on_shutdown: Sequence[Callable[[], None]] = ()
    timeline: bool = False  # the ranks record a timeline (hopsml.timeline): merge it, record stragglers


def collective_ranks(train_fn: Callable[[], Any], *, workers: int, gpus: int, timeout_s: float | None,
                     all_ranks_write_metrics: bool, timeline: bool = True) -> Ranks:
    """experiment.allreduce's ranks: hopsml's collective, and a torch process group ended with each rank."""
    from hopsml.torch.process_group import end_rank_group

    def framework(snapshot: config.RunSettings) -> Callable[[], RankFramework]:
        return functools.partial(CollectiveRank, train_fn, CollectiveOptions.from_settings(snapshot, timeout_s),
                                 all_ranks_write_metrics, bool(timeline))

    return Ranks(workers, gpus, "allreduce", framework, (end_rank_group,), bool(timeline))


def run_ranks(request: RunRequest, settings: config.Settings, ranks: Ranks, *, retries: int = 0,
              resume: str | None = None, **fields: Any) -> tuple[str, dict[str, Any]]:
    """What every distributed verb shares: checks, the record, a barrier stage (again, up to `retries`
    times, when a rank died), rank 0's result (`fields` go into the finished record)."""
    if not isinstance(retries, int) or isinstance(retries, bool) or retries < 0:
        raise HopsmlError(f"retries must be 0 or more, got {retries!r}")
    check_function(request.train_fn, None, request.name, request.versioned_resources)
    if ranks.gpus < 0:
        raise HopsmlError(f"gpus_per_worker must be 0 or more, got {ranks.gpus}")
    ship(request.train_fn)
    start = Start.of(settings, request.train_fn, request.seed)
    spark = start.spark()
    check_barrier_stage(spark, ranks.workers, ranks.gpus)
    source = resume_source(start.storage, settings.project, resume) if resume else None
    run = start.start_run(spark, request, type=ExperimentType.DISTRIBUTED_TRAINING.value, executors=ranks.workers,
                          gpus_per_executor=ranks.gpus)
    log.info("distributed experiment %s started with %d ranks: %s", run.id, ranks.workers, run.logdir)
    late_after_s = start.snapshot.late_rank_s
    with run:
        if source is not None:
            step = checkpoint.copy_latest(start.storage, source.path, run.dir.path)
            fields["resumed_from"] = {"experiment": source.id, "step": step}
            log.info("experiment %s resumes from step %s of %s", run.id, step, source.id)
        for attempt in range(1, retries + 2):
            reports, failures, monitor = barrier_attempt(
                spark, start, run, ranks, local_logdir=request.local_logdir, late_after_s=late_after_s,
                description=f"hopsml {ranks.kind} '{request.name}' ({run.id}, {ranks.workers} ranks)")
            if monitor.late:
                raise blame.late_ranks(monitor.late, monitor.finished, run, late_after_s)
            if not failures:
                break
            if attempt > retries or not blame.retryable(failures):
                raise blame.rank_failure(failures, run)
            log.warning("experiment %s: rank %s failed (%s); starting the ranks again (attempt %d of %d), "
                        "from the last checkpoint if the function saved one", run.id, failures[0].rank,
                        (failures[0].error.splitlines() or [""])[0], attempt + 1, retries + 1)
        fields["attempts"] = attempt
        fields.update(monitor.timeline.finish(start.storage, run.dir) if ranks.timeline
                      else {"timeline": {"enabled": False}})
        by_rank = {r.rank: r for r in reports if r.rank is not None}
        result = by_rank[0].result
        run.finish(metric=metric_of(result, request.metric_key), results=[by_rank[r].result for r in sorted(by_rank)],
                   seeds=by_rank[0].seeded, **fields)
    return run.logdir, result


def barrier_attempt(spark: SparkHandle, start: Start, run: ExperimentRun, ranks: Ranks, *, local_logdir: bool,
                    description: str, late_after_s: float
                    ) -> tuple[list[RankReport], list[RankReport], StageMonitor]:
    """One barrier stage of the run: every rank's report once, the failures (cause first), the monitor."""
    monitor = StageMonitor(prefix_ranks=True, abort_on_failure=True)
    channel = open_channel(spark, monitor, start.network)
    spec = start.spec(run.dir.path, channel, local_logdir=bool(local_logdir))
    partition = barrier_task(spec, gpus_per_worker=ranks.gpus, framework=ranks.framework(start.snapshot),
                             on_shutdown=ranks.on_shutdown)
    watch = monitor.watch_for_late_ranks(ranks.workers, late_after_s)
    crashed: list[RankReport] = []
    collected: list[Any] = []
    try:
        collected = run_stage(spark, partition, ranks.workers, barrier=True, abort=monitor.failed,
                              job_group=run.id, description=description, checks=start.checks)
    except ClusterError as error:  # a rank's process died: say which, with its last lines
        crashed = [blame.crashed_rank(error, run)]
    finally:
        watch.set()
        channel.close()
    reports = monitor.settle(collected)
    failures = sorted(monitor.failures() + crashed, key=blame.first_cause)
    return reports, failures, monitor


def resume_source(storage: Storage, project: str, exp_id: str) -> ExperimentDir:
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


def tensorflow_ranks(train_fn: Callable[[], Any], *, strategy: str, workers: int, gpus: int, num_ps: int = 0,
                     evaluator: bool = False, timeline: bool = True) -> Ranks:
    """The ranks of a TensorFlow strategy (mirrored, parameter_server), each function in a child process (with
    its timeline: spans and system metrics; TensorFlow's collectives are its own, so no stragglers are named)."""
    from hopsml.launcher.task.tf_cluster import TensorFlowRank

    def framework(_: config.RunSettings) -> Callable[[], RankFramework]:
        return functools.partial(TensorFlowRank, train_fn, strategy=strategy, num_ps=num_ps, evaluator=evaluator,
                                 timeline=bool(timeline))

    return Ranks(workers, gpus, strategy, framework, timeline=bool(timeline))
