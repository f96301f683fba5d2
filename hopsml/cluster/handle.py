"""One handle on the Spark a job runs on, whether a classic session (a SparkContext in this process) or a Spark
Connect one (`sc://host:15002`, no JVM here): what hopsml asks of Spark goes through it and nothing else.

Classic sessions run tasks as PySpark always has (`parallelize(...).mapPartitions`, `.barrier()` for a
barrier stage, job groups to cancel). Spark Connect has no SparkContext; there a stage is a one-row-per-task
range mapped with `mapInArrow(..., barrier=...)` (as Spark's TorchDistributor does), whose task unpickles
the same partition function and returns its results pickled in a binary column, and job groups become
operation tags. What Connect cannot tell (the status tracker's task counts, the registered executors) is
None here, and callers do without it.
"""

from __future__ import annotations

import functools
import pickle
import re
import socket
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

PartitionFn = Callable[[Iterator[Any]], Iterable[Any]]
IndexedPartitionFn = Callable[[int, Iterator[Any]], Iterable[Any]]

_THIS_HOST = ("localhost", "127.0.0.1", "::1", socket.gethostname())
_LOCAL = re.compile(r"^local(?:\[(?P<threads>\*|\d+)(?:,\s*\d+)?\])?$")


def is_connect(spark: object) -> bool:
    """True for a Spark Connect session (its class lives in pyspark.sql.connect)."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


class SparkHandle:
    """A classic SparkSession or SparkContext, or a Spark Connect session, behind the calls hopsml makes."""

    def __init__(self, spark: Any) -> None:
        self.connect = is_connect(spark)
        self.session: Any
        self._sc: Any
        if self.connect:
            self.session, self._sc = spark, None
        else:  # a SparkSession, or a SparkContext (older hops code passes one)
            self.session = spark if hasattr(spark, "sparkContext") else None
            self._sc = spark.sparkContext if self.session is not None else spark

    @classmethod
    def of(cls, spark: object) -> SparkHandle:
        return spark if isinstance(spark, SparkHandle) else cls(spark)

    # what the application is

    def conf(self) -> dict[str, str]:
        """The application's Spark settings."""
        if self.connect:
            return {k: v for k, v in self.session.conf.getAll.items() if v is not None}
        return dict(self._sc._conf.getAll())   # getConf() would copy every entry over py4j first

    def conf_get(self, key: str, default: str | None = None) -> str | None:
        if self.connect:
            return self.session.conf.get(key, default)
        return self._sc._conf.get(key, default)   # one py4j call; getConf() copies the whole conf

    @functools.cached_property
    def app_id(self) -> str:
        return str(self.conf_get("spark.app.id") if self.connect else self._sc.applicationId)

    @functools.cached_property
    def master(self) -> str:
        return str((self.conf_get("spark.master") if self.connect else self._sc.master) or "")

    @property
    def version(self) -> str:
        return str(self.session.version if self.connect else self._sc.version)

    @functools.cached_property
    def default_parallelism(self) -> int:
        """Spark's default parallelism. Spark Connect does not expose it: there it is read from a local master
        (local[4] -> 4) or spark.default.parallelism, else counted from the partitions of a range (one job)."""
        if not self.connect:
            return int(self._sc.defaultParallelism)
        if (setting := self.conf_get("spark.default.parallelism")) and setting.isdigit():
            return int(setting)
        if match := _LOCAL.match(self.master):
            import os

            threads = match["threads"]
            return 1 if threads is None else (os.cpu_count() or 1) if threads == "*" else int(threads)
        from pyspark.sql import functions as F

        return int(self.session.range(0, 1 << 20).select(F.spark_partition_id()).distinct().count())

    def concurrent_slots(self) -> int:
        """How many tasks the cluster can run at once right now (what a barrier stage needs)."""
        if self.connect:
            return self.default_parallelism
        try:
            jsc = self._sc._jsc.sc()
            return int(jsc.maxNumConcurrentTasks(jsc.resourceProfileManager().defaultResourceProfile()))
        except Exception:  # noqa: BLE001 - older Spark or a restricted gateway: fall back to the estimate
            return self.default_parallelism

    def registered_executors(self) -> int | None:
        """Executors registered with the application (the driver not counted); None over Spark Connect."""
        if self.connect:
            return None
        return int(self._sc._jsc.sc().getExecutorMemoryStatus().size()) - 1

    def status_tracker(self) -> Any | None:
        """Spark's status tracker (task counts of job groups); None over Spark Connect."""
        return None if self.connect else self._sc.statusTracker()

    @property
    def server(self) -> str | None:
        """The Spark Connect server's host, None for a classic session."""
        return str(self.session.client.host or "localhost") if self.connect else None

    @property
    def on_this_host(self) -> bool:
        """Whether Spark's driver runs on this machine (always in a classic session)."""
        return not self.connect or self.server in _THIS_HOST

    @property
    def cluster(self) -> str:
        """What runs the tasks, as messages name it: the master, or the Spark Connect server on another host."""
        return self.master if self.on_this_host else f"sc://{self.server}"

    def driver_host(self) -> str:
        """The address executors can reach this process on: Spark's driver host in a classic session; over
        Spark Connect to another host, this machine's address on the route to it (the Spark driver is there)."""
        if self.on_this_host:
            return str(self.conf_get("spark.driver.host", "127.0.0.1"))
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:  # a UDP connect sends no packet
            probe.connect((self.server, 15002))
            return str(probe.getsockname()[0])

    # running work

    @contextmanager
    def job_group(self, group: str, description: str, interrupt: bool = False) -> Iterator[None]:
        """Jobs started by this thread inside the block belong to `group` (cancel them with `cancel`)."""
        if self.connect:
            self.session.addTag(group)
            try:
                yield
            finally:
                self.session.removeTag(group)
            return
        self._sc.setJobGroup(group, description, interruptOnCancel=interrupt)
        try:
            yield
        finally:
            self._sc.setLocalProperty("spark.jobGroup.id", None)
            self._sc.setLocalProperty("spark.job.description", None)
            self._sc.setLocalProperty("spark.job.interruptOnCancel", None)

    def cancel(self, group: str) -> None:
        """Cancel the running jobs of `group` (from any thread)."""
        if self.connect:
            self.session.interruptTag(group)
        else:
            self._sc.cancelJobGroup(group)

    def run(self, partition_fn: PartitionFn | IndexedPartitionFn, items: Sequence[Any], slices: int | None = None,
            *, barrier: bool = False, indexed: bool = False) -> list[Any]:
        """Split `items` over `slices` tasks (one each by default) as `parallelize` does, run `partition_fn`
        on each (given the task's index first when `indexed`) and collect the results in task order."""
        slices = len(items) if slices is None else slices
        if not self.connect:
            rdd = self._sc.parallelize(items, slices)
            if barrier:
                rdd = rdd.barrier()
            mapped = rdd.mapPartitionsWithIndex(partition_fn) if indexed else rdd.mapPartitions(partition_fn)
            return list(mapped.collect())
        task = functools.partial(_arrow_task, partition_fn, list(items), slices, indexed)
        frame = self.session.range(0, slices, 1, slices).mapInArrow(task, "value binary", barrier=barrier)
        return [pickle.loads(row[0]) for row in frame.collect()]


def _arrow_task(partition_fn: Any, items: list[Any], slices: int, indexed: bool,
                batches: Iterator[Any]) -> Iterator[Any]:
    """A Spark Connect task: its slice of `items` (as parallelize cuts them) through `partition_fn`."""
    import pyarrow as pa
    from pyspark import TaskContext, cloudpickle

    for _ in batches:  # the range's one row: only the task's index matters
        pass
    index = TaskContext.get().partitionId()  # type: ignore[union-attr]  # always set inside a task
    mine = iter(items[index * len(items) // slices:(index + 1) * len(items) // slices])
    results = partition_fn(index, mine) if indexed else partition_fn(mine)
    values = [cloudpickle.dumps(result) for result in results]
    yield pa.RecordBatch.from_arrays([pa.array(values, pa.binary())], names=["value"])
