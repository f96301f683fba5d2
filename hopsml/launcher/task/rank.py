"""Task side of a distributed run: one rank per barrier task.

One skeleton (`barrier_task`) for every framework, with a hook object per framework (`RankFramework`:
hopsml's collective here, TensorFlow in tf_cluster.py) and teardown hooks (torch's process group, from
hopsml.torch). Each rank binds its collective listener first (and keeps it: no bind-then-release race), reserves
fresh ports for frameworks with their own servers (TF_CONFIG, MASTER_PORT; see ports.py), exchanges
addresses with the other ranks through the driver (`meet`: a round trip, where Spark's
`BarrierTaskContext.allGather` took a second), pins its GPU, exports the variables other frameworks expect,
connects the communicator, releases the framework ports and runs the user's function with it.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import queue
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from hopsml import collective, config, devices
from hopsml.cluster.ports import FrameworkPorts
from hopsml.collective.options import CollectiveOptions
from hopsml.errors import ClusterError
from hopsml.launcher.channel import TaskChannel
from hopsml.launcher.messages import Join, Peers, decode, to_wire
from hopsml.launcher.spec import TaskSpec
from hopsml.launcher.task.function import run_function
from hopsml.launcher.task.recorded import recorded
from hopsml.layout import LOGS
from hopsml.net import Network

logger = logging.getLogger(__name__)

if TYPE_CHECKING:
    from pyspark import BarrierTaskContext


@dataclass(frozen=True)
class RankInfo:
    """What a rank learns at rendezvous."""

    rank: int
    world_size: int
    local_rank: int
    addresses: list[str]
    hosts: list[str]
    gpus: list[str]
    master_port: int
    framework_addresses: list[str]  # every rank's reserved host:port for TF_CONFIG


def task_host(ctx: BarrierTaskContext, network: Network | None = None) -> str:
    """Where this rank listens: the address of the network_interface setting's interface on this host,
    else this task's executor address as Spark knows it."""
    infos = ctx.getTaskInfos()
    default = infos[ctx.partitionId()].address.rsplit(":", 1)[0]
    return network.host(default) if network is not None else default


def _assigned_gpus(ctx: BarrierTaskContext) -> list[str]:
    """The GPUs Spark's resource scheduling gave this task (none in local mode)."""
    resource = ctx.resources().get("gpu")
    return list(resource.addresses) if resource is not None else []


def meet(ctx: BarrierTaskContext, spec: TaskSpec, mine: dict[str, Any], timeout_s: float) -> list[dict[str, Any]]:
    """Every rank's `mine`, in rank order: through the driver's channel (each rank joins, the driver answers
    once all have), or Spark's allGather where the run has no channel."""
    if spec.channel_address is None:
        return [json.loads(m) for m in ctx.allGather(json.dumps(mine))]
    rank = ctx.partitionId()
    where = f"{spec.channel_address[0]}:{spec.channel_address[1]}"
    channel = TaskChannel.connect(spec.channel_address, spec.secret)
    if channel is None:
        raise ClusterError(f"rank {rank} cannot reach the driver at {where} to meet its peers: the executors must "
                           "reach the driver's host (set network_interface / port_range so that they can)")
    try:
        channel.send(to_wire(Join(rank, len(ctx.getTaskInfos()), mine)))
        deadline = time.monotonic() + timeout_s
        while (left := deadline - time.monotonic()) > 0:
            try:
                message = decode(channel.inbox.get(timeout=min(left, 0.5)))
            except queue.Empty:
                if channel.ended.is_set():
                    raise ClusterError(f"rank {rank}: the driver at {where} closed its channel before every rank "
                                       "had met (the run was stopped)") from None
                continue
            if isinstance(message, Peers):
                return message.everyone
        raise ClusterError(f"rank {rank} waited {timeout_s:.0f} s for the other ranks to start and meet at the "
                           "driver: a task of the stage did not start (see the Spark UI), or raise "
                           "collective_timeout_s")
    finally:
        channel.close()


