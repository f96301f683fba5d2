"""The engine of a search, on the driver: trials as parallel Spark tasks, each in its own folder of the experiment,
with live progress, early stopping over the authenticated channel, and a summary kept up to date.

Each trial's function runs in a process of its own (launcher/task/child.py; for the asynchronous searches a
slot task's worker process, launcher/task/slot.py): a trial that ends its process (os._exit, a segfault, an
out-of-memory kill) is recorded FAILED with its exit cause and the search goes on; the other trials and
the shared Python workers are not affected."""

from __future__ import annotations

import functools
import json
import logging
import math
import numbers
import posixpath
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

from hopsml import config
from hopsml.cluster import preflight
from hopsml.config import RunSettings
from hopsml.errors import ClusterError, ExecutorStackError, ExperimentFailed, HopsmlError, StorageError
from hopsml.fs import Storage
from hopsml.launcher.channel import Connection
from hopsml.launcher.driver import StageMonitor, check_barrier_stage, concurrent_slots, open_channel, run_stage
from hopsml.launcher.messages import Metric, RankReport, Stop, to_wire
from hopsml.launcher.spec import TaskSpec
from hopsml.launcher.task.child import ChildRank
from hopsml.layout import LOGS, ExperimentDir, RunDir, join
from hopsml.net import Network
from hopsml.progress import progress_bar
from hopsml.runs import blame
from hopsml.runs.request import SearchRequest
from hopsml.runs.slots import SlotTasks, carries_exactly
from hopsml.runs.start import Start, check_function, ship
from hopsml.search.early_stopping import MedianStoppingRule
from hopsml.search.evolution import DifferentialEvolution, Member
from hopsml.search.scheduler import Job, Scheduler
from hopsml.search.space import Direction, SearchSpaceError
from hopsml.tracking import hparams as hparams_events
from hopsml.tracking.record import ExperimentRun, ExperimentType, State

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class _TrialDir:
    path: str

    def worker_log(self, rank: int) -> str:
        """Where a rank of a trial of several ranks writes its log, as the ranks of an experiment do."""
        return join(self.path, LOGS, f"worker_{int(rank)}.log")


@dataclass(frozen=True)
class _TrialRun:
    """A trial as the failure messages read a run (hopsml.runs.blame): its folder and storage."""

    id: str
    dir: Any   # a _TrialDir: the trial folder has logs/worker_<rank>.log as an experiment has
    storage: Any
    logdir: str


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
    # successive halving: the rung reached, its budget, one entry per rung run, and why it stopped
    rung: int | None = None
    budget: float | None = None
    rungs: list[dict[str, Any]] = field(default_factory=list)
    note: str | None = None
    ranks: int = 1  # ranks per trial (num_workers of a distributed search)
    # where and when each of its jobs ran: {"slot", "host", "start", "end"} (wall clock, seconds)
    placements: list[dict[str, Any]] = field(default_factory=list)
    timeline: str | None = None   # its merged timeline (trace.json), root-relative, when the search records them

    def summary(self) -> dict[str, Any]:
        data = asdict(self)
        for name in ("rung", "budget", "rungs", "note", "placements", "timeline"):   # only some searches have them
            if data[name] is None or data[name] == []:
                data.pop(name)
        if self.ranks == 1:
            data.pop("ranks")
        return data


