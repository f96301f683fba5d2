"""Step time of the digits CNN on 2 ranks: hopsml.torch against DDP over gloo and Spark's TorchDistributor.

    python bench/torch_ddp.py                   # 2 ranks, batch 32 per rank, 200 timed steps, 4 repetitions
    python bench/torch_ddp.py --quick           # a smoke run: 1 repetition, 10 steps
    python bench/torch_ddp.py --load 1          # the timed runs beside one busy loop (a CPU-bound process)

Three ways to train the same model (hopsml.examples.digits_cnn, 28x28x3 inputs) on the same batch
(random, fixed per rank), on the same local Spark session, one run of each per repetition:
TorchDistributor first, then the other two in an order that alternates between repetitions (a run right
after TorchDistributor's shares the machine with its exiting processes, so each takes that slot equally):

* hopsml       experiment.allreduce + hopsml.torch.distribute (gradients through hopsml.collective)
* ddp-gloo     experiment.allreduce + hopsml.torch.init_process_group + DistributedDataParallel
* torchdist    pyspark.ml.torch.distributor.TorchDistributor(num_processes=2, local_mode=False) + DDP
* compute      experiment.allreduce, the same steps with no gradient exchange: the floor of a step on this
               machine at this moment (under load the step is bound by the CPU share, whatever the collective)
* lockstep     the same steps with no gradient exchange but one 8-byte all-reduce per step: the floor of any
               synchronous data-parallel step. Ranks that wait for each other every step lose the CPU time the
               scheduler gives elsewhere while one of them waits; under load this floor is well above `compute`
               (python bench/lockstep.py shows the same without torch or hopsml)

A first untimed round starts Spark's Python workers (hopsml reuses them, as Spark does; TorchDistributor
starts fresh torchrun processes every run). Step time: each rank times `steps` optimizer steps after
`warmup` steps (the slower rank counts); end-to-end: the driver's wall time of the whole call (start of
the Spark job to the result).
Medians over the repetitions; ratios: DDP step / hopsml step (target >= 1.5) and hopsml end-to-end /
TorchDistributor end-to-end (target <= 0.1). Needs torch (pip install ".[bench]").
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

MODES = ("hopsml", "ddp-gloo", "torchdist", "compute", "lockstep")


def run_steps(mode: str, steps: int, warmup: int, batch: int) -> dict[str, Any]:
    """One rank: build the model, time the steps; returns the slowest rank's ms per step."""
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.nn.parallel import DistributedDataParallel

    import hopsml.torch as ht
    from hopsml.examples.digits_cnn import build_model

    torch.set_num_threads(1)
    model = build_model(seed=0)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    sync = None
    if mode in ("hopsml", "compute", "lockstep"):
        from hopsml import collective

        sync = ht.distribute(model, optimizer) if mode == "hopsml" else None
        net, rank = model, collective.rank()

        def slowest(ms: float) -> float:
            return float(collective.allreduce(torch.tensor([ms], dtype=torch.float64).numpy(), op="max")[0])
    else:
        if mode == "ddp-gloo":
            ht.init_process_group("gloo", timeout_s=60)
        else:
            dist.init_process_group("gloo")  # torchrun's environment
        net, rank = DistributedDataParallel(model), dist.get_rank()

        def slowest(ms: float) -> float:
            value = torch.tensor([ms], dtype=torch.float64)
            dist.all_reduce(value, op=dist.ReduceOp.MAX)
            return float(value[0])
    generator = torch.Generator().manual_seed(rank + 1)
    x = torch.rand(batch, 3, 28, 28, generator=generator)
    y = torch.randint(0, 10, (batch,), generator=generator)
    tick = torch.zeros(1, dtype=torch.float64).numpy()

    def step() -> None:
        optimizer.zero_grad()
        F.cross_entropy(net(x), y).backward()
        optimizer.step()
        if mode == "lockstep":
            collective.allreduce(tick)

    for _ in range(warmup):
        step()
    start = time.perf_counter()
    for _ in range(steps):
        step()
    ms = slowest(1000.0 * (time.perf_counter() - start) / steps)
    checksum = ht.parameters_checksum(model)
    if sync is not None:
        sync.close()
    elif mode not in ("compute", "lockstep"):
        # the DDP model first: its reducer freeing the gloo group while holding the GIL can deadlock with
        # the group's worker threads (pytorch/pytorch#56297), the stall this bench once showed
        del step, net
        dist.destroy_process_group()
    return {"step_ms": ms, "checksum": checksum}


def run_once(mode: str, args: argparse.Namespace) -> tuple[float, float]:
    """(step ms, end-to-end seconds) of one run of `mode`; a run past --run-timeout is cancelled."""
    import threading

    from pyspark import SparkContext

    from hopsml import experiment

    steps, warmup, batch = args.steps, args.warmup, args.batch

    def train() -> dict[str, Any]:
        return run_steps(mode, steps, warmup, batch)

    # Rendezvous on a port that was bound and released (TorchDistributor's MASTER_PORT) can hang when
    # another process takes the port in between: cancel such a run instead of waiting for torchrun.
    watchdog = threading.Timer(args.run_timeout, SparkContext.getOrCreate().cancelAllJobs)
    watchdog.start()
    start = time.perf_counter()
    try:
        if mode == "torchdist":
            from pyspark.ml.torch.distributor import TorchDistributor

            result = TorchDistributor(num_processes=args.ranks, local_mode=False, use_gpu=False).run(train)
        else:
            _, result = experiment.allreduce(train, name=f"bench-torch-{mode}", num_workers=args.ranks,
                                             timeout_s=args.run_timeout)
    finally:
        watchdog.cancel()
    return result["step_ms"], time.perf_counter() - start