def rendezvous(ctx: BarrierTaskContext, spec: TaskSpec, listener_address: str | None, gpus_per_worker: int,
               ports: FrameworkPorts, timeout_s: float) -> RankInfo:
    """Every rank's listener address (None without hopsml's collective), host, GPUs, reserved framework port
    (and rank 0's MASTER_PORT), exchanged once (`meet`)."""
    rank = ctx.partitionId()
    host = ports.host
    gpus = _assigned_gpus(ctx)
    mine = {"address": listener_address, "host": host, "gpus": gpus, "master_port": ports.master_port,
            "framework": f"{host}:{ports.framework_port}"}
    everyone = meet(ctx, spec, mine, timeout_s)
    hosts = [m["host"] for m in everyone]
    local_rank = sum(1 for h in hosts[:rank] if h == host)
    if gpus:
        # Spark's addresses index the executor's CUDA_VISIBLE_DEVICES when one is set (as TorchDistributor reads them)
        gpus = devices.physical_gpus(gpus, os.environ.get(devices.VISIBLE_ENV))
    elif gpus_per_worker:
        # Not scheduled by Spark (e.g. local mode): take this rank's share of the visible GPUs.
        visible = devices.visible_gpus()
        gpus = visible[local_rank * gpus_per_worker:(local_rank + 1) * gpus_per_worker]
    return RankInfo(rank, len(everyone), local_rank, [m["address"] for m in everyone], hosts, gpus,
                    everyone[0]["master_port"], [m["framework"] for m in everyone])


def export_environment(info: RankInfo, tf_config: dict[str, Any] | None = None) -> None:
    """RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR/PORT, TF_CONFIG and CUDA_VISIBLE_DEVICES.

    TF_CONFIG names the ranks' reserved framework ports (never hopsml's own listeners); by default
    every rank is a worker, as MultiWorkerMirroredStrategy expects.
    """
    if tf_config is None:
        tf_config = {"cluster": {"worker": info.framework_addresses}, "task": {"type": "worker", "index": info.rank}}
    os.environ.update({
        "RANK": str(info.rank), "WORLD_SIZE": str(info.world_size), "LOCAL_RANK": str(info.local_rank),
        "MASTER_ADDR": info.hosts[0], "MASTER_PORT": str(info.master_port),
    })
    if info.world_size > 1:  # as hops: one rank alone gets none, and its strategy trains on the local devices
        os.environ["TF_CONFIG"] = json.dumps(tf_config)
    else:
        os.environ.pop("TF_CONFIG", None)
    if info.gpus:
        os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(info.gpus)


def export_interface(network: Network) -> None:
    """Point gloo's and NCCL's own sockets at the network_interface setting's interface, unless set already."""
    if network.interface and not config.is_ip_address(network.interface):
        for name in ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME"):
            os.environ.setdefault(name, network.interface)


def pin_gpu(info: RankInfo) -> None:
    """Make the rank's first GPU cupy's current device, when cupy and a GPU are there."""
    if not info.gpus:
        return
    try:
        import cupy
    except ImportError:
        return
    visible = cupy.cuda.runtime.getDeviceCount()
    if visible == len(info.gpus):  # CUDA started with the rank's CUDA_VISIBLE_DEVICES: ours are 0..n-1
        cupy.cuda.Device(0).use()
        return
    # CUDA started in this (reused) Python worker before the rank set CUDA_VISIBLE_DEVICES, so it still sees the
    # executor's GPUs. Selecting by id is right when the executor had no CUDA_VISIBLE_DEVICES of its own.
    first = info.gpus[0]
    if not first.isdigit() or int(first) >= visible:
        raise ClusterError(f"rank {info.rank} owns GPU {first}, but CUDA was already started in this Python worker "
                           f"and sees {visible} GPUs, so the rank cannot be pinned to it: set "
                           "spark.python.worker.reuse=false for GPU experiments")
    logger.warning("rank %d: CUDA was started in this Python worker before its GPU was assigned; selecting GPU %s "
                   "by index (set spark.python.worker.reuse=false if the executor restricts CUDA_VISIBLE_DEVICES)",
                   info.rank, first)
    cupy.cuda.Device(int(first)).use()


