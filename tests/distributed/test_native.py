"""The compiled same-host exchange (hopsml/collective/_fastshm.c, `native`) against the pure-Python path it
replaces: results bit for bit equal to numpy's rank-ordered reduction at every size, dtype and op through both
paths (HOPSML_COLLECTIVE_NATIVE=0 forces the Python one), with CPU hogs beside the ranks, mismatched calls,
payloads bigger than a slot, a rank that dies or stalls in a small all-reduce, and an install without the module."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from hopsml import collective
from hopsml.collective import host, native, shm
from hopsml.collective.options import NATIVE_ENV, CollectiveOptions
from hopsml.errors import CollectiveError

pytestmark = pytest.mark.skipif(not shm.supported(), reason="shared memory for collectives needs Linux on x86-64")
needs_module = pytest.mark.skipif(not native.available(), reason="the compiled extension is not built here")

UFUNCS = {"sum": np.add, "mean": np.add, "min": np.minimum, "max": np.maximum}
DTYPES = ["float16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
          "bool", ">f4", "complex64"]
SIZES = [1, 3, 1024, 16 << 10, 64 << 10, (64 << 10) + 8, 256 << 10]  # bytes: the largest two take the large path


def data(rank: int, nbytes: int, dtype: str, seed: int) -> np.ndarray:
    """Rank `rank`'s input: random values, with NaNs, signed zeros and extremes among the floats, overflowing sums
    among the integers."""
    dt = np.dtype(dtype)
    count = max(1, nbytes // dt.itemsize)
    rng = np.random.default_rng([seed, rank, count])
    if dt.kind == "b":
        return rng.integers(0, 2, count).astype(dt)
    if dt.kind in "iu":
        info = np.iinfo(dt)
        return rng.integers(info.min, info.max, count, dtype=dt.newbyteorder("="), endpoint=True).astype(dt)
    values = rng.standard_normal(count) * 10.0 ** rng.integers(-3, 4, count)
    if dt.kind == "c":
        values = values + 1j * rng.standard_normal(count)
    out = values.astype(dt)
    special = np.array([np.nan, -0.0, 0.0, np.inf, -np.inf], dtype=dt)
    picks = rng.integers(0, count, max(1, count // 16))
    out[picks] = special[rng.integers(0, len(special), len(picks))]
    return out


def expected(inputs: list[np.ndarray], op: str, large: bool) -> np.ndarray:
    """What every rank must hold: numpy's reduction in rank order (the small paths), or, for the large host path,
    in its documented order (share r of a round starts from rank r's data, then the others in rank order)."""
    size, ufunc = len(inputs), UFUNCS[op]
    if not large:
        acc = inputs[0].copy()
        for x in inputs[1:]:
            ufunc(acc, x, out=acc)
        return _finish(acc, op, size)
    out = np.empty_like(inputs[0])
    per_round = host.slot_bytes_for(size) // inputs[0].itemsize
    for start in range(0, out.size, per_round):
        m = min(per_round, out.size - start)
        bounds = [m * i // size for i in range(size + 1)]
        for r in range(size):
            a, b = start + bounds[r], start + bounds[r + 1]
            share = inputs[r][a:b].copy()
            for i in range(size):
                if i != r:
                    ufunc(share, inputs[i][a:b], out=share)
            out[a:b] = _finish(share, op, size)
    return out


def _finish(acc: np.ndarray, op: str, size: int) -> np.ndarray:
    if op != "mean":
        return acc
    return np.floor_divide(acc, size, out=acc) if acc.dtype.kind in "iu" else np.divide(acc, size, out=acc)


def same_bits(got: np.ndarray, want: np.ndarray) -> bool:
    """Bit for bit, except which NaN a sum of two different NaNs gives: numpy itself answers the first one's in
    its vector loop and the second one's in its scalar loop (seen: a one-element float32 array), so only where
    the NaNs are is compared for those."""
    if got.dtype.kind not in "fc":
        return got.tobytes() == want.tobytes()
    nan = np.isnan(want)
    return bool((np.isnan(got) == nan).all()) and got[~nan].tobytes() == want[~nan].tobytes()


def cases() -> list[tuple[int, str, str]]:
    return [(nbytes, dtype, op) for nbytes in SIZES for dtype in DTYPES for op in ("sum", "mean", "min", "max")
            if not (op == "mean" and dtype == "bool") and not (op in ("min", "max") and dtype == "complex64")]


def scenario_bit_for_bit(rank: int, size: int, seed: int, rounds: int) -> tuple[str, list[str]]:
    """Every case, twice (the second call of a shape takes the compiled path's fast entry), and a fused call;
    returns the small path and the cases whose bits differ from numpy's."""
    comm = collective.current()
    wrong = []
    with np.errstate(all="ignore"):
        for _ in range(rounds):
            for nbytes, dtype, op in cases():
                for again in range(2):
                    inputs = [data(r, nbytes, dtype, seed + again) for r in range(size)]
                    mine = inputs[rank].copy()
                    result = comm.allreduce(mine, op=op)
                    want = expected(inputs, op, mine.nbytes > collective.communicator.SMALL_BYTES)
                    if result is not mine or not same_bits(mine, want):
                        wrong.append(f"{nbytes} B {dtype} {op} (call {again + 1})")
            arrays = [data(rank, 4096, "float32", seed), data(rank, 80, "float32", seed + 1)]
            comm.allreduce_many(arrays, op="sum")
            for i, nbytes in enumerate((4096, 80)):
                want = expected([data(r, nbytes, "float32", seed + i) for r in range(size)], "sum", False)
                if not same_bits(arrays[i], want):
                    wrong.append(f"allreduce_many array {i}")
    return comm.small_path, wrong


@pytest.mark.parametrize("size", [2, 4])
@pytest.mark.parametrize("compiled", [pytest.param(True, marks=needs_module), False])
def test_results_are_numpys_bits_through_both_paths(ranks, size, compiled):
    env = (lambda r: {}) if compiled else (lambda r: {NATIVE_ENV: "0"})
    outcomes = ranks(scenario_bit_for_bit, size, 7, 1, env=env, timeout_s=60.0, join_s=600.0)
    assert sorted(outcomes) == list(range(size))
    for outcome in outcomes.values():
        assert outcome.ok, outcome
        path, wrong = outcome.value
        assert path == ("compiled" if compiled else "shm")
        assert wrong == [], f"rank {outcome.rank}: {wrong}"


def hog() -> list[subprocess.Popen]:
    """CPU hogs, one per core, as other work on a busy machine: they spin until the test stops them."""
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(os.cpu_count() or 2)]


def scenario_busy(rank: int, size: int, calls: int) -> tuple[str, int]:
    comm = collective.current()
    wrong = 0
    for i in range(calls):
        nbytes = (4, 4096, 65536)[i % 3]
        inputs = [data(r, nbytes, "float32", i) for r in range(size)]
        mine = inputs[rank].copy()
        comm.allreduce(mine, op=("sum", "max")[i % 2])
        wrong += not same_bits(mine, expected(inputs, ("sum", "max")[i % 2], False))
        if i % 50 == 0:
            comm.barrier()
    return comm.small_path, wrong


@pytest.mark.parametrize("size", [2, 4])
@pytest.mark.parametrize("compiled", [pytest.param(True, marks=needs_module), False])
def test_small_allreduces_stay_exact_beside_cpu_hogs(ranks, size, compiled):
    hogs = hog()
    env = (lambda r: {}) if compiled else (lambda r: {NATIVE_ENV: "0"})
    try:
        outcomes = ranks(scenario_busy, size, 600, timeout_s=60.0, join_s=600.0, env=env)
    finally:
        for process in hogs:
            process.kill()
            process.wait()
    for outcome in outcomes.values():
        assert outcome.ok, outcome
        assert outcome.value == ("compiled" if compiled else "shm", 0)


def scenario_mismatch_and_big(rank: int, size: int) -> list[str]:
    """Calls that differ between ranks raise the same error on every rank and leave the communicator usable;
    broadcast, allgather (also of a payload bigger than a slot) and a large all-reduce go through the slots."""
    comm = collective.current()
    seen = []
    for mine in (np.ones(16 if rank else 32, np.float32), np.ones(16, np.float64 if rank else np.float32)):
        try:
            comm.allreduce(mine)
            seen.append("no error")
        except CollectiveError as exc:
            seen.append(type(exc).__name__)
    try:
        comm.allreduce(np.ones(16, np.float32), op="max" if rank else "sum")
    except Exception as exc:  # noqa: BLE001
        seen.append(f"{type(exc).__name__}: {'disagree on the op' in str(exc)}")
    value = np.full(1000, float(rank))
    comm.broadcast(value, root=size - 1)
    seen.append(f"broadcast {value.tobytes() == np.full(1000, float(size - 1)).tobytes()}")
    big = bytes([rank]) * (100 << 10)
    gathered = comm.allgather(big)
    seen.append(f"allgather {[g[:1] for g in gathered] == [bytes([r]) for r in range(size)]}")
    large = np.full(1 << 20, rank + 1, np.float32)
    comm.allreduce(large)
    seen.append(f"large {bool((large == size * (size + 1) / 2).all())}")
    seen.append(comm.small_path)
    return seen


@needs_module
@pytest.mark.parametrize("size", [2, 3])
def test_mismatched_calls_fail_together_and_other_collectives_use_the_slots(ranks, size):
    outcomes = ranks(scenario_mismatch_and_big, size, timeout_s=30.0)
    for outcome in outcomes.values():
        assert outcome.ok, outcome
        assert outcome.value == ["CollectiveError", "CollectiveError", "CollectiveError: True", "broadcast True",
                                 "allgather True", "large True", "compiled"]


def scenario_die_or_stall(rank: int, size: int, victim: int, how: str) -> str:
    comm = collective.current()
    data4k = np.ones(1024, np.float32)
    for i in range(1000):
        if rank == victim and i == 200:
            if how == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            time.sleep(30)  # a stall: the others time out (the rank ends with them)
            return "stalled"
        comm.allreduce(data4k)
    return "finished without noticing"


@needs_module
@pytest.mark.parametrize("size,victim,how", [(2, 1, "kill"), (4, 2, "kill"), (2, 0, "stall"), (4, 3, "stall")])
def test_a_dead_or_stalled_peer_in_a_small_allreduce_is_named(ranks, size, victim, how):
    outcomes = ranks(scenario_die_or_stall, size, victim, how, timeout_s=3.0 if how == "stall" else 30.0,
                     join_s=120.0)
    for rank, outcome in outcomes.items():
        if rank == victim:
            continue
        assert outcome.error_type == "CollectiveError", outcome
        assert f"rank {victim}" in outcome.error and "allreduce #" in outcome.error, outcome.error
        if how == "stall":
            assert "made no progress" in outcome.error or "aborted" in outcome.error, outcome.error
    survivors = [r for r in range(size) if r != victim]
    assert sorted(r for r in outcomes if r != victim) == survivors


def scenario_interrupt(rank: int, size: int) -> str:
    comm = collective.current()
    value = np.ones(1024, np.float32)
    comm.allreduce(value)
    if rank == 0:  # Ctrl-C while it waits for rank 1, delivered to whichever thread the kernel picks
        threading.Timer(0.5, lambda: os.kill(os.getpid(), signal.SIGINT)).start()
        try:
            comm.allreduce(value)
        except KeyboardInterrupt:
            return "interrupted"
        return "not interrupted"
    time.sleep(3)
    try:  # the op rank 0 published before the interrupt may still complete here (as over the rings); not the next
        for _ in range(2):
            comm.allreduce(value)
    except CollectiveError as exc:
        return f"CollectiveError: {'rank 0 was interrupted' in str(exc)}"
    return "no error"


@needs_module
def test_ctrl_c_ends_a_wait_and_the_peer_learns_it(ranks):
    outcomes = ranks(scenario_interrupt, 2, timeout_s=60.0, join_s=60.0)
    assert [outcomes[r].value for r in range(2)] == ["interrupted", "CollectiveError: True"], outcomes


def scenario_paths(rank: int, size: int) -> tuple[str, float]:
    comm = collective.current()
    value = np.full(8, float(rank + 1))
    comm.allreduce(value)
    return comm.small_path, float(value[0])


def test_one_rank_without_the_compiled_path_keeps_the_host_on_python(ranks):
    outcomes = ranks(scenario_paths, 3, options=lambda r: CollectiveOptions(native=r != 1))
    assert [outcomes[r].value for r in range(3)] == [("shm", 6.0)] * 3


NO_MODULE = """
import logging, sys
sys.modules["hopsml.collective._fastshm"] = None   # as an install without a C compiler: the import fails
logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(message)s")
from hopsml.collective import native
print("available", native.available(), native.available())
"""


def test_without_the_module_the_python_path_is_said_once():
    done = subprocess.run([sys.executable, "-c", NO_MODULE], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "available False False" in done.stdout
    assert done.stderr.count("the compiled same-host path is missing") == 1, done.stderr
