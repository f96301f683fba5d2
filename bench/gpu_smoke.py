"""GPU smoke test: hopsml's NCCL path and its host-staged fallback on a real GPU, without Spark.

    python bench/gpu_smoke.py            # from a checkout; needs only numpy (2.x) and cupy (with NCCL)

Items, each printed as PASS or FAIL (exit status 1 if any fails):
  1. a size-1 NCCL communicator (hopsml.collective.gpu.NcclComm): allreduce sum/mean/min/max and
     broadcast of float32/float16/float64/int64 arrays, contiguous and non-contiguous;
  2. two ranks on one GPU as two processes on 127.0.0.1 connected by hopsml.collective: they detect the
     shared GPU and take the documented host-staged path (device -> host -> TCP ring -> device) with
     correct results; with HOPSML_GPU_COLLECTIVE=nccl both raise a clear CollectiveError instead of
     crashing in NCCL; and `allreduce_async` on them: an array still being computed by kernels queued on a
     side stream when it is submitted (the all-reduce must read their result), and four in flight waited for
     out of order;
  3. with two or more GPUs: two ranks on GPUs 0 and 1 all-reduce over real NCCL;
  4. a cupy training step: hopsml.examples.digits' SoftmaxRegression on cupy, gradients all-reduced
     over NCCL, matching the same step in numpy;
  5. the timeline's CUDA events: two ranks on the GPU record their device all-reduces and a
     `timeline.span(..., gpu=True)` around a matmul; every GPU span gets the device's own duration and
     the rank's Chrome trace part is valid; device all-reduce time with the timeline on and off
     (median of interleaved repeats, 4 KiB and 64 MiB) is printed.
Without cupy or a GPU it prints "skipped: no cupy/GPU (...)" and exits 0. Nothing here imports pyspark or
pyarrow, so the GPU machine needs neither.
"""

from __future__ import annotations

import logging
import multiprocessing as mp
import os
import queue
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

OPS = ("sum", "mean", "min", "max")
DTYPES = ("float32", "float16", "float64", "int64")
TIMEOUT_S = 120.0


def no_gpu_reason() -> str | None:
    """Why this machine cannot run the smoke test, or None."""
    try:
        import cupy
    except ImportError as exc:
        return f"cupy is not importable: {exc}"
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:  # noqa: BLE001 - any CUDA failure means: no usable GPU
        return f"CUDA has no usable device: {exc}"
    return None if count > 0 else "CUDA reports 0 devices"


def rank_input(rank: int, dtype: str, shape: tuple[int, ...] = (5, 6)) -> np.ndarray:
    rng = np.random.default_rng(100 + rank)
    if np.dtype(dtype).kind == "f":
        return rng.integers(-8, 8, shape).astype(dtype) / 4  # exact in float16 too
    return rng.integers(-1000, 1000, shape).astype(dtype)


def expected(inputs: list[np.ndarray], op: str) -> np.ndarray:
    acc = inputs[0].astype(np.float64 if inputs[0].dtype.kind == "f" else inputs[0].dtype)
    for x in inputs[1:]:
        acc = {"sum": np.add, "mean": np.add, "min": np.minimum, "max": np.maximum}[op](acc, x)
    if op == "mean":
        acc = acc // len(inputs) if acc.dtype.kind in "iu" else acc / len(inputs)
    return acc.astype(inputs[0].dtype)


def same(actual: Any, wanted: np.ndarray) -> bool:
    import cupy

    host = cupy.asnumpy(actual)
    return host.dtype == wanted.dtype and host.shape == wanted.shape and bool(
        np.allclose(host.astype(np.float64), wanted.astype(np.float64), rtol=1e-3, atol=1e-3))