def timed_runs(args: argparse.Namespace) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """ms per step and end-to-end seconds of each mode's runs, repetitions interleaved."""
    steps: dict[str, list[float]] = {m: [] for m in MODES}
    walls: dict[str, list[float]] = {m: [] for m in MODES}
    for rep in range(args.reps):
        # TorchDistributor first (its exiting processes slow down whatever runs next), then the two others in
        # alternating order, so that each of them comes right after it in half of the repetitions.
        order = ("torchdist", "hopsml", "ddp-gloo") if rep % 2 == 0 else ("torchdist", "ddp-gloo", "hopsml")
        order += ("compute", "lockstep")
        for mode in (m for m in order if m in args.modes):
            try:
                ms, wall = run_once(mode, args)
            except Exception as exc:  # noqa: BLE001 - a failed run is reported and left out of the medians
                print(f"rep {rep + 1}/{args.reps} {mode:10s} FAILED: {str(exc).splitlines()[0][:300]}", flush=True)
                continue
            steps[mode].append(ms)
            walls[mode].append(wall)
            print(f"rep {rep + 1}/{args.reps} {mode:10s} {ms:8.2f} ms/step {wall:7.2f} s end-to-end", flush=True)
    return steps, walls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--batch", type=int, default=32, help="per rank")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--reps", type=int, default=4)
    parser.add_argument("--run-timeout", type=float, default=150.0, help="seconds before a run is cancelled")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--load", type=int, default=0, help="busy loops running beside the timed runs")
    parser.add_argument("--modes", default=",".join(MODES), help=f"comma-separated, of {', '.join(MODES)}")
    args = parser.parse_args()
    if args.quick:
        args.reps, args.steps, args.warmup = 1, 10, 2
    args.modes = [m.strip() for m in args.modes.split(",")]
    if unknown := set(args.modes) - set(MODES):
        parser.error(f"unknown mode(s) {', '.join(sorted(unknown))}: choose from {', '.join(MODES)}")

    from pyspark import cloudpickle

    from hopsml import config
    from hopsml.cluster import session

    cloudpickle.register_pickle_by_value(sys.modules[__name__])  # TorchDistributor's children cannot import bench/
    session.get_or_create(config.load(master=f"local[{max(4, args.ranks)}]"), app_name="bench-torch-ddp")
    warm = argparse.Namespace(**{**vars(args), "steps": 2, "warmup": 1})
    for mode in args.modes:  # not timed: starts the Python workers and imports torch in them once
        try:
            run_once(mode, warm)
        except Exception as exc:  # noqa: BLE001 - reported; the timed runs say whether it persists
            print(f"warm-up {mode}: FAILED: {str(exc).splitlines()[0][:300]}", flush=True)
    loops = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.load)]
    try:
        steps, walls = timed_runs(args)
    finally:
        for loop in loops:
            loop.kill()
            loop.wait()
    med_step = {m: statistics.median(v) if v else float("nan") for m, v in steps.items()}
    med_wall = {m: statistics.median(v) if v else float("nan") for m, v in walls.items()}
    print(f"\n{args.ranks} ranks, CNN on 28x28x3, batch {args.batch} per rank, {args.steps} steps, "
          f"median of {args.reps} (runs per mode: {', '.join(f'{m} {len(v)}' for m, v in steps.items())})"
          + (f", {args.load} busy loop(s) beside them" if args.load else ""))
    print(f"{'':10s} {'ms/step':>9s} {'end-to-end s':>13s}")
    for mode in args.modes:
        print(f"{mode:10s} {med_step[mode]:9.2f} {med_wall[mode]:13.2f}")
    ratios = (  # (what, numerator mode, denominator mode, the medians compared, note)
        ("step time  DDP-gloo / hopsml.torch    ", "ddp-gloo", "hopsml", med_step, "target >= 1.5"),
        ("step time  TorchDistributor / hopsml  ", "torchdist", "hopsml", med_step, ""),
        ("end-to-end hopsml / TorchDistributor  ", "hopsml", "torchdist", med_wall, "target <= 0.1"),
        ("step time  DDP-gloo / compute only    ", "ddp-gloo", "compute", med_step,
         "what a step without any synchronization would gain"),
        ("step time  DDP-gloo / lockstep only   ", "ddp-gloo", "lockstep", med_step,
         "the most any synchronous collective could gain over DDP here"),
        ("step time  hopsml / lockstep only     ", "hopsml", "lockstep", med_step, ""),
    )
    print()
    for what, top, bottom, medians, note in ratios:
        if top in args.modes and bottom in args.modes:
            print(f"{what} = {medians[top] / medians[bottom]:.2f}x" + (f" ({note})" if note else ""))

if __name__ == "__main__":
    main()
