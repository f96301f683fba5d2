"""The engine of a search, on the driver: trials as parallel Spark tasks, each in its own folder of the experiment,
with live progress, early stopping over the authenticated channel, and a summary kept up to date.

Each trial's function runs in a child process of its task (launcher/child.py): a trial that ends its
process (os._exit, a segfault, an out-of-memory kill) is recorded FAILED with its exit cause and the
search goes on; the other trials and the shared Python workers are not affected."""

from __future__ import annotations

import logging
import math
import numbers
import posixpath
import threading
from dataclasses import asdict, dataclass, field
from typing import Any
from collections.abc import Callable, Iterator

from hopsml.config import RunSettings
from hopsml.errors import ExperimentFailed, StorageError
from hopsml.launcher.channel import Connection
from hopsml.launcher.child import ChildRank
from hopsml import preflight
from hopsml.launcher.driver import StageMonitor, open_channel, run_stage
from hopsml.launcher.messages import Metric, RankReport, Stop, to_wire
from hopsml.launcher.task import TaskSpec
from hopsml.net import Network
from hopsml.progress import progress_bar
from hopsml.layout import RunDir
from hopsml.search import hparams as hparams_events
from hopsml.search.early_stopping import RULES, MedianStoppingRule
from hopsml.search.evolution import DifferentialEvolution, Member
from hopsml.search.space import Direction, SearchSpaceError
from hopsml.tracking.record import ExperimentRun, ExperimentType, State

log = logging.getLogger(__name__)


@dataclass
class Trial:
    """One set of parameters and what became of it (written to .summary.json)."""

    index: int
    params: dict[str, Any]
    dir: str
    state: str = "PENDING"
    metric: float | None = None
    outputs: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    traceback: str | None = None
    duration: float | None = None

    def summary(self) -> dict[str, Any]:
        return asdict(self)


