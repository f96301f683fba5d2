"""Compute a search spends to find a good model: grid, random, ASHA, Hyperband and TPE on the digits MLP
(lr / width / dropout / epochs), one run each on the same local session.

For every search: the trial-epochs it ran in all, and the trial-epochs spent (in the order its jobs
ended) until a trial came within --tolerance (0.5%) of the best accuracy grid search found. ASHA's
target: at most a third of grid's trial-epochs. Then slot utilisation (busy slot-seconds of the trials'
functions over the slots' seconds while trials ran) of ASHA against differential evolution's synchronous
generations, and for the asynchronous searches the share of slot time their jobs held ("held": from the
driver handing a job to a slot to its report, so the function's time plus the hand-over, and for a slot's
first job the start of its slot task). Epochs
of a promoted ASHA trial continue from its checkpoint, so a trial at budget b has cost b epochs in all.

    python bench/search.py [--master local[4]] [--samples 12] [--asha-trials 27] [--tolerance 0.005]
                           [--searches grid,asha,asha_random] [--seeds 1,2,3,4,5] [--repeat 2]

`asha` is asha as it runs by default (new configurations drawn by TPE, as BOHB does); `asha_random` with
sampler="random" (every configuration random, as in the ASHA paper). The asynchronous searches order their
jobs by when each ended, so one run is one sample: --seeds runs each search once per seed and prints the
median share.

Measured on local[4] on a 2-core machine, 81 ASHA trials, share of grid's trial-epochs spent until a trial
came within 0.5% of grid's best (-: never within the 81 trials); 18 runs of each: seeds 1-5 beside other
work, seeds 1-5 on a quiet machine, seeds 1-3 with --repeat 6, and seeds 1-5 once more (quiet) after
asha's next TPE configuration was fitted in the background:

    python bench/search.py --searches asha,asha_random,differential_evolution --asha-trials 81 --seeds 1,2,3,4,5
        asha         0.22 0.41 0.22 0.22 0.26 | 0.55 -    0.07 0.38 0.24 | 0.19 0.35 0.04 | 0.24 0.11 0.33 0.12 0.10
        asha_random  0.42 0.53 0.45 -    0.21 | 0.62 0.53 0.47 0.19 0.23 | 0.52 0.26 0.25 | 0.34 0.53 0.43 -    0.19

asha: median 0.23, under a third of grid's trial-epochs in 13 of 18 runs (5 of 5 in the last set);
asha_random: median 0.45, in 5 of 18. With 27 trials (seeds 1-5): asha 0.40 - 0.09 0.14 0.22, asha_random
0.33 - - - 0.19.

Why ASHA spends: the target was first reached at the top rung (27 epochs) in every run, so the cost is
what the rungs below spend before a good configuration gets there. Asynchronous promotion from rungs that
still hold few results over-promotes (81 trials ran about 38, 19 and 8 jobs at rungs 1-3 where
synchronous halving would run 27, 9 and 3), and random configurations are mostly poor (the learning rate
is log-uniform over [0.01, 0.5]) while the first rung (1 epoch) ranks them only roughly. Drawing the later
configurations with TPE, fitted on every configuration ranked by the highest rung it reached, sends more
of the budget to the good region; the spread that is left is which of the few good configurations the
top rung happens to finish first.

Slot utilisation (busy function seconds / the slots' seconds from the search's start to its end), ASHA
against differential evolution's synchronous generations:

    python bench/search.py --searches asha,asha_random,differential_evolution --asha-trials 81 --seeds 1,2,3,4,5
        asha 0.92 0.89 0.92 0.93 0.90 (slots held by jobs 0.95-0.98), asha_random 0.91-0.94,
        differential_evolution 0.46-0.49, grid 0.52 (the last set above, a quiet machine)

Then grid, random and evolution ran one Spark stage per batch of trials; they run on the slot loop now:

    python bench/search.py --searches differential_evolution,random --seeds 1,2
        grid 0.63, random 0.91 0.92, differential_evolution 0.90 0.92 (a quiet machine)

Drawing a TPE configuration takes 5-8 ms on the driver, under the lock every free slot waits on; before
it was fitted ahead in the background, asha's utilisation was 0.82-0.91 on a quiet machine, where a rung-0
job takes about 0.1 s. At a load average of 13-14 (random configurations): asha 0.87-0.93, differential
evolution 0.45-0.46.

Before the slot tasks each job was a Spark job and a process of its own: ASHA 0.46-0.54. With slot tasks
whose worker was a fresh Python, 0.70-0.72 (each slot's first job waited 3-9 s for that Python and its
imports). Now the worker is forked from the slot task: a slot takes its first job about 0.2 s after the
search starts, the gaps between a slot's jobs are about 1% of its time, and what is left is the hand-over
of each job (driver, slot task, worker and back: tens of milliseconds on a loaded machine, against jobs of
0.1-1 s here) and the last top-rung trial running alone.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from typing import Any

import numpy as np

from hopsml import checkpoint, config, experiment, tensorboard
from hopsml.cluster import session

REPEAT = 2   # passes over the training set per epoch: an epoch long enough to dominate a trial's start-up


def mlp(lr: float, width: int, dropout: float, epochs: int) -> dict[str, Any]:
    """One hidden layer (ReLU, inverted dropout), softmax, plain SGD on batches of 32; continues from its
    checkpoint when it has one (an ASHA promotion)."""
    from hopsml.examples.digits import load

    x, y, xt, yt = load()
    rng = np.random.default_rng(0)
    restored = checkpoint.load()
    if restored:
        (w1, b1, w2, b2), last = restored
        first = last + 1
    else:
        w1 = rng.normal(0, np.sqrt(2 / x.shape[1]), (x.shape[1], width)).astype(np.float32)
        b1 = np.zeros(width, np.float32)
        w2 = rng.normal(0, np.sqrt(1 / width), (width, 10)).astype(np.float32)
        b2 = np.zeros(10, np.float32)
        first = 0
    rng = np.random.default_rng(first)
    accuracy = 0.0
    for epoch in range(first, int(epochs)):
        for _ in range(REPEAT):
            order = rng.permutation(len(x))
            for start in range(0, len(x), 32):
                idx = order[start:start + 32]
                xb, yb = x[idx], y[idx]
                h = np.maximum(xb @ w1 + b1, 0)
                mask = (rng.random(h.shape) >= dropout) / (1 - dropout) if dropout > 0 else 1.0
                hd = h * mask
                logits = hd @ w2 + b2
                p = np.exp(logits - logits.max(1, keepdims=True))
                p /= p.sum(1, keepdims=True)
                p[np.arange(len(yb)), yb] -= 1
                p /= len(yb)
                dh = (p @ w2.T) * mask * (h > 0)
                w2 -= lr * hd.T @ p
                b2 -= lr * p.sum(0)
                w1 -= lr * xb.T @ dh
                b1 -= lr * dh.sum(0)
        accuracy = float(((np.maximum(xt @ w1 + b1, 0) @ w2 + b2).argmax(1) == yt).mean())
        tensorboard.log({"accuracy": accuracy}, step=epoch)
    checkpoint.save((w1, b1, w2, b2), int(epochs) - 1)
    return {"accuracy": accuracy, "epochs_trained": int(epochs) - first}


SPACE = {"lr": [0.01, 0.5], "width": [16, 256], "dropout": [0.0, 0.5], "epochs": [1, 27]}
GRID = {"lr": [0.03, 0.1, 0.3], "width": [32, 128], "dropout": [0.0, 0.3], "epochs": [9, 27]}


def _read(logdir: str, name: str) -> Any:
    with open(os.path.join(logdir, name)) as f:
        return json.load(f)


def batch_costs(logdir: str) -> list[tuple[float, float | None]]:
    """(epochs, accuracy) per trial of a batch search, in trial order."""
    return [(t["params"]["epochs"], t["metric"]) for t in _read(logdir, ".summary.json")["trials"]]


def async_costs(logdir: str, budget: str | None) -> list[tuple[float, float | None]]:
    """(epochs, accuracy) per job of an asynchronous search, in the order the jobs ended."""
    trials = {t["index"]: t for t in _read(logdir, ".summary.json")["trials"]}
    seen: dict[int, int] = {}
    costs = []
    for event in _read(logdir, "experiment.json")["jobs"]:
        if event["event"] != "end":
            continue
        trial = trials[event["trial"]]
        if budget is None:
            costs.append((trial["params"]["epochs"], trial["metric"]))
            continue
        n = seen.get(event["trial"], 0)
        seen[event["trial"]] = n + 1
        rung = trial["rungs"][n]
        before = trial["rungs"][n - 1]["budget"] if n else 0
        costs.append((rung["budget"] - before, rung["metric"]))
    return costs


def held(logdir: str) -> float | None:
    """Slot-seconds the search's Spark jobs held (from each job's start to its end, as the driver saw
    them) over the slots' seconds from the first start to the last end; None for batch searches."""
    record = _read(logdir, "experiment.json")
    if "jobs" not in record:
        return None
    started: dict[int, float] = {}
    busy = 0.0
    for event in record["jobs"]:
        if event["event"] == "start":
            started[event["slot"]] = event["t"]
        else:
            busy += event["t"] - started.pop(event["slot"])
    span = record["jobs"][-1]["t"] - record["jobs"][0]["t"]
    return busy / (record["parallel_trials"] * span) if span > 0 else None