class Search:
    """Runs batches of trials for one PARALLEL_EXPERIMENTS experiment."""

    def __init__(self, sc: Any, run: ExperimentRun, fn: Callable[..., Any], settings: RunSettings, *,
                 optimization_key: str, checks: preflight.Preflight | None = None, seed: int | None = None,
                 direction: Direction, early_stopping: MedianStoppingRule | None = None,
                 local_logdir: bool = False, metric_required: bool = True, unit: str = "trial",
                 timeline: bool = False) -> None:
        self.sc, self.run, self.fn, self.settings, self.checks, self.seed = sc, run, fn, settings, checks, seed
        self.seeded: dict[str, int] = {}
        self.key, self.direction, self.rule = optimization_key, direction, early_stopping
        self.local_logdir = local_logdir
        self.timeline = timeline   # each trial's function records its timeline (spans, system samples)
        self.metric_required = metric_required  # launch's executions may return no metric at all
        self.unit = unit
        self.trials: list[Trial] = []
        self._lock = threading.Lock()
        self._names: set[str] = set()
        self._bar: Any = None
        self.record_fields: dict[str, Any] = {}   # what a strategy adds to the record (rungs, sampler, ...)
        self._busy_s = 0.0      # slot-seconds the trials' functions ran (times their ranks)
        self._window_s = 0.0    # seconds trials were running, times the slots the cluster had
        self._budgets: list[Any] = []   # the rungs' budgets of a successive-halving search
        self._budget_name: str | None = None
        self.adopted: list[dict[str, Any]] = []   # the trials a resumed search took over, as recorded
        self._unclaimed: list[Trial] = []   # adopted trials a batch has not taken up yet
        self._writer: _RecordWriter | None = None   # writes an asynchronous search's records off its slots' path

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
            self._busy_s += report.duration or 0.0
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
            self._merge_timeline(trial)
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
    def _take_up(self, params: dict[str, Any]) -> Trial | None:
        """The adopted trial of these parameters (resume=), once: it ended (kept) or runs again in its folder."""
        wanted = _as_recorded(params)
        for trial in self._unclaimed:
            if _as_recorded(trial.params) == wanted:
                self._unclaimed.remove(trial)
                trial.params = params
                return trial
        return None

    def run_batch(self, params_list: list[dict[str, Any]], total: int) -> list[Trial]:
        """Run trials in parallel (as many at once as the cluster has slots); returns them when all end.
        A resumed search keeps the trials of these parameters that ended and runs the others again."""
        batch = [self._take_up(p) or self._new_trial(p) for p in params_list]
        kept = [t for t in batch if t.state not in ("PENDING", "RUNNING")]
        whole, batch = batch, [t for t in batch if t not in kept]
        if self._bar is None:
            self._bar = progress_bar(total=total, desc=f"{self.run.record.name} {self.unit}s", unit=self.unit,
                                     leave=True)
        if not batch:
            return whole
        monitor = StageMonitor(echo=False, on_metric=self._on_metric, on_finished=self._finish)
        channel = open_channel(self.sc, monitor, Network(self.settings.network_interface, self.settings.port_range))
        storage, fn = self.run.storage, self.fn
        specs = [(t.params, TaskSpec(storage, t.dir, channel.address, channel.secret, trial=t.index,
                                     trial_name=posixpath.basename(t.dir), local_logdir=self.local_logdir,
                                     settings=self.settings, seed=self.seed, timeline=self.timeline))
                 for t in batch]

        def one_trial(partition: Iterator[int]) -> Iterator[dict[str, Any]]:
            import socket

            for i in partition:
                params, spec = specs[i]
                began = time.time()
                child = ChildRank(fn, spec, kwargs=params, rank=0, world_size=1, write_metrics=True,
                                  native_output=True)
                report = child.wait()
                # where and when it ran (the task's slot is not named: the web view packs them into lanes)
                report["placement"] = {"host": socket.gethostname(), "start": round(began, 3),
                                       "end": round(time.time(), 3)}
                yield report

        for trial in batch:
            trial.state = "RUNNING"
        with self._lock:   # a driver killed now leaves them RUNNING: resume= runs them again
            self._write_summary()
        slots, began = concurrent_slots(self.sc), time.monotonic()
        try:
            collected = run_stage(self.sc, one_trial, len(batch), job_group=self.run.id, checks=self.checks,
                                  description=f"hopsml search '{self.run.record.name}' ({self.run.id})")
        finally:
            channel.close()
        monitor.settle(collected)  # the trials whose live message did not reach us
        self._window_s += slots * (time.monotonic() - began)
        with self._lock:
            for data in collected:
                if isinstance(data.get("trial"), int) and isinstance(data.get("placement"), dict):
                    self.trials[data["trial"]].placements.append(data["placement"])
            self._write_summary()
        return whole

    def adopt(self, source: ExperimentDir) -> None:
        """Take over the trials of an earlier run of this search (resume=): each folder is copied into this
        run with its record, curve and checkpoints; its trials keep their numbers. `adopted` lists them as
        the summary had them, for the scheduler to take up."""
        old = self.run.storage.read_json(source.summary)["trials"]
        for entry in sorted(old, key=lambda t: t["index"]):
            name = posixpath.basename(entry["dir"])
            path = join(self.run.dir.path, name)
            if self.run.storage.isdir(entry["dir"]):
                self.run.storage.copy_tree(entry["dir"], path)
            self._names.add(path)
            unfinished = entry.get("state") in ("RUNNING", "PENDING")
            trial = Trial(len(self.trials), dict(entry["params"]), path,
                          state="PENDING" if unfinished else entry["state"], metric=entry.get("metric"),
                          outputs=entry.get("outputs") or {}, error=entry.get("error"),
                          traceback=entry.get("traceback"), duration=entry.get("duration"), rung=entry.get("rung"),
                          budget=entry.get("budget"), rungs=list(entry.get("rungs") or []), note=entry.get("note"),
                          ranks=int(entry.get("ranks") or 1), placements=list(entry.get("placements") or []),
                          timeline=entry.get("timeline"))
            self.trials.append(trial)
            self.adopted.append(entry)
            self._unclaimed.append(trial)
        self._write_summary()
        self.record_fields["resumed_from"] = {
            "experiment": source.id, "trials": len(self.adopted),
            "restarted": sum(t.get("state") in ("RUNNING", "PENDING") for t in self.adopted)}
        log.info("search %s takes up %d trials of %s", self.run.id, len(self.adopted), source.id)

    # --- asynchronous searches ---------------------------------------------------------------------
    def run_async(self, scheduler: Scheduler, *, total: int, num_workers: int = 1, budget: str | None = None,
                  max_parallel: int | None = None) -> None:
        """Run the scheduler's jobs from one thread per free place on the cluster: a thread whose job ends
        asks the scheduler for the next at once, so a slot never waits for other trials. Jobs of one rank
        go to the place's long-lived slot task (runs/slots.py: one Spark job for the whole search); with
        `num_workers` > 1 each job is a barrier stage of that many ranks (Spark runs the jobs of several
        threads at once), and the places are the cluster's slots divided by it.

        `scheduler` hands out the jobs (None: nothing to start now) and learns each job's metric.
        """
        if num_workers > 1:   # no dynamic allocation, enough slots for one trial's ranks
            check_barrier_stage(self.sc, num_workers, 0)
        slots = concurrent_slots(self.sc)
        places = max(1, slots // num_workers)
        if max_parallel is not None:
            places = max(1, min(places, max_parallel))
        if self._bar is None:
            self._bar = progress_bar(total=total, desc=f"{self.run.record.name} {self.unit}s", unit=self.unit,
                                     leave=True)
        self._budgets, self._budget_name = list(scheduler.budgets), budget
        changed = threading.Condition()
        running: dict[int, str] = {}   # slot -> job group of its running job
        stop = threading.Event()
        errors: list[BaseException] = []
        by_key: dict[int, Trial] = {t.index: t for t in self.trials}   # a resumed search's trials
        began = time.monotonic()

        log_order: list[dict[str, Any]] = []   # every job's start and end, in the order the driver saw them
        # single-rank trials run in long-lived slot tasks: no Spark job or process start per trial
        pool = self._slot_tasks(places) if num_workers == 1 else None
        self._writer = _RecordWriter(self)

        def next_job(place: int, ended: tuple[Job, float | None] | None) -> tuple[Job, Trial] | None:
            """Under one lock: tell the scheduler how the slot's job ended, then pick its next job at once
            (no other slot's news comes in between), or wait while nothing can be started."""
            with changed:
                if ended is not None:
                    done, metric = ended
                    running.pop(place, None)
                    scheduler.job_done(done, metric)
                    log_order.append({"slot": place, "event": "end", "trial": by_key[done.key].index,
                                      "rung": done.rung, "t": round(time.monotonic() - began, 3)})
                    changed.notify_all()
                while not stop.is_set():
                    job = scheduler.next_job()
                    if job is not None:
                        trial = by_key.get(job.key)
                        if trial is None:
                            trial = by_key[job.key] = self._new_trial(job.params)
                            trial.ranks = num_workers
                        trial.state, trial.note = "RUNNING", None
                        running[place] = pool.group if pool is not None else \
                            f"{self.run.id}-trial-{trial.index}-{len(trial.rungs)}"
                        log_order.append({"slot": place, "event": "start", "trial": trial.index, "rung": job.rung,
                                          "t": round(time.monotonic() - began, 3)})
                        self._summary_changed()   # a driver killed now leaves it RUNNING: resume= runs it again
                        return job, trial
                    if not running:
                        break   # nothing runs that could make new work
                    changed.wait()
                changed.notify_all()
                return None

        def slot(place: int) -> None:
            ended: tuple[Job, float | None] | None = None
            while (found := next_job(place, ended)) is not None:
                job, trial = found
                metric = None
                try:
                    metric = self._run_job(job, trial, num_workers, budget, running[place], pool, place)
                except BaseException as exc:  # noqa: BLE001 - ends the search, raised in the caller's thread
                    errors.append(exc)
                    stop.set()
                    with changed:   # the other slots' trials stop too
                        groups = [g for p, g in running.items() if p != place]
                    for group in groups:
                        self.sc.cancelJobGroup(group)
                ended = (job, metric)
            if pool is not None:   # nothing more for this slot: its task ends and frees the slot
                pool.release(place)

        threads = [threading.Thread(target=slot, args=(p,), name=f"hopsml-search-slot-{p}", daemon=True)
                   for p in range(places)]
        for thread in threads:
            thread.start()
        try:
            for thread in threads:
                while thread.is_alive():
                    thread.join(0.1)
        except KeyboardInterrupt:
            stop.set()
            with changed:
                groups = list(running.values())
                changed.notify_all()
            for group in groups:
                self.sc.cancelJobGroup(group)
            raise
        finally:
            self._window_s += slots * (time.monotonic() - began)
            if pool is not None:
                pool.close()
            self._writer.close()
            self._writer = None
        if errors:
            raise errors[0]
        self.record_fields.update(scheduler.describe(), parallel_trials=places, num_workers=num_workers,
                                  jobs=log_order)
        top = max((t.rung for t in self.trials if t.rung is not None), default=None)
        for trial in self.trials:
            self._conclude_trial(trial, budget)
        if top is not None:
            self.record_fields["top_rung"] = top

    def ablation_table(self) -> list[dict[str, Any]]:
        """An ablation study's trials beside its base (the first trial): what each left out, its metric and
        the difference to the base's."""
        base = self.trials[0].metric if self.trials else None
        rows = []
        for trial in self.trials:
            feature, layer = trial.params.get("ablated_feature"), trial.params.get("ablated_layer")
            left_out = f"feature {feature}" if feature else f"layer {layer}" if layer else "nothing (base)"
            delta = trial.metric - base if trial.metric is not None and base is not None else None
            rows.append({"trial": trial.index, "left_out": left_out, "state": trial.state, "metric": trial.metric,
                         "change": round(delta, 6) if delta is not None else None})
        return rows

    def _slot_tasks(self, places: int) -> SlotTasks:
        """The long-lived slot tasks of an asynchronous search of single-rank trials."""
        spec = TaskSpec(self.run.storage, self.run.dir.path, None, b"", local_logdir=self.local_logdir,
                        settings=self.settings, seed=self.seed, timeline=self.timeline)
        return SlotTasks(self.sc, self.fn, spec, places, group=f"{self.run.id}-slots", checks=self.checks,
                         network=Network(self.settings.network_interface, self.settings.port_range),
                         description=f"hopsml search '{self.run.record.name}' ({self.run.id}, {places} slot tasks)",
                         on_metric=self._on_metric)

    def _run_job(self, job: Job, trial: Trial, num_workers: int, budget: str | None, group: str,
                 pool: SlotTasks | None = None, place: int = 0) -> float | None:
        """One job of an asynchronous search in the trial's folder (a promoted trial continues there, so
        its checkpoints and its curve carry on); returns its metric, None when it failed. A job of one
        rank runs in a slot task of `pool` while the channel's JSON carries the arguments unchanged (else
        the place's task ends, and its jobs from then on are Spark jobs of their own)."""
        kwargs = dict(job.params)
        if budget is not None:
            kwargs[budget] = job.budget
        start = time.time()
        if pool is not None and not pool.released(place) and not carries_exactly(kwargs):
            pool.release(place)   # its task gives its slot to this job and the place's later ones
        if pool is not None and not pool.released(place):
            report = pool.run(place, trial.index, posixpath.basename(trial.dir), trial.dir, kwargs)
            trial.placements.append({"slot": place, "host": pool.host(place), "start": round(start, 3),
                                     "end": round(time.time(), 3)})
            return self._record_job(job, trial, [report], [] if report.ok else [report], 1)
        monitor = StageMonitor(echo=False, prefix_ranks=num_workers > 1, abort_on_failure=num_workers > 1)
        channel = open_channel(self.sc, monitor, Network(self.settings.network_interface, self.settings.port_range))
        spec = TaskSpec(self.run.storage, trial.dir, channel.address, channel.secret, trial=trial.index,
                        trial_name=posixpath.basename(trial.dir), local_logdir=self.local_logdir,
                        settings=self.settings, seed=self.seed, timeline=self.timeline and num_workers == 1)
        partition = self._partition(spec, kwargs, num_workers)
        what = f"rung {job.rung}, {budget}={job.budget}" if job.rung is not None else f"trial {trial.index}"
        collected: list[Any] = []
        crashed: list[RankReport] = []
        try:
            collected = run_stage(self.sc, partition, num_workers, barrier=num_workers > 1, abort=monitor.failed,
                                  job_group=group, checks=self.checks,
                                  description=f"hopsml search '{self.run.record.name}' ({self.run.id}, {what})")
        except ExecutorStackError:
            raise   # every trial would fail alike: the search stops with the explanation
        except ClusterError as exc:   # a rank's process died: this trial fails alone, the rank named
            crashed = [blame.crashed_rank(exc, _TrialRun(self.run.id, _TrialDir(trial.dir), self.run.storage,
                                                         self.run.storage.uri(trial.dir)))]
        finally:
            channel.close()
        reports = monitor.settle(collected)
        failures = sorted(monitor.failures() + crashed, key=blame.first_cause)   # the cause first, not its peers
        trial.placements.append({"slot": place, "host": None, "slots": num_workers, "start": round(start, 3),
                                 "end": round(time.time(), 3)})
        return self._record_job(job, trial, reports, failures, num_workers)

    def _partition(self, spec: TaskSpec, kwargs: dict[str, Any], num_workers: int
                   ) -> Callable[[Iterator[int]], Iterator[dict[str, Any]]]:
        fn = self.fn
        if num_workers == 1:
            def one_trial(partition: Iterator[int]) -> Iterator[dict[str, Any]]:
                for _ in partition:
                    yield ChildRank(fn, spec, kwargs=kwargs, rank=0, world_size=1, write_metrics=True,
                                    native_output=True).wait()
            return one_trial
        from hopsml.collective.options import CollectiveOptions
        from hopsml.launcher.task.rank import CollectiveRank, barrier_task
        from hopsml.torch.process_group import end_rank_group

        framework = functools.partial(CollectiveRank, functools.partial(fn, **kwargs),
                                      CollectiveOptions.from_settings(self.settings, None), False, self.timeline)
        return barrier_task(spec, gpus_per_worker=0, framework=framework, on_shutdown=(end_rank_group,))

    def _record_job(self, job: Job, trial: Trial, reports: list[RankReport], failures: list[RankReport],
                    num_workers: int) -> float | None:
        """Keep what a job did in its trial: the metric of its rung, or which rank failed and why."""
        by_rank = {r.rank or 0: r for r in reports if r.ok}
        duration = max((r.duration or 0.0 for r in reports), default=0.0)
        with self._lock:
            self.seeded = self.seeded or next((dict(r.seeded) for r in reports if r.seeded), {})
            self._busy_s += duration * num_workers
            trial.duration = round((trial.duration or 0.0) + duration, 3)
            trial.outputs, trial.error, trial.traceback = {}, None, None
            if failures or 0 not in by_rank or len(reports) < num_workers:
                first = failures[0] if failures else None
                if first is not None:
                    ranked = num_workers > 1 and first.rank is not None
                    where = f"rank {first.rank} of {num_workers}: " if ranked else ""
                    trial.error = where + (first.error or "it failed without a message")
                    trial.traceback = first.traceback or first.tail
                else:
                    trial.error = f"only {len(reports)} of {num_workers} ranks reported"
                trial.state, trial.metric = State.FAILED.value, None
            else:
                trial.outputs = by_rank[0].result
                try:
                    trial.metric = self._metric_of(trial.outputs)
                    trial.state = State.FINISHED.value
                except ValueError as exc:
                    trial.state, trial.error, trial.metric = State.FAILED.value, str(exc), None
            if job.rung is not None:
                trial.rung, trial.budget = job.rung, job.budget
                trial.rungs.append({"rung": job.rung, "budget": job.budget, "metric": trial.metric,
                                    "duration": round(duration, 3), "promoted": job.promoted})
                if trial.state == State.FINISHED.value and job.rung < len(self._budgets) - 1:
                    # below the top rung: stopped there, unless a promotion takes it further later
                    trial.state = State.EARLY_STOPPED.value
                    trial.note = f"stopped at rung {job.rung} ({self._budget_name}={job.budget})"
            if self._writer is not None:   # off the slot's path: it starts its next job at once
                self._writer.ended(trial, dict(trial.outputs), trial.metric)
                return trial.metric
            self._write_trial(trial.dir, trial.outputs, trial.metric)
            self._write_summary()
            self._update_bar()
            return trial.metric

    def _write_trial(self, path: str, outputs: dict[str, Any], metric: float | None) -> None:
        storage, trial_dir = self.run.storage, RunDir(path)
        storage.write_json(trial_dir.outputs, outputs)
        if metric is not None:
            storage.write_text(trial_dir.metric, repr(metric))

    def _merge_timeline(self, trial: Trial) -> None:
        """Merge the parts of a trial's timeline (one per job it ran) into its trace.json."""
        if not self.timeline:
            return
        from hopsml.timeline import merge

        try:
            trial.timeline = merge.merge(self.run.storage, RunDir(trial.dir), {"trial": trial.index})
        except merge.TimelineError:
            pass   # its function never ran (its process died first): no part to merge
        except Exception as exc:  # noqa: BLE001 - the trial's result matters more than its timeline
            log.warning("the timeline of trial %s could not be merged: %s", trial.dir, exc)

    def _summary_changed(self) -> None:
        """The summary is to be written again: now, or by the writer of an asynchronous search."""
        if self._writer is not None:
            self._writer.summary()
        else:
            with self._lock:
                self._write_summary()

    def _conclude_trial(self, trial: Trial, budget: str | None) -> None:
        """Write a trial's HParams session once the search is over (its rungs ran in several jobs)."""
        params = dict(trial.params)
        if budget is not None and trial.budget is not None:
            params[budget] = trial.budget
        try:   # TensorBoard's HParams tab: once per trial, with the budget it reached
            hparams_events.write_trial(self.run.storage, RunDir(trial.dir).tensorboard, params, self.key,
                                       trial.metric, trial.state, trial.duration)
        except (OSError, StorageError) as exc:
            log.warning("could not write the HParams data of trial %s: %s", trial.dir, exc)
        self._write_summary()

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
        record_fields = {**self.record_fields, **record_fields}
        record_fields.setdefault("timeline", {"enabled": self.timeline, "per": "trial"})
        if self._window_s > 0:   # busy slot-seconds over available ones, while trials ran
            record_fields.setdefault("slot_utilisation", round(self._busy_s / self._window_s, 4))
        self.run.finish(metric=best.metric, results=best.outputs, best_hyperparameters=best.params,
                        best_logdir=self.run.storage.uri(best.dir), trials=counts, seeds=self.seeded,
                        **record_fields)
        return best


class _RecordWriter:
    """Writes the records of an asynchronous search's jobs in a thread of its own: a slot whose job ended
    starts its next one at once, and a burst of endings costs one write of the summary."""

    def __init__(self, search: Search) -> None:
        self.search = search
        self._ended: list[tuple[Trial, dict[str, Any], float | None]] = []
        self._summary_due = False
        self._closed = False
        self._changed = threading.Condition()
        self._thread = threading.Thread(target=self._loop, name="hopsml-search-records", daemon=True)
        self._thread.start()

    def ended(self, trial: Trial, outputs: dict[str, Any], metric: float | None) -> None:
        with self._changed:
            self._ended.append((trial, outputs, metric))
            self._summary_due = True
            self._changed.notify()

    def summary(self) -> None:
        with self._changed:
            self._summary_due = True
            self._changed.notify()

    def _loop(self) -> None:
        while True:
            with self._changed:
                while not (self._ended or self._summary_due or self._closed):
                    self._changed.wait()
                ended, due, closed = self._ended, self._summary_due, self._closed
                self._ended, self._summary_due = [], False
            try:
                for trial, outputs, metric in ended:
                    self.search._write_trial(trial.dir, outputs, metric)
                    self.search._merge_timeline(trial)
                if due:
                    with self.search._lock:
                        data = {"trials": [t.summary() for t in self.search.trials]}
                    self.search.run.storage.write_json(self.search.run.dir.summary, data)
                    self.search._update_bar()
            except (OSError, StorageError) as exc:
                log.warning("could not write the records of search %s: %s", self.search.run.id, exc)
            if closed and not ended and not due:
                return

    def close(self, timeout_s: float = 60.0) -> None:
        """Write what is left and end the thread."""
        with self._changed:
            self._closed = True
            self._changed.notify()
        self._thread.join(timeout_s)


def _as_recorded(params: dict[str, Any]) -> Any:
    """Parameters as the summary records them (JSON), to find a trial of an earlier run by them."""
    return json.loads(json.dumps(params, default=str))


def run_search(request: SearchRequest, batches: Callable[[Search], Any]) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """What every search verb shares: checks, the experiment record, the trials (`batches` runs them on the
    Search, in batches or through a Scheduler), the best result."""
    asked = request.run
    check_function(asked.train_fn, None, asked.name, asked.versioned_resources)
    ship(asked.train_fn)
    start = Start.of(config.load(), asked.train_fn, asked.seed)
    sc = start.spark()
    run = start.start_run(sc, asked, type=ExperimentType.PARALLEL_EXPERIMENTS.value, hyperparameters=request.space,
                          direction=request.direction.value, optimization_key=request.optimization_key,
                          metric_key=request.optimization_key, executors=sc.defaultParallelism)
    log.info("search %s started: %s", run.id, run.logdir)
    with run:
        search = Search(sc, run, asked.train_fn, start.snapshot, checks=start.checks, seed=start.seed,
                        optimization_key=request.optimization_key, direction=request.direction,
                        early_stopping=request.stopping_rule(), local_logdir=bool(asked.local_logdir),
                        timeline=bool(asked.timeline))
        if request.resume is not None:
            search.adopt(request.resume)
        batches(search)
        best = search.conclude(strategy=request.strategy, **request.record_fields)
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


def previous_search(exp_id: str, strategy: str, space_description: dict[str, Any]) -> tuple[ExperimentDir, int]:
    """The search `resume=` names and its seed, checked before anything starts: the same strategy over the
    same space, with a summary of its trials."""
    settings = config.load()
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


def recorded(source: ExperimentDir, key: str) -> Any:
    """One field of a search's experiment record (None when it has none): what a resumed search keeps."""
    return Storage(config.load().root).read_json(source.record).get(key)