class Report:
    """PASS/FAIL lines, as they happen."""

    def __init__(self) -> None:
        self.failed: list[str] = []

    def guard(self, name: str, fn: Callable[[], None]) -> None:
        """Run a group of items; if it raises, the group is one FAIL and the next group still runs."""
        try:
            fn()
        except Exception:  # noqa: BLE001 - a smoke test reports every failure and goes on
            self.record(name, traceback.format_exc().strip().splitlines()[-1])

    def record(self, name: str, problem: str | None) -> None:
        if problem:
            self.failed.append(name)
            print(f"FAIL {name}: {problem}", flush=True)
        else:
            print(f"PASS {name}", flush=True)


def collective_checks(run: Callable[[Any, str], Any], rank: int, size: int) -> list[tuple[str, str | None]]:
    """allreduce of every dtype and op (contiguous and not) and broadcast, via `run(array, what)`."""
    import cupy

    out: list[tuple[str, str | None]] = []
    for dtype in DTYPES:
        inputs = [rank_input(r, dtype) for r in range(size)]
        for op in OPS:
            x = cupy.asarray(inputs[rank])
            run(x, op)
            out.append((f"allreduce {op} {dtype}", None if same(x, expected(inputs, op)) else
                        f"got {cupy.asnumpy(x).ravel()[:4]}, expected {expected(inputs, op).ravel()[:4]}"))
        base = cupy.asarray(inputs[rank])
        view = base[:, ::2]
        run(view, "sum")
        wanted = inputs[rank].copy()
        wanted[:, ::2] = expected([i[:, ::2] for i in inputs], "sum")
        out.append((f"allreduce sum {dtype} non-contiguous", None if same(base, wanted) else "wrong values"))
        y = cupy.asarray(inputs[rank])
        run(y, "broadcast")
        out.append((f"broadcast {dtype}", None if same(y, inputs[size - 1]) else "did not get the root's data"))
    return out


def async_checks(comm: Any, rank: int, size: int) -> list[tuple[str, str | None]]:
    """collective.allreduce_async on cupy arrays: ordered after the work queued on the caller's stream, and
    several in flight at once."""
    import cupy

    out: list[tuple[str, str | None]] = []
    inputs = [rank_input(r, "float32", (1024, 1024)) for r in range(size)]
    with cupy.cuda.Stream(non_blocking=True):
        x = cupy.zeros((1024, 1024), dtype=cupy.float32)
        for _ in range(50):  # kernels still queued when the all-reduce is submitted
            x = x * 0.5 + 0.0
        x += cupy.asarray(inputs[rank])
        handle = comm.allreduce_async(x, "sum")
    result = handle.wait()
    out.append(("allreduce_async of an array still being computed on a side stream",
                None if result is x and same(x, expected(inputs, "sum")) else "wrong values (read too early?)"))
    base = [rank_input(r, "float64") for r in range(size)]
    arrays = [cupy.asarray(base[rank] * (i + 1)) for i in range(4)]
    handles = [comm.allreduce_async(a, "max") for a in arrays]
    for h in reversed(handles):
        h.wait()
    wrong = [i for i, a in enumerate(arrays) if not same(a, expected([b * (i + 1) for b in base], "max"))]
    out.append(("allreduce_async: 4 in flight, waited for out of order",
                None if not wrong else f"arrays {wrong} differ"))
    return out


def size_one_nccl(report: Report) -> None:
    from hopsml.collective import gpu

    nccl = gpu.nccl_module()
    if nccl is None:
        report.record("size-1 NCCL communicator", "this cupy has no NCCL (cupy.cuda.nccl is unavailable)")
        return
    comm = gpu.NcclComm(nccl, 1, 0, nccl.get_unique_id(), TIMEOUT_S, lambda: None)

    def run(array: Any, op: str) -> None:
        if op == "broadcast":
            comm.broadcast(array, 0)
        else:
            comm.allreduce(array, op)

    try:
        for name, problem in collective_checks(run, 0, 1):
            report.record(f"size-1 NCCL {name}", problem)
    finally:
        comm.close()


