"""The batch path of a search: a list of trials as one Spark stage, as many at once as the cluster has slots,
each in a child process; returns when all have ended (grid, random and evolution searches, launch's list form)."""

from __future__ import annotations

import logging
import posixpath
import time
from collections.abc import Iterator
from typing import Any

from hopsml.launcher.driver import StageMonitor, open_channel, run_stage
from hopsml.launcher.spec import TaskSpec
from hopsml.launcher.task.child import ChildRank
from hopsml.net import Network
from hopsml.progress import progress_bar
from hopsml.runs.trials import Trial, Trials

log = logging.getLogger(__name__)


class Batches(Trials):
    """A search's batches of trials, each one Spark stage."""

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
        channel = open_channel(self.spark, monitor, Network(self.settings.network_interface, self.settings.port_range))
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
        slots, began = self.spark.concurrent_slots(), time.monotonic()
        try:
            collected = run_stage(self.spark, one_trial, len(batch), job_group=self.run.id, checks=self.checks,
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
