"""Driver side: run a stage of tasks as one Spark job group, stream their output live, and stop
everything promptly on Ctrl-C or when a task reports a failure."""

from __future__ import annotations

import logging
import sys
import threading
import time
import types
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from hopsml.cluster import auth, preflight
from hopsml.cluster.handle import SparkHandle
from hopsml.devices import check_gpu_amount
from hopsml.errors import ClusterError, SerializationError
from hopsml.launcher.channel import Connection, DriverChannel
from hopsml.launcher.messages import (
    Clock,
    Failing,
    Finished,
    Join,
    Message,
    Metric,
    Output,
    Peers,
    RankReport,
    Timing,
    decode,
    to_wire,
)
from hopsml.net import Network
from hopsml.timeline.watch import RunWatch
from hopsml.tracking.versioning import installed_file

log = logging.getLogger(__name__)


# How long a stage's cancellation waits for a failing rank that is still copying its files.
UPLOAD_GRACE_S = 30.0


class Rendezvous:
    """The meeting point of a barrier stage's ranks: each rank's `Join` is held until every rank has joined, then
    each is answered with everyone's (`Peers`). It replaces Spark's `allGather`, which took a second (a 2-task
    barrier stage ran in 1.13 s with one, 0.08 s without); this is a round trip. A retried stage's ranks join
    again: a rank's later join replaces its earlier one (whose task Spark has ended)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._waiting: dict[int, tuple[Join, Connection]] = {}

    def join(self, join: Join, connection: Connection) -> None:
        with self._lock:
            self._waiting[join.rank] = (join, connection)
            if set(self._waiting) != set(range(join.world_size)):
                return
            waiting, self._waiting = self._waiting, {}
        answer = to_wire(Peers([waiting[rank][0].info for rank in range(join.world_size)]))
        for _, peer in waiting.values():
            peer.send(answer)


@dataclass
class StageMonitor:
    """Watches one stage through the channel: prints its output, keeps each task's report once (the one
    its channel brought, else the one Spark collected), learns of a failure at once (and then cancels the
    stage, when asked, once the failing rank's files are copied), and notices ranks that never return."""

    prefix_ranks: bool = False
    abort_on_failure: bool = False
    echo: bool = True
    on_metric: Callable[[Metric, Connection], None] | None = None
    on_finished: Callable[[RankReport], None] | None = None
    failed: threading.Event = field(default_factory=threading.Event)
    finished: list[RankReport] = field(default_factory=list)
    late: list[int] = field(default_factory=list)  # ranks still running when the watchdog gave up on them
    failing: list[RankReport] = field(default_factory=list)  # failures told before the final upload
    upload_grace_s: float = UPLOAD_GRACE_S
    timeline: RunWatch = field(default_factory=RunWatch)  # the ranks' timeline batches: stragglers, system peaks
    rendezvous: Rendezvous = field(default_factory=Rendezvous)  # where a barrier stage's ranks meet

    def __post_init__(self) -> None:
        if self.timeline.announce is None and self.echo:
            self.timeline.stragglers.announce = _announce


    def __call__(self, data: dict[str, Any], connection: Connection | None) -> None:
        """The channel's callback: decode the message once, then act on its type."""
        message = decode(data)
        if message is not None:
            self.receive(message, connection)

    def receive(self, message: Message, connection: Connection | None) -> None:
        if isinstance(message, Output):
            if self.echo:
                prefix = f"[rank {message.rank}] " if self.prefix_ranks and message.rank is not None else ""
                sys.stdout.write(f"{prefix}{message.line}\n")
        elif isinstance(message, Failing):
            self.failing.append(message.report)
        elif isinstance(message, Finished):
            report = message.report
            if _key(report) in {_key(r) for r in list(self.finished)}:
                return  # told twice (the child and its parent): once is enough
            self.finished.append(report)
            if self.on_finished is not None:
                self.on_finished(report)
            if self.abort_on_failure and not report.ok:
                self._abort_after_uploads()
        elif isinstance(message, Metric) and self.on_metric is not None and connection is not None:
            self.on_metric(message, connection)
        elif isinstance(message, Clock) and connection is not None:
            connection.send(to_wire(Clock(message.rank, message.t0, time.time_ns())))
        elif isinstance(message, Timing):
            self.timeline.add(message.rank, message.size, message.ops, message.system)
        elif isinstance(message, Join) and connection is not None:
            self.rendezvous.join(message, connection)

    def settle(self, collected: Iterable[dict[str, Any]]) -> list[RankReport]:
        """Every task's report once: those the channel brought, then those only Spark's collect() has
        (a task that could not reach the driver); the latter are passed to `on_finished` too."""
        seen = {_key(r) for r in self.finished}
        for data in collected:
            report = RankReport.from_wire(data)
            if _key(report) not in seen:
                seen.add(_key(report))
                self.finished.append(report)
                if self.on_finished is not None:
                    self.on_finished(report)
        return list(self.finished)

    def failures(self) -> list[RankReport]:
        """Every failure report: the finished ones, and those of ranks that failed but never finished."""
        return [r for r in self.finished if not r.ok] + self._unfinished_failing()

    def _unfinished_failing(self) -> list[RankReport]:
        """The failing reports of ranks that have not finished (still copying their files, or killed)."""
        done = {_key(r) for r in self.finished}
        return [r for r in self.failing if _key(r) not in done]

    def _abort_after_uploads(self) -> None:
        """Set `failed` (which cancels the stage), but first let a failing rank finish copying its logs
        to the run directory, up to `upload_grace_s`: cancelling would kill it mid-copy."""
        if not self._unfinished_failing():
            self.failed.set()
            return

        def wait() -> None:
            deadline = time.monotonic() + self.upload_grace_s
            while self._unfinished_failing() and time.monotonic() < deadline and not self.failed.is_set():
                time.sleep(0.05)
            self.failed.set()

        threading.Thread(target=wait, name="hopsml-abort-after-uploads", daemon=True).start()

    def watch_for_late_ranks(self, ranks: int, late_after_s: float) -> threading.Event:
        """Once one rank has returned, give the others `late_after_s` to follow, else record them in
        `late` and set `failed` (a rank hung after its peers returned would block the driver forever).
        Returns the event that stops the watch."""
        stop = threading.Event()

        def watch() -> None:
            first_return = None
            while not stop.wait(0.5) and not self.failed.is_set():
                done = {r.rank for r in list(self.finished)}
                if len(done) >= ranks:
                    return
                if done and first_return is None:
                    first_return = time.monotonic()
                if first_return is not None and time.monotonic() - first_return > late_after_s:
                    self.late[:] = sorted(set(range(ranks)) - done)
                    self.failed.set()

        threading.Thread(target=watch, name="hopsml-late-ranks", daemon=True).start()
        return stop


def _announce(text: str) -> None:
    """A finding about the running stage, in the notebook's (or console's) output."""
    sys.stdout.write(f"hopsml: {text}\n")


def ship_by_value(fn: Callable[..., Any]) -> None:
    """Make Spark send the code of `fn`'s module along with it when executors cannot import it.

    Functions from a user's own module (a test file, a helper next to the notebook) are pickled by
    reference, and executors that lack the module fail with ModuleNotFoundError; installed
    packages and hopsml itself are importable everywhere and stay by reference.
    """
    module = sys.modules.get(getattr(fn, "__module__", None) or "")
    if module is None or module.__name__ == "__main__" or module.__name__.split(".")[0] == "hopsml":
        return
    source = getattr(module, "__file__", None)
    if not source or installed_file(source):
        return
    from pyspark import cloudpickle

    cloudpickle.register_pickle_by_value(module)


def _used_variables(fn: Any) -> dict[str, Any]:
    """The closure variables and module globals a function refers to, by name."""
    code = getattr(fn, "__code__", None)
    if code is None:
        return {}
    found = {n: fn.__globals__[n] for n in code.co_names if n in getattr(fn, "__globals__", {})}
    for name, cell in zip(code.co_freevars, fn.__closure__ or ()):
        try:
            found[name] = cell.cell_contents
        except ValueError:  # a cell not yet filled
            pass
    return found


def check_shippable(fn: Callable[..., Any], args: dict[str, Any] | None = None) -> None:
    """Fail before anything starts when `fn` or `args` cannot be pickled for the Spark tasks, naming
    the culprit (an argument, or a variable the function uses) instead of Spark's raw TypeError later."""
    from pyspark import cloudpickle

    def problem(value: object) -> str | None:
        try:
            cloudpickle.dumps(value)
        except Exception as exc:  # noqa: BLE001 - pickling can fail with any error type
            return f"{type(exc).__name__}: {exc}"
        return None

    hint = ("create such objects (SparkSession, locks, open files, sockets, database connections) inside "
            "the function, or pass what they are made from")
    for key, value in (args or {}).items():
        why = problem(value)
        if why:
            raise SerializationError(f"argument {key!r} ({type(value).__name__}) cannot be sent to the Spark "
                                     f"tasks ({why}); {hint}")
    why = problem(fn)
    if why is None:
        return
    culprits = [n for n, v in _used_variables(fn).items() if not isinstance(v, types.ModuleType) and problem(v)]
    uses = f" (it uses {', '.join(repr(n) for n in culprits)}, which cannot be pickled)" if culprits else ""
    raise SerializationError(f"the function {getattr(fn, '__name__', fn)!r} cannot be sent to the Spark "
                             f"tasks{uses}: {why}; {hint}")


def driver_host(spark: SparkHandle, network: Network | None = None) -> str:
    """The address executors use to reach this driver: the network_interface setting's, else Spark's."""
    default = spark.driver_host()
    return network.host(default) if network is not None else default


def open_channel(spark: SparkHandle, monitor: StageMonitor, network: Network) -> DriverChannel:
    """The driver's channel, on the interface and port range of the run's settings."""
    return DriverChannel(driver_host(spark, network), auth.new_secret(), monitor, network.port_range)


def run_stage(spark: SparkHandle, partition_fn: Callable[[Iterator[int]], Iterable[Any]], num_tasks: int, *,
              job_group: str, description: str, barrier: bool = False,
              abort: threading.Event | None = None, checks: preflight.Preflight | None = None) -> list[Any]:
    """Run `partition_fn` on `num_tasks` partitions (barrier mode if asked) and collect the results.

    With `checks`, each task first checks that its executor has the driver's Python stack and installs the
    user's modules (`preflight`); a stack difference fails the stage at once as an ExecutorStackError. The job runs in a
    helper thread so the caller can cancel it: on Ctrl-C, or as soon as `abort` is set (a task reported a
    failure), the job group is cancelled.
    """
    outcome: dict[str, Any] = {}
    if checks is not None:
        partition_fn = preflight.guard(partition_fn, checks)

    def collect() -> None:
        try:
            with spark.job_group(job_group, description, interrupt=True):
                outcome["value"] = spark.run(partition_fn, range(num_tasks), num_tasks, barrier=barrier)
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
            outcome["error"] = exc

    thread = threading.Thread(target=collect, name=f"hopsml-{job_group}", daemon=True)
    thread.start()
    try:
        while thread.is_alive():
            thread.join(0.05)
            if abort is not None and abort.is_set():
                spark.cancel(job_group)
                thread.join(30)
                break
    except KeyboardInterrupt:
        spark.cancel(job_group)
        thread.join(30)
        raise
    if "value" in outcome:
        return outcome["value"]
    if abort is not None and abort.is_set():
        return []
    error = outcome.get("error")
    if checks is not None:
        preflight.explain_failure(spark, error, checks, num_tasks)
    raise ClusterError(f"the Spark job {description!r} failed: {_short(error)}") from error


def _short(error: BaseException | None) -> str:
    text = str(error) if error is not None else "it stopped without a result"
    lines = [line for line in text.splitlines() if line.strip()]
    return "\n".join(lines[:12])


def wait_for_slots(spark: SparkHandle, needed: int, timeout_s: float) -> int:
    """Slots available once executors have registered (they come up after the session starts)."""
    deadline = time.monotonic() + timeout_s
    while (slots := spark.concurrent_slots()) < needed and time.monotonic() < deadline:
        time.sleep(0.25)
    return slots


def _key(report: RankReport) -> tuple[int | None, int | None]:
    return report.trial, report.rank


def check_barrier_stage(spark: SparkHandle, num_workers: int, gpus_per_worker: int,
                        start_timeout_s: float = 60.0) -> None:
    """Refuse what would make a barrier stage fail late or hang, with the fix in the message."""
    master = spark.master
    if (spark.conf_get("spark.dynamicAllocation.enabled") or "false").lower() == "true":
        raise ClusterError("barrier stages do not work with dynamic allocation: start Spark with "
                           "spark.dynamicAllocation.enabled=false and a fixed number of executors")
    slots = wait_for_slots(spark, num_workers, 0 if master.startswith("local[") else start_timeout_s)
    if slots < num_workers:
        where = "the Spark Connect server's master" if spark.connect else "local mode (HOPSML_MASTER)"
        raise ClusterError(
            f"{num_workers} workers need {num_workers} task slots at once, but the cluster has {slots} "
            f"(master {master}). Ask for fewer workers, or more slots: local[{num_workers}] in {where}, more "
            "executors (--num-executors) or cores (--executor-cores)")
    # local mode cannot schedule GPUs: its ranks share out the visible ones; a cluster manager must give them
    local_mode = master == "local" or master.startswith("local[")
    if gpus_per_worker and not local_mode:
        check_gpu_amount(gpus_per_worker, spark.conf_get("spark.task.resource.gpu.amount"))