def timeline_checks(comm: Any, rank: int) -> tuple[list[tuple[str, str | None]], dict[str, Any]]:
    """Device all-reduces and a user's GPU span recorded by the timeline; on/off timings of the all-reduce."""
    import time

    import cupy

    from hopsml import timeline
    from hopsml.timeline import chrome
    from hopsml.timeline import gpu as timeline_gpu

    figures: dict[str, Any] = {}
    with_events = timeline_gpu.start_events
    modes = ("off", "on", "on, no CUDA events")
    for label, count in (("4 KiB", 1024), ("64 MiB", 16 << 20)):
        x = cupy.ones(count, dtype=cupy.float32)
        samples: dict[str, list[float]] = {mode: [] for mode in modes}
        for i in range(300 if count < 1 << 20 else 15):
            mode = modes[i % len(modes)]
            comm.attach_timeline(None if mode == "off" else timeline.Recorder(rank, 2))
            timeline_gpu.start_events = with_events if mode == "on" else (lambda: None)
            comm.allgather(None)   # both ranks start the timed op together
            cupy.cuda.Stream.null.synchronize()
            start = time.perf_counter()
            comm.allreduce(x, "sum")
            cupy.cuda.Stream.null.synchronize()
            samples[mode].append(time.perf_counter() - start)
        timeline_gpu.start_events = with_events
        figures[label] = {mode: round(float(np.median(v)) * 1e3, 3) for mode, v in samples.items()}
    recorder = timeline.Recorder(rank, 2)
    comm.attach_timeline(recorder)
    out: list[tuple[str, str | None]] = []
    a = cupy.random.default_rng(rank).standard_normal((2048, 2048), dtype=cupy.float32)
    with timeline.recording(recorder):
        for _ in range(3):
            with timeline.span("matmul", gpu=True):
                b = a @ a
            comm.allreduce(b, "mean")
    comm.attach_timeline(None)
    timeline_gpu.resolve(recorder)
    gpu_spans = [s for s in recorder.spans if s[0] == "gpu"]
    durations = [s[5]["gpu_ms"] for s in gpu_spans if s[5]]
    figures["gpu spans"] = {s[1]: s[5]["gpu_ms"] for s in gpu_spans if s[5]}
    # over NCCL the all-reduces get GPU spans too; host-staged ones are recorded as ops (their time is the op's)
    wanted = 6 if comm.device_path == "nccl" else 3
    out.append((f"timeline: {wanted} GPU spans (matmuls{', all-reduces' if wanted == 6 else ''}) timed on the GPU",
                None if len(gpu_spans) == wanted and all(isinstance(d, float) and d > 0 for d in durations)
                else f"GPU spans {[(s[1], s[5]) for s in gpu_spans]}"))
    part = chrome.rank_trace(recorder)
    problems = chrome.problems(part)
    named = [e for e in part["traceEvents"] if "on the GPU" in str(e.get("name"))]
    ops = [e for e in part["traceEvents"] if e.get("name") == "allreduce"]
    out.append(("timeline: the rank's Chrome trace part is valid and holds the GPU spans and the all-reduces",
                "; ".join(problems[:3]) or (None if len(named) == wanted and len(ops) >= 3
                                            else f"{len(named)} GPU events, {len(ops)} all-reduce ops")))
    return out, figures


