"""The slot loop of a search: one thread per free place on the cluster asks a `Scheduler` for its next job the
moment its last one ended, so a slot never waits for other trials (ASHA, Hyperband, model-based search,
ablation, searches of several ranks per trial)."""

from __future__ import annotations

import functools
import logging
import posixpath
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from hopsml.errors import ClusterError, ExecutorStackError
from hopsml.launcher.driver import StageMonitor, check_barrier_stage, open_channel, run_stage
from hopsml.launcher.messages import RankReport
from hopsml.launcher.spec import TaskSpec
from hopsml.launcher.task.child import ChildRank
from hopsml.net import Network
from hopsml.progress import progress_bar
from hopsml.runs import blame
from hopsml.runs.slots import SlotTasks, carries_exactly
from hopsml.runs.trials import RecordWriter, Trial, TrialDir, TrialRun, Trials
from hopsml.search.scheduler import Job, Scheduler
from hopsml.tracking.record import State

log = logging.getLogger(__name__)


class SlotLoop(Trials):
    """A search's trials run one job per free slot, as a `Scheduler` hands them out."""

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
            check_barrier_stage(self.spark, num_workers, 0)
        slots = self.spark.concurrent_slots()
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
        self._writer = RecordWriter(self)

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
                        self.spark.cancel(group)
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
                self.spark.cancel(group)
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

    def _slot_tasks(self, places: int) -> SlotTasks:
        """The long-lived slot tasks of an asynchronous search of single-rank trials."""
        spec = TaskSpec(self.run.storage, self.run.dir.path, None, b"", local_logdir=self.local_logdir,
                        settings=self.settings, seed=self.seed, timeline=self.timeline)
        return SlotTasks(self.spark, self.fn, spec, places, group=f"{self.run.id}-slots", checks=self.checks,
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
        channel = open_channel(self.spark, monitor, Network(self.settings.network_interface, self.settings.port_range))
        spec = TaskSpec(self.run.storage, trial.dir, channel.address, channel.secret, trial=trial.index,
                        trial_name=posixpath.basename(trial.dir), local_logdir=self.local_logdir,
                        settings=self.settings, seed=self.seed, timeline=self.timeline and num_workers == 1)
        partition = self._partition(spec, kwargs, num_workers)
        what = f"rung {job.rung}, {budget}={job.budget}" if job.rung is not None else f"trial {trial.index}"
        collected: list[Any] = []
        crashed: list[RankReport] = []
        try:
            collected = run_stage(self.spark, partition, num_workers, barrier=num_workers > 1, abort=monitor.failed,
                                  job_group=group, checks=self.checks,
                                  description=f"hopsml search '{self.run.record.name}' ({self.run.id}, {what})")
        except ExecutorStackError:
            raise   # every trial would fail alike: the search stops with the explanation
        except ClusterError as exc:   # a rank's process died: this trial fails alone, the rank named
            crashed = [blame.crashed_rank(exc, TrialRun(self.run.id, TrialDir(trial.dir), self.run.storage,
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
                self._outcome(trial, by_rank[0])
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
