"""hopsml.collective with 2, 3 and 4 real rank processes on 127.0.0.1 (no Spark), and its single-process parts.

Functions named `scenario_*` run inside every rank; they get (rank, size, ...) and use the module-level
collectives, as training code does. Each rank builds every rank's input from a seed, so it checks its own
result against numpy without shipping large arrays back to the test.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from hopsml import collective
from hopsml.cluster import auth
from hopsml.collective import protocol, ring
from hopsml.collective.communicator import SMALL_BYTES
from hopsml.collective.options import CollectiveOptions
from hopsml.collective.timeout import TIMEOUT_ENV, resolve_timeout
from hopsml.errors import AuthenticationError, CollectiveError, HopsmlError, NotInRunError, SettingsError

SIZES = (0, 1, 3, 1000003)
DTYPES = (np.float32, np.float64, np.int64)
OPS = ("sum", "mean", "min", "max")


def rank_input(rank: int, n: int, dtype: type, salt: int = 0) -> np.ndarray:
    rng = np.random.default_rng(1000 * rank + 17 * n + salt)
    if np.dtype(dtype).kind == "f":
        return rng.standard_normal(n).astype(dtype)
    return rng.integers(-1000, 1000, n).astype(dtype)


def expected(inputs: list[np.ndarray], op: str) -> np.ndarray:
    acc = inputs[0].copy()
    for x in inputs[1:]:
        {"sum": np.add, "mean": np.add, "min": np.minimum, "max": np.maximum}[op](acc, x, out=acc)
    if op == "mean":
        (np.floor_divide if acc.dtype.kind in "iu" else np.divide)(acc, len(inputs), out=acc)
    return acc


def close(actual: np.ndarray, wanted: np.ndarray) -> bool:
    if actual.dtype != wanted.dtype or actual.shape != wanted.shape:
        return False
    if actual.dtype.kind == "f":
        return bool(np.allclose(actual, wanted, rtol=1e-5, atol=1e-5))
    return bool(np.array_equal(actual, wanted))


def digest(arrays: list[np.ndarray]) -> str:
    import hashlib
    h = hashlib.sha256()
    for a in arrays:
        h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()


def assert_all_ok(outcomes: dict, size: int) -> None:
    assert sorted(outcomes) == list(range(size)), outcomes
    for outcome in outcomes.values():
        assert outcome.ok, f"rank {outcome.rank} raised {outcome.error_type}: {outcome.error}"


# scenarios that run inside each rank


def scenario_allreduce_matrix(rank: int, size: int) -> tuple[list[str], str]:
    assert collective.rank() == rank and collective.size() == size
    failures, results = [], []
    for n in SIZES:
        for dtype in DTYPES:
            for op in OPS:
                mine = rank_input(rank, n, dtype)
                out = collective.allreduce(mine, op=op)
                if out is not mine:
                    failures.append(f"{n} {dtype.__name__} {op}: not in place")
                want = expected([rank_input(r, n, dtype) for r in range(size)], op)
                if not close(out, want):
                    failures.append(f"{n} {dtype.__name__} {op}: wrong result")
                results.append(out)
    return failures, digest(results)


def scenario_allreduce_shapes(rank: int, size: int) -> list[str]:
    failures = []
    # 2-D, non-contiguous, 0-d, and other dtypes
    a = np.arange(12, dtype=np.float32).reshape(3, 4) * (rank + 1)
    collective.allreduce(a)
    if not np.allclose(a, np.arange(12, dtype=np.float32).reshape(3, 4) * sum(range(1, size + 1))):
        failures.append("2-D")
    base = np.arange(40.0).reshape(8, 5) + rank
    view = base[::2, 1:4]
    collective.allreduce(view, op="max")
    if not np.array_equal(base[::2, 1:4], (np.arange(40.0).reshape(8, 5) + size - 1)[::2, 1:4]):
        failures.append("non-contiguous view")
    if not np.array_equal(base[1::2], (np.arange(40.0).reshape(8, 5) + rank)[1::2]):
        failures.append("non-contiguous view: wrote outside the view")
    scalar = collective.allreduce(np.array(rank + 1.5), op="min")
    if scalar.shape != () or float(scalar) != 1.5:
        failures.append("0-d")
    for dtype in (np.int32, np.uint8, np.float16, np.complex64, np.bool_):
        x = (np.arange(1000) % 3 == rank % 3).astype(dtype)
        want = expected([(np.arange(1000) % 3 == r % 3).astype(dtype) for r in range(size)], "max")
        if not np.array_equal(collective.allreduce(x, op="max"), want):
            failures.append(f"{np.dtype(dtype).name}")
    listed = collective.allreduce([1, 2, 3])  # not an array: a new array is returned
    if not np.array_equal(listed, np.array([1, 2, 3]) * size):
        failures.append("list input")
    return failures


def scenario_fused(rank: int, size: int) -> tuple[list[str], str]:
    failures, results = [], []
    shapes = [((3,), np.float32), ((2, 5), np.float64), ((), np.float32), ((0,), np.int64), ((7, 1, 3), np.int64),
              ((4,), np.float64), ((257,), np.float32)]
    for big in (False, True):
        specs = shapes + ([((SMALL_BYTES // 4 + 12345,), np.float32), ((99999,), np.int64)] if big else [])
        for op in OPS:
            arrays = [rank_input(rank, int(np.prod(s)), d, salt=i).reshape(s) for i, (s, d) in enumerate(specs)]
            originals = list(arrays)
            out = collective.allreduce_many(arrays, op=op)
            for i, ((s, d), got) in enumerate(zip(specs, out)):
                if got is not originals[i]:
                    failures.append(f"array {i}: not in place")
                want = expected([rank_input(r, int(np.prod(s)), d, salt=i).reshape(s) for r in range(size)], op)
                if not close(got, want):
                    failures.append(f"big={big} op={op} array {i} {np.dtype(d).name}{list(s)}: wrong result")
            results.extend(out)
    if collective.allreduce_many([]) != []:
        failures.append("empty list")
    return failures, digest(results)


def scenario_broadcast_allgather_barrier(rank: int, size: int) -> list[str]:
    failures = []
    root = size - 1
    for n in (0, 5, 1000003):
        data = np.arange(n, dtype=np.float64) * 3 if rank == root else np.full(n, -1.0)
        out = collective.broadcast(data, root=root)
        if out is not data or not np.array_equal(data, np.arange(n, dtype=np.float64) * 3):
            failures.append(f"broadcast {n}")
    grid = np.zeros((6, 4), dtype=np.int64) if rank != 1 else np.arange(24).reshape(6, 4)
    collective.broadcast(grid[:, ::2], root=1)
    if not np.array_equal(grid[:, ::2], np.arange(24).reshape(6, 4)[:, ::2]):
        failures.append("non-contiguous broadcast")
    gathered = collective.allgather({"rank": rank, "name": f"worker-{rank}", "payload": list(range(rank))})
    if gathered != [{"rank": r, "name": f"worker-{r}", "payload": list(range(r))} for r in range(size)]:
        failures.append(f"allgather: {gathered}")
    big = collective.allgather(bytes([rank]) * (200_000 + rank))
    if big != [bytes([r]) * (200_000 + r) for r in range(size)]:
        failures.append("allgather of large objects")
    if collective.allgather(None) != [None] * size:
        failures.append("allgather None")
    for _ in range(3):
        collective.barrier()
    return failures


def _expect_error(failures: list[str], errors: list[str], what: str, call: object) -> None:
    try:
        call()
    except CollectiveError as exc:
        errors.append(str(exc))
    else:
        failures.append(f"{what}: no CollectiveError")


def scenario_mismatches(rank: int, size: int) -> tuple[list[str], list[str]]:
    failures: list[str] = []
    errors: list[str] = []
    n = 3 if rank != 1 else 4
    _expect_error(failures, errors, "shape", lambda: collective.allreduce(np.ones(n, np.float32)))
    dtype = np.float32 if rank != 2 % size else np.float64
    _expect_error(failures, errors, "dtype", lambda: collective.allreduce(np.ones(10, dtype)))
    big = 1_000_000 + (rank == 1)
    _expect_error(failures, errors, "large shape", lambda: collective.allreduce(np.ones(big, np.float32)))
    op = "max" if rank == 0 else "sum"
    _expect_error(failures, errors, "op", lambda: collective.allreduce(np.ones(10), op=op))
    _expect_error(failures, errors, "collective",
                  lambda: collective.barrier() if rank == 0 else collective.allreduce(np.ones(2)))
    bad_op = "average" if rank == 1 else "sum"
    _expect_error(failures, errors, "invalid op", lambda: collective.allreduce(np.ones(2), op=bad_op))
    shapes = [(2,), (3,)] if rank != 0 else [(2,), (4,)]
    _expect_error(failures, errors, "fused",
                  lambda: collective.allreduce_many([np.ones(s) for s in shapes]))
    _expect_error(failures, errors, "broadcast root",
                  lambda: collective.broadcast(np.ones(3), root=rank % 2))
    # after disagreements the communicator is still in step
    x = collective.allreduce(np.full(5, float(rank)))
    if not np.array_equal(x, np.full(5, float(sum(range(size))))):
        failures.append("allreduce after mismatches")
    return failures, errors


def scenario_killed(rank: int, size: int, victim: int) -> str:
    data = np.ones(2_000_000, dtype=np.float32)
    for i in range(100_000):
        if rank == victim and i == 3:
            # die from another thread while the main thread is inside the collective
            threading.Thread(target=lambda: (time.sleep(0.005), os.kill(os.getpid(), signal.SIGKILL))).start()
        collective.allreduce(data, op="max")
    return "finished without noticing the dead rank"


def scenario_stall(rank: int, size: int) -> str:
    if rank == 1:
        time.sleep(3.0)  # alive but not taking part: the others time out
    for _ in range(2):  # rank 1 may still complete the first: rank 0's data reached it before rank 0 gave up
        collective.allreduce(np.ones(10))
    return "no error"


def scenario_sum_once(rank: int, size: int) -> float:
    return float(collective.allreduce(np.full(1000, rank + 1.0))[0])


# multi-process tests


@pytest.mark.parametrize("size", [2, 3, 4])
def test_allreduce_ops_dtypes_sizes(ranks, size):
    outcomes = ranks(scenario_allreduce_matrix, size)
    assert_all_ok(outcomes, size)
    for outcome in outcomes.values():
        assert outcome.value[0] == []
    assert len({o.value[1] for o in outcomes.values()}) == 1, "ranks got different bits"


@pytest.mark.parametrize("size", [2, 3])
def test_allreduce_shapes_and_other_dtypes(ranks, size):
    outcomes = ranks(scenario_allreduce_shapes, size)
    assert_all_ok(outcomes, size)
    for outcome in outcomes.values():
        assert outcome.value == []


@pytest.mark.parametrize("size", [2, 3, 4])
def test_allreduce_many_fuses_mixed_shapes_and_dtypes(ranks, size):
    outcomes = ranks(scenario_fused, size)
    assert_all_ok(outcomes, size)
    for outcome in outcomes.values():
        assert outcome.value[0] == []
    assert len({o.value[1] for o in outcomes.values()}) == 1, "ranks got different bits"


@pytest.mark.parametrize("size", [2, 4])
def test_broadcast_allgather_barrier(ranks, size):
    outcomes = ranks(scenario_broadcast_allgather_barrier, size)
    assert_all_ok(outcomes, size)
    for outcome in outcomes.values():
        assert outcome.value == []


def test_mismatches_raise_on_every_rank(ranks):
    size = 3
    outcomes = ranks(scenario_mismatches, size)
    assert_all_ok(outcomes, size)
    for outcome in outcomes.values():
        failures, errors = outcome.value
        assert failures == []
        shape, dtype, large, op, which, invalid, fused, root = errors
        assert "rank 1: float32[4]" in shape and "ranks 0, 2: float32[3]" in shape
        assert "rank 2: float64[10]" in dtype and "ranks 0, 1: float32[10]" in dtype
        assert "rank 1: float32[1000001]" in large
        assert "rank 0: 'max'" in op and "ranks 1, 2: 'sum'" in op
        assert "rank 0: barrier #5" in which and "ranks 1, 2: allreduce #5" in which
        assert "rank 1" in invalid and "'average'" in invalid
        assert "rank 0: 2 arrays: float64[2], float64[4]" in fused
        assert "ranks 0, 2: 0" in root and "rank 1: 1" in root
    assert len({tuple(o.value[1]) for o in outcomes.values()}) == 1, "ranks raised different messages"


@pytest.mark.parametrize("size,victim", [(2, 1), (3, 1), (4, 2)])
def test_killed_rank_fails_survivors_naming_it(ranks, size, victim):
    outcomes = ranks(scenario_killed, size, victim, timeout_s=60.0)
    assert victim not in outcomes, "the victim should have died"
    assert sorted(outcomes) == [r for r in range(size) if r != victim]
    for outcome in outcomes.values():
        assert outcome.error_type == "CollectiveError", outcome
        assert f"rank {victim}" in outcome.error
        assert "allreduce #" in outcome.error


def test_stalled_rank_times_out(ranks):
    outcomes = ranks(scenario_stall, 2, timeout_s=1.0)
    assert outcomes[0].error_type == "CollectiveError"
    assert "timed out" in outcomes[0].error and "rank 1" in outcomes[0].error
    assert outcomes[1].error_type == "CollectiveError"
    assert "rank 0" in outcomes[1].error


def test_unauthenticated_connections_are_refused(ranks):
    attempts: list[BaseException | None] = []
    threads: list[threading.Thread] = []
    silent: list[socket.socket] = []

    def attack(addresses: list[str]) -> None:
        host, port = addresses[0].rsplit(":", 1)
        wrong = socket.create_connection((host, int(port)), timeout=10)
        silent.append(socket.create_connection((host, int(port)), timeout=10))  # never says anything

        def impostor() -> None:
            try:
                auth.respond(wrong, b"not the experiment's secret")
                attempts.append(None)
            except (AuthenticationError, OSError) as exc:
                attempts.append(exc)
            finally:
                wrong.close()

        threads.append(threading.Thread(target=impostor))
        threads[-1].start()

    try:
        outcomes = ranks(scenario_sum_once, 2, before_start=attack)
    finally:
        for thread in threads:
            thread.join(timeout=30)
        for sock in silent:
            sock.close()
    assert_all_ok(outcomes, 2)
    assert [o.value for o in outcomes.values()] == [3.0, 3.0]
    assert len(attempts) == 1 and attempts[0] is not None, "the impostor must not pass the challenge"
    refused = [line for line in outcomes[0].logs if "refused a connection" in line]
    assert refused and "HMAC" in refused[0], outcomes[0].logs


# single-process tests


def test_collectives_outside_a_run_say_where_they_work():
    assert not collective.is_initialized()
    with pytest.raises(NotInRunError, match="experiment.allreduce"):
        collective.allreduce(np.ones(3))
    with pytest.raises(HopsmlError, match="collective.init"):
        collective.rank()


def test_single_rank_world_is_a_no_op():
    listener, address = collective.listen("127.0.0.1")
    with collective.Communicator.connect(0, 1, [address], listener, b"secret") as comm, collective.use(comm):
        data = np.arange(5.0)
        assert collective.allreduce(data, op="mean") is data
        assert np.array_equal(data, np.arange(5.0))
        assert collective.allreduce_many([data]) == [data]
        assert collective.broadcast(data) is data
        assert collective.allgather({"a": 1}) == [{"a": 1}]
        collective.barrier()
        assert (collective.rank(), collective.size()) == (0, 1)
        with pytest.raises(CollectiveError, match="op 'median'"):
            collective.allreduce(data, op="median")
    assert not collective.is_initialized()
    assert listener.fileno() == -1, "connect owns and closes the listener"


def test_init_installs_for_the_process_until_shutdown():
    listener, address = collective.listen("127.0.0.1")
    comm = collective.init(0, 1, [address], listener, b"secret")
    try:
        assert collective.current() is comm and collective.size() == 1
        with pytest.raises(HopsmlError, match="already"):
            collective.init(0, 1, [], None, b"secret")
    finally:
        collective.shutdown()
    assert not collective.is_initialized()


def test_rendezvous_times_out_naming_the_missing_rank():
    listener, address = collective.listen("127.0.0.1")
    absent, absent_address = collective.listen("127.0.0.1")  # listens, but no rank behind it ever dials
    try:
        with pytest.raises(CollectiveError, match=r"timed out .*ranks \[1\] never connected"):
            collective.Communicator.connect(0, 2, [address, absent_address], listener, b"secret", timeout_s=0.5)
    finally:
        absent.close()


def test_connect_validates_its_arguments():
    with pytest.raises(SettingsError, match="rank"):
        collective.Communicator.connect(2, 2, ["a:1", "b:2"], None, b"s")
    with pytest.raises(SettingsError, match="addresses"):
        collective.Communicator.connect(0, 3, ["a:1"], None, b"s")


def test_connect_follows_the_options_it_is_given(monkeypatch):
    monkeypatch.setenv(TIMEOUT_ENV, "99")
    listener, address = collective.listen("127.0.0.1")
    options = CollectiveOptions(timeout_s=7.0, shared_memory=False, host_id="h", gpu_mode="host")
    with collective.Communicator.connect(0, 1, [address], listener, b"s", options=options) as comm:
        assert comm.options == options and comm.timeout_s == 7.0
    listener, address = collective.listen("127.0.0.1")
    with collective.Communicator.connect(0, 1, [address], listener, b"s", 3, options=options) as comm:
        assert comm.timeout_s == 3.0 and comm.options.gpu_mode == "host", "timeout_s wins over the options'"
    listener, address = collective.listen("127.0.0.1")
    with collective.Communicator.connect(0, 1, [address], listener, b"s") as comm:
        assert comm.timeout_s == 99.0, "without options: this process's settings"
    with pytest.raises(SettingsError, match="CollectiveOptions"):
        collective.Communicator.connect(0, 1, [], None, b"s", options={"timeout_s": 3})
    for bad in ({"timeout_s": 0}, {"timeout_s": float("nan")}, {"timeout_s": True}, {"shared_memory": "no"},
                {"gpu_mode": "fast"}):
        with pytest.raises(SettingsError):
            CollectiveOptions(**bad)


def test_timeout_setting(monkeypatch):
    monkeypatch.delenv(TIMEOUT_ENV, raising=False)
    assert resolve_timeout() == collective.DEFAULT_TIMEOUT_S
    monkeypatch.setenv(TIMEOUT_ENV, "12.5")
    assert resolve_timeout() == 12.5
    assert resolve_timeout(3) == 3.0
    monkeypatch.setenv(TIMEOUT_ENV, "soon")
    with pytest.raises(SettingsError, match=TIMEOUT_ENV):
        resolve_timeout()
    with pytest.raises(SettingsError, match="positive"):
        resolve_timeout(-1)


def test_chunk_segments_cover_every_element_once():
    for count, size in [(0, 2), (1, 4), (3, 4), (10, 3), (1000003, 4)]:
        chunks = ring.chunk_segments(count, size, 4, 64 << 10)
        assert len(chunks) == size and len({len(c) for c in chunks}) == 1
        covered = [i for chunk in chunks for a, b in chunk for i in range(a, b)] if count < 100 else None
        if covered is not None:
            assert covered == list(range(count))
        assert chunks[0][0][0] == 0 and chunks[-1][-1][1] == count


def test_header_check_names_ranks_and_values():
    def header(desc: str, seq: int = 4) -> protocol.Header:
        return protocol.Header("allreduce", seq, desc, "sum", -1, 12)

    protocol.check_headers([header("float32[3]")] * 3)
    with pytest.raises(CollectiveError, match=r"data .*ranks 0, 2: float32\[3\]; rank 1: int64\[3\]"):
        protocol.check_headers([header("float32[3]"), header("int64[3]"), header("float32[3]")])
    packed = header("float64[2, 2]").pack()
    parsed, desc_len = protocol.Header.unpack_fixed(packed[:protocol.FIXED_SIZE])
    assert desc_len == len("float64[2, 2]") and parsed.seq == 4 and parsed.op == "sum"
    assert protocol.Header.unpack_fixed(b"x" * protocol.FIXED_SIZE) is None


def test_imports_without_pyspark_or_cupy():
    code = ("import sys\n"
            "sys.modules['pyspark'] = None\n"
            "sys.modules['cupy'] = None\n"
            "import hopsml.collective as c\n"
            "assert 'pyspark' not in sys.modules or sys.modules['pyspark'] is None\n"
            "print(c.allreduce.__name__)\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "allreduce"