def _rank_main(rank: int, size: int, device: int, mode: str, address_q: Any, conn: Any, result_q: Any,
               record: bool = False) -> None:
    """One rank process: connect with hopsml.collective, run the checks through its collectives, report."""
    lines: list[str] = []
    outcome: dict[str, Any] = {"rank": rank, "checks": [], "error": None, "logs": lines}
    try:
        if mode:
            os.environ["HOPSML_GPU_COLLECTIVE"] = mode
        import cupy

        from hopsml import collective

        class Lines(logging.Handler):
            def emit(self, record: logging.LogRecord) -> None:
                lines.append(record.getMessage())

        logging.getLogger("hopsml.collective").addHandler(Lines(logging.INFO))
        logging.getLogger("hopsml.collective").setLevel(logging.INFO)
        cupy.cuda.Device(device).use()
        listener, address = collective.listen("127.0.0.1")
        address_q.put((rank, address))
        addresses, secret = conn.recv()
        with collective.Communicator.connect(rank, size, addresses, listener, secret, TIMEOUT_S) as comm:
            def run(array: Any, op: str) -> None:
                if op == "broadcast":
                    comm.broadcast(array, size - 1)
                else:
                    comm.allreduce(array, op)

            outcome["checks"] = collective_checks(run, rank, size) + async_checks(comm, rank, size)
            if record:
                checks, outcome["figures"] = timeline_checks(comm, rank)
                outcome["checks"] += checks
    except Exception as exc:  # noqa: BLE001 - reported to the parent, which decides
        outcome["error"] = f"{type(exc).__name__}: {exc}"
    result_q.put(outcome)


def run_ranks(devices: list[int], mode: str = "", record: bool = False) -> list[dict[str, Any]]:
    """Start one spawned process per rank (on the given GPU indices); every wait is bounded."""
    from hopsml.cluster import auth

    ctx = mp.get_context("spawn")
    address_q, result_q = ctx.Queue(), ctx.Queue()
    pipes = [ctx.Pipe() for _ in devices]
    size = len(devices)
    procs = [ctx.Process(target=_rank_main, args=(r, size, devices[r], mode, address_q, pipes[r][1], result_q,
                                                        record),
                         daemon=True) for r in range(size)]
    for p in procs:
        p.start()
    results: list[dict[str, Any]] = []
    try:
        found = dict(address_q.get(timeout=TIMEOUT_S) for _ in procs)
        secret = auth.new_secret()
        for r in range(size):
            pipes[r][0].send(([found[i] for i in range(size)], secret))
        for _ in procs:
            results.append(result_q.get(timeout=3 * TIMEOUT_S))
    except queue.Empty:
        results.append({"rank": -1, "checks": [], "error": "the ranks did not finish in time (a hang)", "logs": []})
    finally:
        for p in procs:
            p.join(timeout=30)
            if p.is_alive():
                p.kill()
                p.join()
    return sorted(results, key=lambda r: r["rank"])


def report_ranks(report: Report, title: str, results: list[dict[str, Any]], size: int) -> None:
    if len(results) != size or any(r["error"] for r in results):
        report.record(title, "; ".join(f"rank {r['rank']}: {r['error']}" for r in results if r["error"])
                      or f"only {len(results)} of {size} ranks reported")
        return
    for name in dict(results[0]["checks"]):
        problems = [f"rank {r['rank']}: {dict(r['checks'])[name]}" for r in results if dict(r["checks"]).get(name)]
        report.record(f"{title}: {name}", "; ".join(problems) or None)


def shared_gpu(report: Report) -> None:
    results = run_ranks([0, 0])
    report_ranks(report, "2 ranks on 1 GPU (host-staged)", results, 2)
    said = [any("share one GPU" in line and "host memory" in line for line in r["logs"]) for r in results]
    report.record("2 ranks on 1 GPU: shared GPU detected and logged on every rank",
                  None if said and all(said) else f"log lines: {[r['logs'] for r in results]}")
    forced = run_ranks([0, 0], mode="nccl")
    errors = [r["error"] or "" for r in forced]
    report.record("2 ranks on 1 GPU with HOPSML_GPU_COLLECTIVE=nccl: clear CollectiveError on both ranks",
                  None if len(errors) == 2 and all("CollectiveError" in e and "share one GPU" in e for e in errors)
                  else f"got {errors}")


