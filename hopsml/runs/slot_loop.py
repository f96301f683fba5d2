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

from hopsml.cluster import preflight
from hopsml.cluster.handle import SparkHandle
from hopsml.config import RunSettings
from hopsml.errors import ClusterError, ExecutorStackError
from hopsml.launcher.driver import StageMonitor, check_barrier_stage, open_channel, run_stage
from hopsml.launcher.messages import RankReport
from hopsml.launcher.spec import TaskSpec
from hopsml.launcher.task.child import ChildRank
from hopsml.net import Network
from hopsml.runs import blame
from hopsml.runs.slots import SlotTasks, carries_exactly
from hopsml.runs.trials import Trial, TrialDir, TrialRun, Trials
from hopsml.search.scheduler import Job, Scheduler

log = logging.getLogger(__name__)


class SlotLoop:
    """Runs the jobs a `Scheduler` hands out on the cluster's free slots, keeping what they did in `trials`."""

    def __init__(self, spark: SparkHandle, trials: Trials, fn: Callable[..., Any], settings: RunSettings, *,
                 checks: preflight.Preflight | None = None, seed: int | None = None, local_logdir: bool = False,
                 timeline: bool = False) -> None:
        self.spark, self.trials, self.fn, self.settings = spark, trials, fn, settings
        self.run = trials.run
        self.checks, self.seed, self.local_logdir, self.timeline = checks, seed, local_logdir, timeline

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
        changed = threading.Condition()
        running: dict[int, str] = {}   # slot -> job group of its running job
        stop = threading.Event()
        errors: list[BaseException] = []
        trials = self.trials
        by_key: dict[int, Trial] = {t.index: t for t in trials.trials}   # a resumed search's trials
        began = time.monotonic()

        log_order: list[dict[str, Any]] = []   # every job's start and end, in the order the driver saw them
        # single-rank trials run in long-lived slot tasks: no Spark job or process start per trial
        pool = self._slot_tasks(places) if num_workers == 1 else None
        trials.start(total, list(scheduler.budgets), budget)

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
                            trial = by_key[job.key] = trials.new_trial(job.params, num_workers)
                        trial.state, trial.note = "RUNNING", None
                        running[place] = pool.group if pool is not None else \
                            f"{self.run.id}-trial-{trial.index}-{len(trial.rungs)}"
                        log_order.append({"slot": place, "event": "start", "trial": trial.index, "rung": job.rung,
                                          "t": round(time.monotonic() - began, 3)})
                        trials.summary_changed()   # a driver killed now leaves it RUNNING: resume= runs it again
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
            if pool is not None:
                pool.close()
            trials.stop(slots * (time.monotonic() - began))
        if errors:
            raise errors[0]
        trials.conclude_trials({**scheduler.describe(), "parallel_trials": places, "num_workers": num_workers,
                                "jobs": log_order})

    def _slot_tasks(self, places: int) -> SlotTasks:
        """The long-lived slot tasks of an asynchronous search of single-rank trials."""
        spec = TaskSpec(self.run.storage, self.run.dir.path, None, b"", local_logdir=self.local_logdir,
                        settings=self.settings, seed=self.seed, timeline=self.timeline)
        return SlotTasks(self.spark, self.fn, spec, places, group=f"{self.run.id}-slots", checks=self.checks,
                         network=Network(self.settings.network_interface, self.settings.port_range),
                         description=f"hopsml search '{self.run.record.name}' ({self.run.id}, {places} slot tasks)",
                         on_metric=self.trials.on_metric)

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
            return self.trials.record_job(job, trial, [report], [] if report.ok else [report], 1)
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
        return self.trials.record_job(job, trial, reports, failures, num_workers)

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