class Search:
    """Runs batches of trials for one PARALLEL_EXPERIMENTS experiment."""

    def __init__(self, sc: Any, run: ExperimentRun, fn: Callable[..., Any], settings: RunSettings, *,
                 optimization_key: str, checks: preflight.Preflight | None = None, seed: int | None = None,
                 direction: Direction, early_stopping: MedianStoppingRule | None = None,
                 local_logdir: bool = False, metric_required: bool = True, unit: str = "trial") -> None:
        self.sc, self.run, self.fn, self.settings, self.checks, self.seed = sc, run, fn, settings, checks, seed
        self.seeded: dict[str, int] = {}
        self.key, self.direction, self.rule = optimization_key, direction, early_stopping
        self.local_logdir = local_logdir
        self.metric_required = metric_required  # launch's executions may return no metric at all
        self.unit = unit
        self.trials: list[Trial] = []
        self._lock = threading.Lock()
        self._names: set[str] = set()
        self._bar: Any = None

    # --- bookkeeping ---------------------------------------------------------------------------
    def _new_trial(self, params: dict[str, Any]) -> Trial:
        base = self.run.dir.trial(params).path
        path, n = base, 1
        while path in self._names:  # the same parameters twice (random or evolutionary search)
            n += 1
            path = f"{base}_{n}"
        self._names.add(path)
        trial = Trial(len(self.trials), params, path)
        self.trials.append(trial)
        self.run.storage.write_json(RunDir(path).hparams, params)
        return trial

    def _metric_of(self, outputs: dict[str, Any]) -> float:
        if self.key not in outputs:
            raise ValueError(f"the return value has no {self.key!r} (the optimization_key); it has: "
                             f"{', '.join(outputs) or 'nothing'}")
        value = outputs[self.key]
        if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
            raise ValueError(f"{self.key!r} must be a finite number, got {value!r}")
        return float(value)

    def _finish(self, report: RankReport) -> None:
        """Record a trial's end (its report, once: from its live message, else from the collected results)."""
        with self._lock:
            if report.trial is None:
                return
            self.seeded = self.seeded or dict(report.seeded)  # every trial seeds alike: any one says how
            trial = self.trials[report.trial]
            if trial.state != "RUNNING":
                return
            trial.duration = report.duration
            outputs = report.result
            trial.outputs = outputs
            if report.ok and not self.metric_required:
                value = outputs.get(self.key)
                finite = isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)
                trial.metric = float(value) if finite and value is not None else None
                trial.state = State.FINISHED.value
            elif report.ok:
                try:
                    trial.metric = self._metric_of(outputs)
                    trial.state = State.EARLY_STOPPED.value if report.stopped else State.FINISHED.value
                except ValueError as exc:
                    trial.state, trial.error = State.FAILED.value, str(exc)
                    if report.stopped:  # stopped before it logged the key: keep it as stopped
                        trial.state, trial.error = State.EARLY_STOPPED.value, None
            else:
                trial.state, trial.error = State.FAILED.value, report.error
                # a trial whose process died has no traceback: its last lines say what happened
                trial.traceback = report.traceback or report.tail
            if trial.state == State.FINISHED.value and self.rule is not None:
                self.rule.complete(trial.index)
            storage, trial_dir = self.run.storage, RunDir(trial.dir)
            storage.write_json(trial_dir.outputs, outputs)
            if trial.metric is not None:
                storage.write_text(trial_dir.metric, repr(trial.metric))
            try:   # TensorBoard's HParams tab: this trial's hyperparameters and metric
                hparams_events.write_trial(storage, trial_dir.tensorboard, trial.params, self.key, trial.metric,
                                           trial.state, trial.duration)
            except (OSError, StorageError) as exc:
                log.warning("could not write the HParams data of trial %s: %s", trial.dir, exc)
            self._write_summary()
            self._update_bar()

    def _on_metric(self, message: Metric, connection: Connection) -> None:
        value = message.values.get(self.key)
        if self.rule is None or message.trial is None or not isinstance(value, numbers.Real):
            return
        if self.rule.report(message.trial, message.step, float(value)):
            connection.send(to_wire(Stop()))

    def _write_summary(self) -> None:
        self.run.storage.write_json(self.run.dir.summary, {"trials": [t.summary() for t in self.trials]})

    def best(self) -> Trial | None:
        scored = [t for t in self.trials if t.metric is not None and t.state == State.FINISHED.value]
        scored = scored or [t for t in self.trials if t.metric is not None]
        return self.direction.best(scored, key=lambda t: t.metric)

    def _update_bar(self) -> None:
        if self._bar is None:
            return
        done = [t for t in self.trials if t.state not in ("PENDING", "RUNNING")]
        best = self.best()
        self._bar.n = len(done)
        self._bar.set_postfix(failed=sum(t.state == State.FAILED.value for t in done),
                              stopped=sum(t.state == State.EARLY_STOPPED.value for t in done),
                              best=f"{best.metric:.4g}" if best else "-", refresh=True)

    # --- running -------------------------------------------------------------------------------
    def run_batch(self, params_list: list[dict[str, Any]], total: int) -> list[Trial]:
        """Run trials in parallel (as many at once as the cluster has slots); returns them when all end."""
        batch = [self._new_trial(p) for p in params_list]
        monitor = StageMonitor(echo=False, on_metric=self._on_metric, on_finished=self._finish)
        channel = open_channel(self.sc, monitor, Network(self.settings.network_interface, self.settings.port_range))
        storage, fn = self.run.storage, self.fn
        specs = [(t.params, TaskSpec(storage, t.dir, channel.address, channel.secret, trial=t.index,
                                     trial_name=posixpath.basename(t.dir), local_logdir=self.local_logdir,
                                     settings=self.settings, seed=self.seed)) for t in batch]

        def one_trial(partition: Iterator[int]) -> Iterator[dict[str, Any]]:
            for i in partition:
                params, spec = specs[i]
                child = ChildRank(fn, spec, kwargs=params, rank=0, world_size=1, write_metrics=True,
                                  native_output=True)
                yield child.wait()

        if self._bar is None:
            self._bar = progress_bar(total=total, desc=f"{self.run.record.name} {self.unit}s", unit=self.unit, leave=True)
        for trial in batch:
            trial.state = "RUNNING"
        try:
            collected = run_stage(self.sc, one_trial, len(batch), job_group=self.run.id, checks=self.checks,
                                  description=f"hopsml search '{self.run.record.name}' ({self.run.id})")
        finally:
            channel.close()
        monitor.settle(collected)  # the trials whose live message did not reach us
        return batch

    def close_progress(self) -> None:
        """Close the progress bar (the trials are done)."""
        if self._bar is not None:
            self._bar.close()

    def conclude(self, **record_fields: Any) -> Trial:
        """Close the progress bar and record the best trial; raise if every trial failed."""
        self.close_progress()
        best = self.best()
        failed = [t for t in self.trials if t.state == State.FAILED.value]
        if best is None:
            first = failed[0] if failed else None
            raise ExperimentFailed(f"all {len(self.trials)} trials of experiment {self.run.id} failed"
                                   + (f"; the first: {first.error}" if first else ""),
                                   traceback=(first.traceback or "") if first else "", logdir=self.run.logdir)
        if failed:
            log.warning("%d of %d %ss failed; see %s", len(failed), len(self.trials), self.unit,
                        self.run.storage.uri(self.run.dir.summary))
        try:
            hparams_events.write_experiment(self.run.storage, self.run.dir.tensorboard,
                                            [t.params for t in self.trials], self.key)
        except (OSError, StorageError) as exc:
            log.warning("could not write the HParams data of %s: %s", self.run.id, exc)
        counts = {state: sum(t.state == state for t in self.trials)
                  for state in (State.FINISHED.value, State.FAILED.value, State.EARLY_STOPPED.value)}
        self.run.finish(metric=best.metric, results=best.outputs, best_hyperparameters=best.params,
                        best_logdir=self.run.storage.uri(best.dir), trials=counts, seeds=self.seeded,
                        **record_fields)
        return best