def timeline_on_gpu(report: Report) -> None:
    import cupy

    devices = [0, 1] if cupy.cuda.runtime.getDeviceCount() >= 2 else [0, 0]
    results = run_ranks(devices, record=True)
    report_ranks(report, f"timeline, 2 ranks on GPU(s) {devices}", results, 2)
    for r in results:
        if r.get("figures"):
            print(f"  rank {r['rank']} device all-reduce ms (median; timeline off, on, on without CUDA events): "
                  f"4 KiB {r['figures']['4 KiB']}, 64 MiB {r['figures']['64 MiB']}; "
                  f"GPU spans ms {r['figures']['gpu spans']}", flush=True)


def two_gpus(report: Report) -> None:
    import cupy

    if cupy.cuda.runtime.getDeviceCount() < 2:
        print("SKIP 2 ranks on 2 GPUs over NCCL: this machine has 1 GPU", flush=True)
        return
    results = run_ranks([0, 1])
    report_ranks(report, "2 ranks on 2 GPUs (NCCL)", results, 2)
    fallback = [line for r in results for line in r["logs"] if "host memory" in line]
    report.record("2 ranks on 2 GPUs: NCCL used, no host fallback", "; ".join(fallback) or None)


def training_step(report: Report) -> None:
    import cupy

    from hopsml.collective import gpu
    from hopsml.examples.digits import SoftmaxRegression

    nccl = gpu.nccl_module()
    rng = np.random.default_rng(0)
    x = rng.standard_normal((256, 64)).astype(np.float32)
    y = (x[:, :10].argmax(axis=1)).astype(np.int64)  # learnable labels
    on_gpu, on_cpu = SoftmaxRegression.create(64, 10, xp=cupy), SoftmaxRegression.create(64, 10, xp=np)
    comm = gpu.NcclComm(nccl, 1, 0, nccl.get_unique_id(), TIMEOUT_S, lambda: None) if nccl is not None else None
    xg, yg = cupy.asarray(x), cupy.asarray(y)
    losses = []
    try:
        for _ in range(20):
            loss, grads = on_gpu.loss_and_gradients(xg, yg)
            if comm is not None:
                for g in grads:
                    comm.allreduce(g, "mean")
            on_gpu.apply(grads, 0.5)
            _, cpu_grads = on_cpu.loss_and_gradients(x, y)
            on_cpu.apply(cpu_grads, 0.5)
            losses.append(loss)
    finally:
        if comm is not None:
            comm.close()
    diff = float(np.abs(cupy.asnumpy(on_gpu.weights) - on_cpu.weights).max())
    problem = None
    if not losses[-1] < losses[0]:
        problem = f"loss did not decrease: {losses[0]:.4f} -> {losses[-1]:.4f}"
    elif diff > 1e-3:
        problem = f"cupy weights differ from numpy's by {diff:.2e}"
    report.record(f"cupy training step (SoftmaxRegression, loss {losses[0]:.3f} -> {losses[-1]:.3f}, "
                  f"max |w_gpu - w_cpu| {diff:.1e})", problem)


def main() -> int:
    reason = no_gpu_reason()
    if reason is not None:
        print(f"skipped: no cupy/GPU ({reason})")
        return 0
    import cupy

    print(f"cupy {cupy.__version__}, numpy {np.__version__}, CUDA runtime {cupy.cuda.runtime.runtimeGetVersion()}, "
          f"{cupy.cuda.runtime.getDeviceCount()} GPU(s)", flush=True)
    report = Report()
    report.guard("size-1 NCCL communicator", lambda: size_one_nccl(report))
    report.guard("2 ranks on 1 GPU", lambda: shared_gpu(report))
    report.guard("2 ranks on 2 GPUs", lambda: two_gpus(report))
    report.guard("cupy training step", lambda: training_step(report))
    report.guard("timeline on the GPU", lambda: timeline_on_gpu(report))
    print(f"{'FAILED: ' + ', '.join(report.failed) if report.failed else 'all passed'}")
    return 1 if report.failed else 0


if __name__ == "__main__":
    sys.exit(main())
