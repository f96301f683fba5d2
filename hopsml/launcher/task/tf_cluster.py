"""TensorFlow distribution strategies across Spark ranks: who plays which role, the TF_CONFIG of each
rank, and TensorFlow's hooks in the barrier-task skeleton (launcher/task/rank.py).

    mirrored (MultiWorkerMirroredStrategy)   ranks 0..n-1 are workers (worker 0 is the chief);
                                             with an evaluator the last rank is the evaluator
    parameter_server (TF2 ParameterServerStrategy)
                                             rank 0 is the chief (the coordinator, runs train_fn),
                                             then num_ps ps tasks, then the workers, then the evaluator

Every TF_CONFIG address is a port reserved for the framework (ports.py), never hopsml's own. Each rank's
function runs in a child process (child.py), since TensorFlow's servers outlive a function. ps and
worker tasks of a parameter-server run host a `tf.distribute.Server` until the chief's function ends
(a barrier of the stage), then stop; if the chief fails the driver cancels the stage.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from hopsml.cluster.ports import FrameworkPorts
from hopsml.errors import HopsmlError
from hopsml.launcher.spec import TaskSpec
from hopsml.launcher.task.child import ChildRank
from hopsml.launcher.task.rank import RankFramework, RankInfo

MIRRORED = "mirrored"
PARAMETER_SERVER = "parameter_server"
SERVER_ROLES = ("ps", "worker")  # in a parameter-server run these host a server, the chief trains
_SERVER_STOP_S = 60.0

if TYPE_CHECKING:
    from pyspark import BarrierTaskContext


def roles(strategy: str, world_size: int, *, num_ps: int = 0, evaluator: bool = False) -> list[tuple[str, int]]:
    """(task type, index) of every rank, in rank order."""
    if strategy == MIRRORED:
        workers = world_size - (1 if evaluator else 0)
        if workers < 1:
            raise HopsmlError(f"mirrored needs at least one worker besides the evaluator; got {world_size} ranks")
        return [("worker", i) for i in range(workers)] + ([("evaluator", 0)] if evaluator else [])
    if strategy == PARAMETER_SERVER:
        workers = world_size - 1 - num_ps - (1 if evaluator else 0)
        if num_ps < 1 or workers < 1:
            raise HopsmlError(f"parameter_server needs a chief, at least one ps and one worker; got {world_size} "
                              f"ranks for {num_ps} ps{' and an evaluator' if evaluator else ''}")
        return ([("chief", 0)] + [("ps", i) for i in range(num_ps)] + [("worker", i) for i in range(workers)]
                + ([("evaluator", 0)] if evaluator else []))
    raise HopsmlError(f"unknown TensorFlow strategy {strategy!r}; use {MIRRORED!r} or {PARAMETER_SERVER!r}")


def tf_config(strategy: str, addresses: list[str], rank: int, *, num_ps: int = 0,
              evaluator: bool = False) -> dict[str, Any]:
    """The TF_CONFIG of `rank`, given every rank's reserved host:port in rank order.

    >>> tf_config("mirrored", ["h:1", "h:2"], 1)
    {'cluster': {'worker': ['h:1', 'h:2']}, 'task': {'type': 'worker', 'index': 1}}
    >>> tf_config("parameter_server", ["h:1", "h:2", "h:3"], 0, num_ps=1)["cluster"]
    {'chief': ['h:1'], 'ps': ['h:2'], 'worker': ['h:3']}
    """
    cluster: dict[str, list[str]] = {}
    assigned = roles(strategy, len(addresses), num_ps=num_ps, evaluator=evaluator)
    for (kind, _), address in zip(assigned, addresses):
        cluster.setdefault(kind, []).append(address)
    kind, index = assigned[rank]
    return {"cluster": cluster, "task": {"type": kind, "index": index}}


def serve_tensorflow() -> None:
    """Host this rank's `tf.distribute.Server` (from TF_CONFIG) until stdin closes."""
    import tensorflow as tf

    config = json.loads(os.environ["TF_CONFIG"])
    task = config["task"]
    server = tf.distribute.Server(tf.train.ClusterSpec(config["cluster"]), job_name=task["type"],
                                  task_index=task["index"], protocol="grpc", start=True)
    print(f"hopsml: TensorFlow {task['type']} {task['index']} serving at {server.target}", flush=True)
    sys.stdin.buffer.read()  # the launcher closes it when the chief is done (or dies with the task)
    print(f"hopsml: TensorFlow {task['type']} {task['index']} stopping", flush=True)


class TensorFlowRank(RankFramework):
    """TensorFlow's part in the barrier-task skeleton: the rank's role in TF_CONFIG, and its function (or,
    for a ps or worker of a parameter-server run, a `tf.distribute.Server`) in a child process, with its timeline
    (spans, system metrics) recorded when `timeline`."""

    def __init__(self, fn: Callable[[], Any], *, strategy: str, num_ps: int, evaluator: bool,
                 timeline: bool = False) -> None:
        self.fn, self.strategy, self.num_ps, self.evaluator = fn, strategy, num_ps, evaluator
        self.timeline = timeline
        self._config: dict[str, Any] = {}
        self._child: ChildRank | None = None

    def tf_config(self, info: RankInfo) -> dict[str, Any] | None:
        self._config = tf_config(self.strategy, info.framework_addresses, info.rank, num_ps=self.num_ps,
                                 evaluator=self.evaluator)
        return self._config

    def run(self, ctx: BarrierTaskContext, info: RankInfo, spec: TaskSpec, ports: FrameworkPorts) -> dict[str, Any]:
        serves = self.strategy == PARAMETER_SERVER and self._config["task"]["type"] in SERVER_ROLES
        ports.release()  # right before TensorFlow binds them, in the child
        child = self._child = ChildRank(serve_tensorflow if serves else self.fn, spec, rank=info.rank,
                                        world_size=info.world_size, write_metrics=info.rank == 0,
                                        keep_stdin_open=serves, timeline=self.timeline)
        if serves:
            ctx.barrier()  # until the chief (and evaluator) are done
            child.stop_input()
            return child.wait(_SERVER_STOP_S)
        report = child.wait()
        if self.strategy == PARAMETER_SERVER:
            ctx.barrier()
        return report

    def on_shutdown(self) -> None:
        if self._child is not None:
            self._child.close()