class RankFramework:
    """One framework's part in the barrier-task skeleton (`barrier_task`); one object per task.

    The skeleton binds nothing of its own: `on_start` binds what the framework listens on before the
    rendezvous, `tf_config` names the rank's TensorFlow role, `run` runs the function and returns its
    report in wire form, `on_shutdown` releases what the framework holds (also when the task fails)."""

    def on_start(self, host: str, network: Network) -> str | None:
        """Before the rendezvous: returns this rank's collective listener address, if it has one."""
        return None

    def tf_config(self, info: RankInfo) -> dict[str, Any] | None:
        """This rank's TF_CONFIG; None: every rank a worker."""
        return None

    def run(self, ctx: BarrierTaskContext, info: RankInfo, spec: TaskSpec, ports: FrameworkPorts) -> dict[str, Any]:
        raise NotImplementedError

    def timeout_s(self, spec: TaskSpec) -> float:
        """How long the rank waits for its peers at the rendezvous: the run's collective timeout."""
        return float(spec.settings.collective_timeout_s)

    def on_shutdown(self) -> None:
        """Release what the framework holds."""


def barrier_task(spec: TaskSpec, *, gpus_per_worker: int, framework: Callable[[], RankFramework],
                 on_shutdown: Sequence[Callable[[], None]] = ()) -> Callable[[Iterator[int]], Iterator[dict[str, Any]]]:
    """The function Spark runs in each barrier task: the rank's host, its framework ports, one rendezvous,
    its environment, then the framework's `run`; at the end the framework's and `on_shutdown`'s teardown,
    and the worker's environment as it was (Python workers are reused)."""

    network = Network(spec.settings.network_interface, spec.settings.port_range)  # the driver's snapshot

    def run_rank(_: Iterator[int]) -> Iterator[dict[str, Any]]:
        from pyspark import BarrierTaskContext

        ctx = BarrierTaskContext.get()
        saved_environment = dict(os.environ)  # Python workers are reused: leave no rank variables behind
        hooks = framework()
        ports = None
        try:
            host = task_host(ctx, network)
            address = hooks.on_start(host, network)
            ports = FrameworkPorts.reserve(host, with_master=ctx.partitionId() == 0, port_range=network.port_range)
            info = rendezvous(ctx, spec, address, gpus_per_worker, ports, hooks.timeout_s(spec))
            export_environment(info, hooks.tf_config(info))
            export_interface(network)
            rank_spec = dataclasses.replace(spec, log_name=f"{LOGS}/worker_{info.rank}.log")
            yield hooks.run(ctx, info, rank_spec, ports)
        finally:
            try:
                hooks.on_shutdown()
                if ports is not None:
                    ports.release()
                for hook in on_shutdown:
                    hook()
            finally:
                os.environ.clear()
                os.environ.update(saved_environment)

    return run_rank


class CollectiveRank(RankFramework):
    """hopsml's own: the rank's collective listener, a communicator connected with the run's collective
    options, and the function run in the task's process with it."""

    def __init__(self, fn: Callable[[], Any], options: CollectiveOptions, all_ranks_write_metrics: bool,
                 timeline: bool = True) -> None:
        self.fn, self.options, self.all_ranks_write_metrics = fn, options, all_ranks_write_metrics
        self.timeline = timeline
        self._listener: Any = None

    def on_start(self, host: str, network: Network) -> str | None:
        self._listener, address = collective.listen(host, network.port_range)
        return str(address)

    def timeout_s(self, spec: TaskSpec) -> float:
        return self.options.timeout_s

    def run(self, ctx: BarrierTaskContext, info: RankInfo, spec: TaskSpec, ports: FrameworkPorts) -> dict[str, Any]:
        listener, fn, options, timeline = self._listener, self.fn, self.options, self.timeline

        def connected_fn() -> Any:
            pin_gpu(info)
            with connect(info, listener, spec.secret, options) as comm, collective.use(comm):
                ports.release()  # hopsml's connections are made: the framework may bind now
                if not timeline:
                    return fn()
                with recorded(info.rank, info.world_size, spec, comm):
                    return fn()

        return run_function(connected_fn, {}, spec, rank=info.rank, world_size=info.world_size,
                            write_metrics=self.all_ranks_write_metrics or info.rank == 0)

    def on_shutdown(self) -> None:
        if self._listener is not None:
            self._listener.close()


def connect(info: RankInfo, listener: Any, secret: bytes, options: CollectiveOptions) -> collective.Communicator:
    """This rank's communicator, told the run's collective options (the driver's snapshot)."""
    return collective.Communicator.connect(info.rank, info.world_size, info.addresses, listener, secret,
                                           options=options)
