"""What waiting for each other every step costs two processes, with and without load, no torch or hopsml.

    python bench/lockstep.py              # quiet, then beside one busy loop (--load 1)
    python bench/lockstep.py --load 2     # beside two busy loops

Two processes do the same fixed CPU work per step (numpy products of 64x64 matrices, about --step-ms on an
idle core, one BLAS thread each), and between steps:

* independent  nothing: each runs its own steps (the floor: the CPU share the scheduler gives each)
* blocking     each sends its step number through a pipe and sleeps until the other's arrives (a lockstep that
               gives its core away while it waits, as hopsml's collective does after a short poll)
* spin         each publishes its step number in shared memory and polls for the other's without sleeping
* yield        the same poll with sched_yield() between reads
* pinned       blocking, with each process bound to its own core (as mpirun binds ranks by default)

Every synchronous data-parallel step (DDP, hopsml.torch, Horovod) waits like `blocking` or `spin` once per step
at least; the ratio to `independent` is what that wait costs on this machine, whatever the collective. On a
quiet machine it is about 1.0; with a third busy process on two cores it is not: the waiting process's core
is given to the busy loop while its peer shares the other core with it. Rounds are interleaved; medians.
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # before numpy: one BLAS thread per process
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

import argparse
import multiprocessing as mp
import statistics
import subprocess
import sys
import time

import numpy as np

WAITS = ("independent", "blocking", "spin", "yield", "pinned")


def work(products: int) -> None:
    a = np.random.default_rng(0).random((64, 64))
    for _ in range(products):
        a = a @ a
        a /= a.max()


def calibrate(step_ms: float) -> int:
    """Products of 64x64 matrices that take about step_ms on this core now."""
    work(50)
    start = time.perf_counter()
    work(200)
    per_product_ms = 1000.0 * (time.perf_counter() - start) / 200
    return max(1, round(step_ms / per_product_ms))


def one_rank(rank: int, wait: str, steps: int, products: int, pipe, shared, out) -> None:
    if wait == "pinned":
        cores = sorted(os.sched_getaffinity(0))
        os.sched_setaffinity(0, {cores[rank % len(cores)]})
    work(products)  # warm
    start = time.perf_counter()
    for step in range(1, steps + 1):
        work(products)
        if wait in ("blocking", "pinned"):
            pipe.send(step)
            if not pipe.poll(60.0):
                raise TimeoutError(f"rank {rank}: its peer sent nothing for 60 s at step {step}")
            pipe.recv()
        elif wait in ("spin", "yield"):
            shared[rank] = step
            deadline = time.monotonic() + 60.0
            while shared[1 - rank] < step:
                if wait == "yield":
                    os.sched_yield()
                if time.monotonic() > deadline:
                    raise TimeoutError(f"rank {rank}: its peer did not reach step {step} in 60 s")
    out[rank] = 1000.0 * (time.perf_counter() - start) / steps


def run(wait: str, steps: int, products: int) -> float:
    """ms per step of the slower of the two processes."""
    ctx = mp.get_context("spawn")
    ends = ctx.Pipe()
    shared = ctx.Array("l", 2, lock=False)
    out = ctx.Array("d", 2, lock=False)
    procs = [ctx.Process(target=one_rank, args=(r, wait, steps, products, ends[r], shared, out)) for r in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120.0)
        if p.is_alive() or p.exitcode != 0:
            for q in procs:
                q.kill()
            raise RuntimeError(f"{wait}: a process failed or did not finish in 120 s (exit {p.exitcode})")
    return max(out)


def measure(load: int, rounds: int, steps: int, products: int) -> dict[str, float]:
    loops = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(load)]
    try:
        times: dict[str, list[float]] = {w: [] for w in WAITS}
        for r in range(rounds):
            for wait in WAITS if r % 2 == 0 else WAITS[::-1]:
                times[wait].append(run(wait, steps, products))
    finally:
        for loop in loops:
            loop.kill()
            loop.wait()
    return {w: statistics.median(v) for w, v in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--load", type=int, default=1, help="busy loops beside the loaded run (default 1)")
    parser.add_argument("--step-ms", type=float, default=3.0, help="CPU work per step on an idle core")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    products = calibrate(args.step_ms)
    print(f"2 processes, {args.steps} steps of {products} products of 64x64 matrices (~{args.step_ms} ms), "
          f"{os.cpu_count()} cores, median of {args.rounds} interleaved rounds", flush=True)
    results = {"quiet": measure(0, args.rounds, args.steps, products)}
    results[f"{args.load} busy loop(s)"] = measure(args.load, args.rounds, args.steps, products)
    print(f"\n{'':12s}" + "".join(f"{name:>28s}" for name in results))
    for wait in WAITS:
        cells = "".join(f"{r[wait]:9.2f} ms/step {r[wait] / r['independent']:5.2f}x    " for r in results.values())
        print(f"{wait:12s}   {cells}")
    print("\nx: ms per step against `independent` in the same column (1.00 = waiting costs nothing)")


if __name__ == "__main__":
    main()