def to_reach(costs: list[tuple[float, float | None]], target: float) -> float | None:
    spent = 0.0
    for epochs, metric in costs:
        spent += epochs
        if metric is not None and metric >= target:
            return spent
    return None


def main() -> None:
    global REPEAT
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--master", default="local[4]")
    parser.add_argument("--samples", type=int, default=12, help="trials of random and TPE search")
    parser.add_argument("--asha-trials", type=int, default=27)
    parser.add_argument("--min-budget", type=int, default=1, help="epochs of ASHA's and Hyperband's first rung")
    parser.add_argument("--tolerance", type=float, default=0.005)
    parser.add_argument("--seeds", default="1",
                        help="comma-separated seeds: every search but grid runs once per seed (the asynchronous "
                             "ones also order their jobs by when each ended, so one run is one sample)")
    parser.add_argument("--repeat", type=int, default=REPEAT,
                        help="passes over the training set per epoch (the seconds an epoch takes)")
    parser.add_argument("--searches", default="grid,random,asha,asha_random,hyperband,tpe,differential_evolution",
                        help="which to run (grid always runs: it sets the target)")
    args = parser.parse_args()
    REPEAT = args.repeat   # mlp travels by value, with this module's globals as they are when it is sent
    chosen = set(args.searches.split(",")) | {"grid"}
    os.environ.setdefault("HOPSML_ROOT", tempfile.mkdtemp(prefix="hopsml-bench-"))
    session.get_or_create(config.load(master=args.master))
    common = dict(optimization_key="accuracy", direction="max")
    runs: dict[tuple[str, int], tuple[str, float]] = {}

    def timed(label: str, seed: int, call: Any) -> str:
        if label not in chosen:
            return ""
        began = time.monotonic()
        logdir = call(seed)[0]
        runs[(label, seed)] = (logdir, time.monotonic() - began)
        return logdir

    grid_dir = timed("grid", 0, lambda _: experiment.grid_search(mlp, GRID, name="bench-grid", **common))
    space = {k: v for k, v in SPACE.items() if k != "epochs"}
    halving = dict(budget="epochs", min_budget=args.min_budget, max_budget=27, eta=3, num_trials=args.asha_trials,
                   log_scale=["lr"], **common)
    for seed in [int(s) for s in args.seeds.split(",")]:
        timed("random", seed, lambda seed: experiment.random_search(
            mlp, SPACE, samples=args.samples, seed=seed, log_scale=["lr"], name="bench-random", **common))
        timed("asha", seed, lambda seed: experiment.asha(mlp, space, seed=seed, name="bench-asha", **halving))
        timed("asha_random", seed, lambda seed: experiment.asha(mlp, space, seed=seed, sampler="random",
                                                                name="bench-asha-random", **halving))
        timed("hyperband", seed, lambda seed: experiment.hyperband(mlp, space, seed=seed, name="bench-hyperband",
                                                                   **halving))
        timed("tpe", seed, lambda seed: experiment.tpe_search(mlp, SPACE, samples=args.samples, seed=seed,
                                                              log_scale=["lr"], name="bench-tpe", **common))
        timed("differential_evolution", seed, lambda seed: experiment.differential_evolution(
            mlp, SPACE, generations=3, population=6, seed=seed, log_scale=["lr"], name="bench-de", **common))

    grid_costs = batch_costs(grid_dir)
    grid_best = max(m for _, m in grid_costs if m is not None)
    grid_total = sum(e for e, _ in grid_costs)
    target = grid_best - args.tolerance
    print(f"grid's best accuracy {grid_best:.4f}; target {target:.4f}; grid ran {grid_total:g} trial-epochs")
    print(f"{'search':<24}{'seed':>5}{'trial-epochs':>14}{'to target':>11}{'/ grid':>8}{'best':>8}{'util.':>7}"
          f"{'held':>6}{'wall s':>8}")
    shares: dict[str, list[float | None]] = {}
    for (label, seed), (logdir, wall) in runs.items():
        if not logdir:
            continue
        record = _read(logdir, "experiment.json")
        budget = record.get("budget")
        costs = async_costs(logdir, budget) if "jobs" in record else batch_costs(logdir)
        total = sum(e for e, _ in costs)
        reach = to_reach(costs, target)
        share = f"{reach / grid_total:.2f}" if reach is not None else "-"
        shares.setdefault(label, []).append(reach / grid_total if reach is not None else None)
        print(f"{label:<24}{seed if label != 'grid' else '-':>5}{total:>14g}"
              f"{(f'{reach:g}' if reach is not None else 'never'):>11}{share:>8}"
              f"{record['metric']:>8.4f}{record.get('slot_utilisation', 0):>7.2f}"
              f"{(f'{h:.2f}' if (h := held(logdir)) is not None else '-'):>6}{wall:>8.1f}")

    for label, found in shares.items():
        if label == "grid" or len(found) < 2:
            continue
        # a run that never got there counts as more than any that did
        ordered = sorted(found, key=lambda v: (v is None, v or 0.0))
        middle = ordered[len(ordered) // 2]
        print(f"{label}: within {args.tolerance:g} of grid's best in {sum(v is not None for v in found)} of "
              f"{len(found)} runs; median share of grid's trial-epochs "
              f"{f'{middle:.2f}' if middle is not None else 'never'}")


if __name__ == "__main__":
    main()