def run_search(train_fn: Callable[..., Any], space_description: dict[str, Any], direction: Direction | str,
               optimization_key: str, name: str, description: str | None, versioned_resources: list[str] | None,
               early_stopping: str | None, early_stopping_min_steps: int, local_logdir: bool,
               batches: Callable[[Search], Any], seed: int | None = None,
               **record_fields: Any) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """What every search verb shares: checks, the experiment record, the trials, the best result."""
    from hopsml import config
    from hopsml.runs.engine import Start, check_function, ship

    check_function(train_fn, None, name, versioned_resources)
    if not isinstance(optimization_key, str) or not optimization_key:
        raise SearchSpaceError(f"optimization_key must name the metric to optimise, got {optimization_key!r}")
    goal = Direction.of(direction)
    if early_stopping not in (None, *RULES):
        raise SearchSpaceError(f"early_stopping must be one of {', '.join(RULES)} or None, not {early_stopping!r}")
    rule = MedianStoppingRule(goal, min_steps=early_stopping_min_steps) if early_stopping else None
    ship(train_fn)
    start = Start.of(config.load(), train_fn, seed)
    sc = start.spark()
    run = start.start_run(sc, train_fn, name=name, versioned_resources=versioned_resources,
                          description=description, type=ExperimentType.PARALLEL_EXPERIMENTS.value,
                          hyperparameters=space_description, direction=goal.value, optimization_key=optimization_key,
                          metric_key=optimization_key, executors=sc.defaultParallelism)
    log.info("search %s started: %s", run.id, run.logdir)
    with run:
        search = Search(sc, run, train_fn, start.snapshot, checks=start.checks, seed=start.seed, optimization_key=optimization_key, direction=goal,
                        early_stopping=rule, local_logdir=bool(local_logdir))
        batches(search)
        best = search.conclude(**record_fields)
    return run.logdir, best.params, best.outputs


def evolve(evolution: DifferentialEvolution, generations: int, best_per_generation: list[float | None]
           ) -> Callable[[Search], None]:
    """The batches of a differential evolution: the initial population, then one batch of offspring per
    generation; the best metric of each generation is appended to `best_per_generation`."""
    total = evolution.population * generations

    def best(members: list[Member]) -> float | None:
        return evolution.direction.best([m.metric for m in members if m.metric is not None])

    def run(search: Search) -> None:
        def members(trials: list[Trial]) -> list[Member]:
            return [Member(t.params, t.metric if t.state == "FINISHED" else None) for t in trials]

        current = members(search.run_batch(evolution.initial(), total))
        best_per_generation.append(best(current))
        for _ in range(generations - 1):
            offspring = members(search.run_batch(evolution.offspring(current), total))
            current = evolution.select(current, offspring)
            best_per_generation.append(best(current))

    return run
