"""A search's trials and their records: each trial's folder, parameters, state and metric, the summary kept up
to date (.summary.json), TensorBoard's HParams data, the progress bar, a resumed search's adopted trials, and
the best trial at the end. The slot loop (`slot_loop.SlotLoop`) holds a `Trials` and runs its jobs; this module
knows nothing of Spark."""

from __future__ import annotations

import logging
import math
import numbers
import posixpath
import threading
from dataclasses import asdict, dataclass, field
from typing import Any

from hopsml.errors import ExperimentFailed, StorageError
from hopsml.fs import Storage
from hopsml.launcher.channel import Connection
from hopsml.launcher.messages import Metric, RankReport, Stop, to_wire
from hopsml.layout import LOGS, ExperimentDir, RunDir, join
from hopsml.progress import progress_bar
from hopsml.search.early_stopping import MedianStoppingRule
from hopsml.search.scheduler import Job
from hopsml.search.space import Direction
from hopsml.tracking import hparams as hparams_events
from hopsml.tracking.record import ExperimentRun, State

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TrialDir:
    path: str

    def worker_log(self, rank: int) -> str:
        """Where a rank of a trial of several ranks writes its log, as the ranks of an experiment do."""
        return join(self.path, LOGS, f"worker_{int(rank)}.log")


@dataclass(frozen=True)
class TrialRun:
    """A trial as the failure messages read a run (hopsml.runs.blame): its folder and storage."""

    id: str
    dir: TrialDir   # the trial folder has logs/worker_<rank>.log as an experiment has
    storage: Storage
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


class Trials:
    """The trials of one PARALLEL_EXPERIMENTS experiment and their records."""

    def __init__(self, run: ExperimentRun, *, optimization_key: str, direction: Direction,
                 early_stopping: MedianStoppingRule | None = None, metric_required: bool = True,
                 unit: str = "trial", timeline: bool = False) -> None:
        self.run = run
        self.seeded: dict[str, int] = {}
        self.key, self.direction, self.rule = optimization_key, direction, early_stopping
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
        self.budgets: list[Any] = []   # the rungs' budgets of a successive-halving search, lowest first
        self.budget_name: str | None = None   # the function's parameter that takes them
        self.adopted: list[dict[str, Any]] = []   # the trials a resumed search took over, as recorded
        self._writer: RecordWriter | None = None   # writes an asynchronous search's records off its slots' path

    def new_trial(self, params: dict[str, Any], ranks: int = 1) -> Trial:
        """A trial of `params` in a folder of its own (numbered when the same parameters come again)."""
        trial = self._new_trial(params)
        trial.ranks = ranks
        return trial

    def start(self, total: int, budgets: list[Any], budget_name: str | None) -> None:
        """Jobs are about to run: the progress bar (once), the rungs' budgets, and the writer that keeps the
        records off the slots' path."""
        if self._bar is None:
            self._bar = progress_bar(total=total, desc=f"{self.run.record.name} {self.unit}s", unit=self.unit,
                                     leave=True)
        self.budgets, self.budget_name = budgets, budget_name
        self._writer = RecordWriter(self)

    def stop(self, window_s: float) -> None:
        """The jobs have ended (`window_s`: seconds they ran, times the cluster's slots): write what is left."""
        self._window_s += window_s
        if self._writer is not None:
            self._writer.close()
            self._writer = None

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

    def _outcome(self, trial: Trial, report: RankReport) -> None:
        """A trial's state, metric and outputs from its (rank 0's) successful report: a stopped trial is
        EARLY_STOPPED with the metric it had logged, and a finished one's curve becomes a reference of the
        stopping rule. Where no metric is required (launch's executions) every result is FINISHED."""
        outputs = trial.outputs = report.result
        if not self.metric_required:
            value = outputs.get(self.key)
            finite = isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)
            trial.metric = float(value) if finite and value is not None else None
            trial.state = State.FINISHED.value
        else:
            try:
                trial.metric = self._metric_of(outputs)
                trial.state = State.EARLY_STOPPED.value if report.stopped else State.FINISHED.value
            except ValueError as exc:
                trial.state, trial.error, trial.metric = State.FAILED.value, str(exc), None
                if report.stopped:  # stopped before it logged the key: keep it as stopped
                    trial.state, trial.error = State.EARLY_STOPPED.value, None
        if trial.state == State.FINISHED.value and self.rule is not None:
            self.rule.complete(trial.index)

    def on_metric(self, message: Metric, connection: Connection) -> None:
        """A metric a trial logged: the stopping rule hears it, and may stop the trial."""
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
        self._write_summary()
        self.record_fields["resumed_from"] = {
            "experiment": source.id, "trials": len(self.adopted),
            "restarted": sum(t.get("state") in ("RUNNING", "PENDING") for t in self.adopted)}
        log.info("search %s takes up %d trials of %s", self.run.id, len(self.adopted), source.id)

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

    def record_job(self, job: Job, trial: Trial, reports: list[RankReport], failures: list[RankReport],
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
                self._outcome(trial, by_rank[0])
            if job.rung is not None:
                trial.rung, trial.budget = job.rung, job.budget
                trial.rungs.append({"rung": job.rung, "budget": job.budget, "metric": trial.metric,
                                    "duration": round(duration, 3), "promoted": job.promoted})
                if trial.state == State.FINISHED.value and job.rung < len(self.budgets) - 1:
                    # below the top rung: stopped there, unless a promotion takes it further later
                    trial.state = State.EARLY_STOPPED.value
                    trial.note = f"stopped at rung {job.rung} ({self.budget_name}={job.budget})"
            if self._writer is not None:   # off the slot's path: it starts its next job at once
                self._writer.ended(trial, dict(trial.outputs), trial.metric)
                return trial.metric
            self._write_trial(trial.dir, trial.outputs, trial.metric)
            self._write_summary()
            self._update_bar()
            return trial.metric

    def conclude_trials(self, scheduler_fields: dict[str, Any]) -> None:
        """After the last job: the strategy's record fields, each trial's HParams session, the top rung."""
        self.record_fields.update(scheduler_fields)
        top = max((t.rung for t in self.trials if t.rung is not None), default=None)
        for trial in self.trials:
            self._conclude_trial(trial, self.budget_name)
        if top is not None:
            self.record_fields["top_rung"] = top

    def summary_changed(self) -> None:
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


class RecordWriter:
    """Writes the records of an asynchronous search's jobs in a thread of its own: a slot whose job ended
    starts its next one at once, and a burst of endings costs one write of the summary."""

    def __init__(self, search: Trials) -> None:
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

