"""The driver's end of a search's long-lived slot tasks (launcher/task/worker.py): one Spark job whose tasks each
run trial after trial, given to them over the run's channel, so that a free slot starts its next trial
at once instead of after a Spark job's and a process's start.

The search's slot threads call `run(place, ...)`: it hands the job to that place's task and returns the
trial's report. A task that is lost (its connection ends) fails the trial it ran; Spark may start it
again, and the place takes jobs again once it is `Ready`. When the Spark job itself ends, a waiting
`run` raises the job's error.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from hopsml.cluster import auth, preflight
from hopsml.cluster.handle import SparkHandle
from hopsml.errors import ClusterError
from hopsml.launcher.channel import Connection, DriverChannel
from hopsml.launcher.driver import driver_host, run_stage
from hopsml.launcher.messages import (
    PROCESS,
    Assign,
    Finished,
    Message,
    Metric,
    RankReport,
    Ready,
    Stop,
    decode,
    pack_arguments,
    to_wire,
    unpack_arguments,
)
from hopsml.launcher.spec import TaskSpec
from hopsml.launcher.task.worker import slot_task
from hopsml.net import Network

log = logging.getLogger(__name__)

_POLL_S = 0.5
_STOP_WAIT_S = 60.0   # how long closing waits for the slot tasks to end after their Stop


def carries_exactly(kwargs: dict[str, Any]) -> bool:
    """Whether the channel's JSON gives a task these arguments unchanged (packed: tuples too; not a dict
    with keys other than strings, nor a set or an object).

    >>> carries_exactly({"lr": 0.1, "act": "relu", "shape": (3, 4)}), carries_exactly({"classes": {0: "cat"}})
    (True, False)
    """
    try:
        back = unpack_arguments(json.loads(json.dumps(pack_arguments(kwargs))))
    except (TypeError, ValueError):
        return False
    return _same(back, kwargs)


def _same(a: Any, b: Any) -> bool:
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return bool(a == b)


@dataclass
class Place:
    """One slot task as the driver sees it."""

    connection: Connection | None = None
    host: str | None = None
    trial: int | None = None   # the trial it runs now
    report: RankReport | None = None
    released: bool = False     # no more jobs for it: it was told Stop (or will be, once Ready)


class SlotTasks:
    """`places` long-lived slot tasks running `fn`, as one Spark job in the job group `group`."""

    def __init__(self, spark: SparkHandle, fn: Callable[..., Any], spec: TaskSpec, places: int, *, network: Network,
                 group: str, description: str, checks: preflight.Preflight | None = None,
                 on_metric: Callable[[Metric, Connection], None] | None = None,
                 on_message: Callable[[Message, Connection], None] | None = None) -> None:
        self.spark, self.group = spark, group
        self._places = [Place() for _ in range(places)]
        self._changed = threading.Condition()
        self._ended: BaseException | None = None
        self._done = False
        self._on_metric, self._on_other = on_metric, on_message
        self.channel = DriverChannel(driver_host(spark, network), auth.new_secret(), self._receive,
                                     network.port_range, on_close=self._closed)
        self.spec = dataclasses.replace(spec, channel_address=self.channel.address, secret=self.channel.secret)
        task = slot_task(fn, self.spec)

        def job() -> None:
            error: BaseException | None = None
            try:
                run_stage(spark, task, places, job_group=group, description=description, checks=checks)
            except BaseException as exc:  # noqa: BLE001 - handed to the slot threads that wait
                error = exc
            with self._changed:
                self._done, self._ended = True, error
                for place in self._places:   # a job still running in a task that ended: lost with it
                    self._lose(place, "its slot task ended" + (f": {error}" if error else ""))
                self._changed.notify_all()

        self._thread = threading.Thread(target=job, name=f"hopsml-slots-{group}", daemon=True)
        self._thread.start()

    # --- the channel -------------------------------------------------------------------------------
    def _receive(self, data: dict[str, Any], connection: Connection) -> None:
        message = decode(data)
        if isinstance(message, Ready):
            with self._changed:
                place = self._places[message.slot]
                if place.connection is not None and place.connection is not connection:
                    self._lose(place, f"its slot task on {place.host} was started again")   # Spark retried it
                place.connection, place.host = connection, message.host
                if place.released:
                    connection.send(to_wire(Stop()))
                self._changed.notify_all()
        elif isinstance(message, Finished):   # only a slot task's own: a trial's copy is told twice
            with self._changed:
                for place in self._places:
                    if place.connection is connection and place.trial == message.report.trial:
                        place.report, place.trial = message.report, None
                        self._changed.notify_all()
        elif isinstance(message, Metric) and self._on_metric is not None:
            self._on_metric(message, connection)
        elif message is not None and self._on_other is not None:
            self._on_other(message, connection)

    def _closed(self, connection: Connection) -> None:
        with self._changed:
            for place in self._places:
                if place.connection is connection:
                    place.connection = None
                    self._lose(place, f"its slot task on {place.host} was lost")
            self._changed.notify_all()

    def _lose(self, place: Place, why: str) -> None:
        if place.trial is not None:
            place.report = RankReport(False, rank=0, trial=place.trial, error=f"trial {place.trial}: {why}",
                                      cause=PROCESS)
            place.trial = None

    # --- the slot threads --------------------------------------------------------------------------
    def host(self, place: int) -> str | None:
        """The executor host of a place's task (once it was Ready)."""
        return self._places[place].host

    def run(self, place: int, trial: int, trial_name: str, run_dir: str, kwargs: dict[str, Any]) -> RankReport:
        """Run one job in the place's task; returns its report once it ended."""
        slot = self._places[place]
        with self._changed:
            while slot.connection is None:
                if self._done:
                    raise ClusterError(f"the slot tasks of this search ended before trial {trial_name} could run"
                                       + (f": {self._ended}" if self._ended else ""))
                self._changed.wait(_POLL_S)
            slot.trial, slot.report = trial, None
            slot.connection.send(to_wire(Assign(trial, trial_name, run_dir, pack_arguments(kwargs))))
            while slot.report is None:
                self._changed.wait(_POLL_S)
            return slot.report

    def released(self, place: int) -> bool:
        """Whether the place's task was told to stop (it takes no more jobs)."""
        return self._places[place].released

    def release(self, place: int) -> None:
        """No more jobs for this place: its task ends (and frees its slot) now."""
        with self._changed:
            slot = self._places[place]
            slot.released = True
            if slot.connection is not None:
                slot.connection.send(to_wire(Stop()))

    def close(self) -> None:
        """Tell every task to stop, wait for the Spark job to end (cancelling it after a while), close."""
        for place in range(len(self._places)):
            self.release(place)
        deadline = time.monotonic() + _STOP_WAIT_S
        while self._thread.is_alive() and time.monotonic() < deadline:
            self._thread.join(_POLL_S)
        if self._thread.is_alive():
            log.warning("the slot tasks of %s did not end within %.0f s of their stop; cancelling them",
                        self.group, _STOP_WAIT_S)
            self.spark.cancel(self.group)
            self._thread.join(30)
        self.channel.close()
