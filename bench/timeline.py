"""What the timeline costs: 2-rank 4 KiB all-reduce latency with the timeline on and off, interleaved in one run
(on, off, on, off, ...: both see the same machine state), and the trace's size per 1,000 steps.

    python bench/timeline.py                          # 4 KiB, 2 ranks, 15 rounds of 2000 ops per mode
    python bench/timeline.py --rounds 5 --iters 500   # quicker
    python bench/timeline.py --cnn                    # also the CNN step of bench/torch_ddp.py, on and off
    python bench/timeline.py --cnn-spark --reps 4     # ... and as whole experiment.allreduce runs on Spark
    HOPSML_COLLECTIVE_SHM=0 python bench/timeline.py  # over the TCP ring's transport

"On" is what a run gets: the communicator records every op, the rank's reporter thread batches them every
0.5 s (sent nowhere here); "ops recorded only" leaves the reporter thread out, and a step also records a
reader wait and a user span (the trace-size figure counts both: "op only" and "step" = op + input wait +
span). Latency is the slower rank's per op, median over rounds.
The CNN step (target +1%) runs in the same two rank processes, which keep their model between rounds, on and
off interleaved: run to run differences of whole Spark jobs (one sample each) spread wider than the target.
Target: +5% or +1 us at 4 KiB. On a loaded machine the latency difference drowns in scheduling noise; the
last line, recording's own cost per op timed in one process (minimum of repeats), does not.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing as mp
import statistics
import sys
import time
from multiprocessing.connection import Connection
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _rank(rank: int, size: int, addresses_out: mp.Queue, conn: Connection, nbytes: int) -> None:
    from hopsml import collective, timeline
    from hopsml.timeline import chrome
    from hopsml.timeline.rank_timeline import rank_timeline

    listener, address = collective.listen("127.0.0.1")
    addresses_out.put((rank, address))
    addresses, secret = conn.recv()
    data = np.zeros(nbytes // 4, np.float32)
    with collective.Communicator.connect(rank, size, addresses, listener, secret, timeout_s=120) as comm:
        conn.send("ready")
        while True:
            message = conn.recv()
            if message[0] == "stop":
                return
            _, mode, iters = message
            if mode == "size":
                sizes = {}
                for label, with_step in (("op only", False), ("step", True)):
                    recorder = timeline.Recorder(rank, size)
                    comm.attach_timeline(recorder)
                    with timeline.recording(recorder):
                        for _ in range(1000):
                            if with_step:
                                for _ in timeline.input_waits(iter([0])):
                                    pass
                                with timeline.span("forward"):
                                    pass
                            comm.allreduce(data)
                    comm.attach_timeline(None)
                    sizes[label] = len(json.dumps(chrome.rank_trace(recorder), separators=(",", ":")))
                conn.send(sizes)
                continue
            if mode.startswith("cnn"):
                conn.send(_cnn_steps(comm, rank, size, mode == "cnn on", iters))
                continue
            comm.allreduce(data)
            comm.barrier()
            if mode == "attach":
                comm.attach_timeline(timeline.Recorder(rank, size))
                start = time.perf_counter()
                for _ in range(iters):
                    comm.allreduce(data)
                elapsed = time.perf_counter() - start
                comm.attach_timeline(None)
            elif mode == "on":
                with rank_timeline(rank, size, send=lambda payload: None, comm=comm):
                    start = time.perf_counter()
                    for _ in range(iters):
                        comm.allreduce(data)
                    elapsed = time.perf_counter() - start
            else:
                start = time.perf_counter()
                for _ in range(iters):
                    comm.allreduce(data)
                elapsed = time.perf_counter() - start
            conn.send(elapsed / iters)


_CNN: dict[str, object] = {}


def _cnn_steps(comm: object, rank: int, size: int, on: bool, steps: int) -> float:
    """ms per step of bench/torch_ddp.py's CNN (hopsml.torch) in this rank's process, which keeps its model
    between calls; with `on`, the timeline records as in a run (the reporter's batches go nowhere)."""
    import torch
    import torch.nn.functional as F

    import hopsml.torch as ht
    from hopsml import collective
    from hopsml.examples.digits_cnn import build_model
    from hopsml.timeline.rank_timeline import rank_timeline

    with collective.use(comm):
        if not _CNN:
            torch.set_num_threads(1)
            model = build_model(seed=0)
            optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
            generator = torch.Generator().manual_seed(rank + 1)
            _CNN.update(model=model, optimizer=optimizer, sync=ht.distribute(model, optimizer),
                        x=torch.rand(32, 3, 28, 28, generator=generator),
                        y=torch.randint(0, 10, (32,), generator=generator))
        model, optimizer, x, y = _CNN["model"], _CNN["optimizer"], _CNN["x"], _CNN["y"]

        def step() -> None:
            optimizer.zero_grad()
            F.cross_entropy(model(x), y).backward()
            optimizer.step()

        step()
        comm.barrier()
        timed = rank_timeline(rank, size, send=lambda payload: None, comm=comm) if on else contextlib.nullcontext()
        with timed:
            start = time.perf_counter()
            for _ in range(steps):
                step()
            elapsed = time.perf_counter() - start
    return 1000.0 * elapsed / steps


def hot_path_ns(ops: int = 200_000, repeats: int = 7) -> float:
    """What recording adds to one op, in ns: the communicator's three clock reads, its checks and the recorder's
    append, timed in this process (the minimum over `repeats`: robust on a busy machine)."""
    from time import perf_counter_ns

    from hopsml.timeline import Recorder

    best = float("inf")
    for _ in range(repeats):
        recorder = Recorder(0, 2)
        start = perf_counter_ns()
        for seq in range(ops):
            rec = recorder
            began = perf_counter_ns() if rec is not None else 0
            peers = perf_counter_ns() if rec is not None else 0
            if rec is not None:
                rec.op("allreduce", seq, began, peers, perf_counter_ns(), 4096)
        with_recording = perf_counter_ns() - start
        nothing = None
        start = perf_counter_ns()
        for seq in range(ops):
            rec = nothing
            began = perf_counter_ns() if rec is not None else 0
            peers = perf_counter_ns() if rec is not None else 0
            if rec is not None:
                rec.op("allreduce", seq, began, peers, perf_counter_ns(), 4096)
        without = perf_counter_ns() - start
        best = min(best, (with_recording - without) / ops)
    return best


def cnn_steps(reps: int, steps: int) -> dict[str, list[float]]:
    """ms per step of bench/torch_ddp.py's hopsml.torch CNN on 2 ranks under experiment.allreduce, with the
    timeline on and off, alternating which goes first; "records" holds what rank 0 recorded per step when on."""
    from pyspark import cloudpickle

    from hopsml import config, experiment
    from hopsml.cluster import session

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import torch_ddp

    cloudpickle.register_pickle_by_value(torch_ddp)
    session.get_or_create(config.load(master="local[4]"), app_name="bench-timeline")

    def run(on: bool, count: int) -> tuple[float, float]:
        def train() -> dict:
            from hopsml import timeline

            result = torch_ddp.run_steps("hopsml", count, 5, 32)
            recorder = timeline.current()
            result["records"] = len(recorder.ops) + len(recorder.spans) if recorder is not None else 0
            return result

        _, result = experiment.allreduce(train, name=f"bench-timeline-{'on' if on else 'off'}", num_workers=2,
                                         timeline=on)
        return float(result["step_ms"]), result["records"] / (count + 5)

    run(True, 2)  # starts the Python workers and imports torch in them
    times: dict[str, list[float]] = {"on": [], "off": [], "records": []}
    for i in range(reps):
        for on in ((True, False) if i % 2 == 0 else (False, True)):
            ms, records = run(on, steps)
            times["on" if on else "off"].append(ms)
            if on:
                times["records"].append(records)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--iters", type=int, default=2000)
    parser.add_argument("--bytes", type=int, default=4096)
    parser.add_argument("--cnn", action="store_true", help="also the CNN step on the 2 ranks (needs torch)")
    parser.add_argument("--cnn-rounds", type=int, default=20, help="interleaved on/off rounds of the CNN")
    parser.add_argument("--cnn-steps", type=int, default=100, help="CNN steps per round and mode")
    parser.add_argument("--cnn-spark", action="store_true",
                        help="also the CNN as whole experiment.allreduce runs on Spark (noisier: one run per sample)")
    parser.add_argument("--reps", type=int, default=4, help="--cnn-spark: runs per mode")
    parser.add_argument("--steps", type=int, default=200, help="--cnn-spark: steps per run")
    args = parser.parse_args()
    from hopsml.cluster import auth

    size = 2
    ctx = mp.get_context("spawn")
    queue: mp.Queue = ctx.Queue()
    pipes = [ctx.Pipe() for _ in range(size)]
    procs = [ctx.Process(target=_rank, args=(r, size, queue, pipes[r][1], args.bytes), daemon=True)
             for r in range(size)]
    for p in procs:
        p.start()
    found = dict(queue.get(timeout=120) for _ in range(size))
    secret = auth.new_secret()
    for r in range(size):
        pipes[r][0].send(([found[i] for i in range(size)], secret))
    for r in range(size):
        pipes[r][0].recv()

    def run(mode: str) -> float:
        for r in range(size):
            pipes[r][0].send(("run", mode, args.iters))
        return max(pipes[r][0].recv() for r in range(size))

    times: dict[str, list[float]] = {"on": [], "off": [], "attach": []}
    for i in range(args.rounds):
        for mode in (("on", "off", "attach") if i % 2 == 0 else ("attach", "off", "on")):
            times[mode].append(run(mode))
    for r in range(size):
        pipes[r][0].send(("run", "size", 0))
    sizes = [pipes[r][0].recv() for r in range(size)]
    off = statistics.median(times["off"])
    print(f"{args.bytes} B all-reduce, {size} ranks, median of {args.rounds} interleaved rounds of {args.iters} ops")
    print(f"  timeline off:            {off * 1e6:.2f} us/op")
    for mode, label in (("attach", "ops recorded only:      "), ("on", "timeline on (as a run): ")):
        t = statistics.median(times[mode])
        print(f"  {label}{t * 1e6:.2f} us/op  ({(t - off) * 1e6:+.2f} us, {(t / off - 1) * 100:+.1f}%)")
    print(f"  recording's own cost per op (min of 7 x 200k, one process): {hot_path_ns():.0f} ns")
    for label in ("op only", "step"):
        total = sum(s[label] for s in sizes)
        print(f"  trace per 1,000 steps ({label}, {size} ranks): {total / 1024:.0f} KiB")
    if args.cnn:
        pairs = []
        for i in range(args.cnn_rounds):
            modes = ("cnn on", "cnn off") if i % 2 == 0 else ("cnn off", "cnn on")
            got = {}
            for mode in modes:
                for r in range(size):
                    pipes[r][0].send(("run", mode, args.cnn_steps))
                got[mode] = max(pipes[r][0].recv() for r in range(size))
            pairs.append((got["cnn on"], got["cnn off"]))
        on_ms = statistics.median(p[0] for p in pairs)
        off_ms = statistics.median(p[1] for p in pairs)
        ratios = sorted(a / b for a, b in pairs)
        quartiles = statistics.quantiles(ratios, n=4)
        print(f"CNN step on 2 ranks in two processes (hopsml.torch), {args.cnn_rounds} interleaved rounds of "
              f"{args.cnn_steps} steps per mode")
        print(f"  timeline off: {off_ms:.3f} ms/step   on: {on_ms:.3f} ms/step; on/off of each round: median "
              f"{statistics.median(ratios):.4f} (quartiles {quartiles[0]:.4f}-{quartiles[2]:.4f})")
    if args.cnn_spark:
        cnn = cnn_steps(args.reps, args.steps)
        on, off = statistics.median(cnn["on"]), statistics.median(cnn["off"])
        ratios = sorted(a / b for a, b in zip(cnn["on"], cnn["off"]))
        print(f"CNN step on 2 ranks (hopsml.torch), median of {args.reps} runs of {args.steps} steps per mode")
        print(f"  timeline off: {off:.2f} ms/step   on: {on:.2f} ms/step  ({(on / off - 1) * 100:+.1f}%); "
              f"on/off of each pair: median {statistics.median(ratios):.3f}, {ratios[0]:.3f} to {ratios[-1]:.3f}")
        records, cost_ns = statistics.median(cnn["records"]), hot_path_ns()
        print(f"  recorded per step (rank 0): {records:.1f} ops and spans x {cost_ns:.0f} ns = "
              f"{records * cost_ns / 1e3:.1f} us, {records * cost_ns / 1e4 / off:.3f}% of the step")
    for r in range(size):
        pipes[r][0].send(("stop",))
    for p in procs:
        p.join(30)


if __name__ == "__main__":
    main()
