"""collective.allreduce_async in real rank processes: the same bits as allreduce, call order kept, errors via wait()."""

from __future__ import annotations

import os
import signal
import threading
import time

import numpy as np
import pytest

from hopsml import collective

SIZES = (0, 1, 3, 1000, 100_003, 1_000_003)
DTYPES = (np.float32, np.float64, np.int64)


def _input(rank: int, n: int, dtype: type, salt: int) -> np.ndarray:
    rng = np.random.default_rng(1000 * rank + 17 * n + salt)
    if np.dtype(dtype).kind == "f":
        return rng.standard_normal(n).astype(dtype)
    return rng.integers(-1000, 1000, n).astype(dtype)


def scenario_equal(rank: int, size: int) -> list[str]:
    wrong = []
    cases = [(n, d, op) for n in SIZES for d in DTYPES for op in ("sum", "mean", "max")]
    arrays = [_input(rank, n, d, i) for i, (n, d, _) in enumerate(cases)]
    handles = [collective.allreduce_async(a, op) for a, (_, _, op) in zip(arrays, cases)]
    for handle, array in reversed(list(zip(handles, arrays))):  # waited for out of order: results stay in order
        if handle.wait() is not array:
            wrong.append(f"{handle.label}: not reduced in place")
    for i, (n, d, op) in enumerate(cases):
        wanted = collective.allreduce(_input(rank, n, d, i), op)
        if not (handles[i].done() and arrays[i].tobytes() == wanted.tobytes()):
            wrong.append(f"{n} x {np.dtype(d).name} {op}: async differs from sync")
    return wrong


def scenario_mixed(rank: int, size: int) -> list[float]:
    if rank == 1:
        time.sleep(0.2)  # one rank late: the order, not the timing, must decide
    first = collective.allreduce_async(np.full(10, rank + 1.0))
    big = collective.allreduce_async(np.full(300_000, 10.0 * (rank + 1)))
    synced = collective.allreduce(np.full(5, 100.0 * (rank + 1)))  # waits for both first
    assert first.done() and big.done()
    last = collective.allreduce_async(np.full(7, 1000.0 * (rank + 1)))
    root = collective.broadcast(np.full(3, float(rank)), root=1)
    return [float(first.wait()[0]), float(big.wait()[-1]), float(synced[0]), float(last.wait()[0]), float(root[0])]


def scenario_killed(rank: int, size: int) -> str:
    data = np.ones(2_000_000, dtype=np.float32)
    for i in range(100_000):
        if rank == 1 and i == 3:
            threading.Thread(target=lambda: (time.sleep(0.005), os.kill(os.getpid(), signal.SIGKILL))).start()
        collective.allreduce_async(data, op="max").wait()
    return "finished without noticing the dead rank"


def scenario_mismatch(rank: int, size: int) -> tuple[str, float]:
    handle = collective.allreduce_async(np.ones(4 + rank))
    try:
        handle.wait()
        message = "no error"
    except Exception as exc:  # noqa: BLE001 - compared with the other rank's
        message = f"{type(exc).__name__}: {exc}"
    return message, float(collective.allreduce(np.ones(3))[0])  # still usable after a mismatch


def scenario_wait_runs_out(rank: int, size: int, signal_file: str) -> tuple[str, list[float]]:
    """Rank 1 joins only after rank 0's bounded wait has run out (it waits for the file rank 0 writes then)."""
    if rank == 1:
        while not os.path.exists(signal_file):
            time.sleep(0.01)
    handle = collective.allreduce_async(np.full(6, rank + 1.0))
    message = ""
    if rank == 0:
        try:
            handle.wait(timeout=0.2)
        except Exception as exc:  # noqa: BLE001 - the test reads it
            message = f"{type(exc).__name__}: {exc} (done: {handle.done()})"
        with open(signal_file, "w") as file:
            file.write("late")
    return message, handle.wait().tolist()  # the operation went on: waiting again gives its result


def scenario_close_with_queued(rank: int, size: int) -> list[str]:
    """Rank 0 closes its communicator with one all-reduce running (rank 1 is not there yet) and one queued."""
    collective.allreduce_async(np.ones(8)).wait()
    if rank == 1:
        time.sleep(0.5)
        return []
    running = collective.allreduce_async(np.ones(8))
    queued = collective.allreduce_async(np.ones(8))
    collective.current().close()
    outcomes = []
    for handle in (running, queued):
        try:
            handle.wait(timeout=0)
            outcomes.append("no error")
        except Exception as exc:  # noqa: BLE001 - the test reads it
            outcomes.append(f"{type(exc).__name__}: {exc}")
    try:
        collective.allreduce_async(np.ones(8))
        outcomes.append("accepted after close")
    except Exception as exc:  # noqa: BLE001 - the test reads it
        outcomes.append(f"{type(exc).__name__}: {exc}")
    return outcomes


@pytest.mark.parametrize("size", [2, 3])
def test_async_results_are_the_sync_bits(ranks, size):
    outcomes = ranks(scenario_equal, size, join_s=180)
    for outcome in outcomes.values():
        assert outcome.ok, (outcome.error_type, outcome.error)
        assert outcome.value == []


def test_mixed_sync_and_async_calls_keep_their_order(ranks):
    outcomes = ranks(scenario_mixed, 2)
    for outcome in outcomes.values():
        assert outcome.ok, (outcome.error_type, outcome.error)
        assert outcome.value == [3.0, 30.0, 300.0, 3000.0, 1.0]


def test_a_dead_peer_is_raised_by_wait(ranks):
    outcomes = ranks(scenario_killed, 2, timeout_s=60.0)
    assert 1 not in outcomes
    assert outcomes[0].error_type == "CollectiveError", outcomes[0]
    assert "rank 1" in outcomes[0].error and "allreduce #" in outcomes[0].error


def test_a_mismatch_is_raised_by_wait_on_every_rank(ranks):
    outcomes = ranks(scenario_mismatch, 2)
    messages = {outcome.value[0] for outcome in outcomes.values()}
    assert len(messages) == 1 and next(iter(messages)).startswith("CollectiveError"), messages
    assert "float64[4]" in next(iter(messages)) and "float64[5]" in next(iter(messages))
    assert [outcome.value[1] for outcome in outcomes.values()] == [2.0, 2.0]


def test_a_bounded_wait_that_runs_out_leaves_the_operation_going(ranks, tmp_path):
    outcomes = ranks(scenario_wait_runs_out, 2, str(tmp_path / "rank0-gave-up"))
    for outcome in outcomes.values():
        assert outcome.ok, (outcome.error_type, outcome.error)
        assert outcome.value[1] == [3.0] * 6
    message = outcomes[0].value[0]
    assert message.startswith("CollectiveError: allreduce_async #1 (rank 0) did not finish within 0.2 s"), message
    assert "call wait() again" in message and message.endswith("(done: False)")


def test_closing_with_handles_pending_fails_them_and_returns(ranks):
    outcomes = ranks(scenario_close_with_queued, 2, timeout_s=30.0)
    assert outcomes[1].ok, (outcomes[1].error_type, outcomes[1].error)
    assert outcomes[0].ok, (outcomes[0].error_type, outcomes[0].error)
    running, queued, after = outcomes[0].value
    assert running.startswith("CollectiveError: "), running  # closed before it ran, or its peer gone with the close
    assert queued == ("CollectiveError: allreduce_async #3 (rank 0): the communicator was closed before this "
                      "asynchronous all-reduce ran"), queued
    assert after.startswith("CollectiveError: allreduce_async") and "the communicator is closed" in after, after
