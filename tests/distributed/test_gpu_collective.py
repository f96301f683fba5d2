"""The GPU path's agreement and failure handling with 2 real rank processes and real TCP, on a fake cupy.

There is no GPU here, so each rank installs tests/distributed/fake_cupy.py (arrays in host memory, an NCCL
communicator that completes, hangs, reports an asynchronous error or kills its process on demand). What
is real: the ranks, their sockets, the agreement on NCCL vs the host-staged path, the header checks, the
waits, the abort and the errors every rank raises. NCCL itself is exercised by bench/gpu_smoke.py on a GPU.
"""

from __future__ import annotations

import numpy as np
import pytest

from hopsml.collective import gpu


def _setup(rank: int, devices: list[str], behaviours: list[str]) -> object:
    import fake_cupy

    return fake_cupy.install(device=devices[rank], behaviour=behaviours[rank])


def mode_env(mode: str):
    """The GPU mode of every rank, set before it connects: the communicator follows its options from then on."""
    return lambda rank: {gpu.MODE_ENV: mode}


def scenario_allreduce(rank: int, size: int, devices: list[str], behaviours: list[str]) -> dict:
    """allreduce and broadcast of device arrays; returns the results and what the fake NCCL saw."""
    from hopsml import collective
    from hopsml.errors import CollectiveError

    state = _setup(rank, devices, behaviours)
    import cupy

    x = cupy.asarray(np.arange(6, dtype=np.float32).reshape(2, 3) + rank)
    y = cupy.asarray(np.full(4, rank, dtype=np.int64))
    outcome: dict = {}
    try:
        collective.allreduce(x[:, ::2], op="sum")  # non-contiguous
        collective.broadcast(y, root=1)
        outcome["x"], outcome["y"] = cupy.asnumpy(x).tolist(), cupy.asnumpy(y).tolist()
    except CollectiveError as exc:
        outcome["error"] = str(exc)
    outcome.update(created=state.created, aborted=state.aborted, calls=list(state.calls))
    return outcome


def test_ranks_on_one_gpu_take_the_host_staged_path(ranks):
    results = ranks(scenario_allreduce, 2, ["GPU-a", "GPU-a"], ["hang", "hang"])
    assert all(r.ok for r in results.values()), results
    for rank, r in results.items():
        value = r.value
        assert "error" not in value, value
        assert value["created"] == 0 and value["calls"] == []  # NCCL was never used
        # columns 0 and 2 (the non-contiguous view) summed over ranks 0 and 1; column 1 is this rank's own
        assert value["x"] == [[1.0, 1.0 + rank, 5.0], [7.0, 4.0 + rank, 11.0]]
        assert value["y"] == [1, 1, 1, 1]
        assert sum("share one GPU" in line and "host memory" in line for line in r.logs) == 1, r.logs


def test_forcing_nccl_on_a_shared_gpu_is_a_clear_error_on_every_rank(ranks):
    results = ranks(scenario_allreduce, 2, ["GPU-a", "GPU-a"], ["complete", "complete"], env=mode_env("nccl"))
    for r in results.values():
        assert r.ok, r
        assert "ranks 0, 1 share one GPU" in r.value["error"] and gpu.MODE_ENV in r.value["error"]
        assert r.value["created"] == 0


def test_own_gpus_use_nccl(ranks):
    results = ranks(scenario_allreduce, 2, ["GPU-a", "GPU-b"], ["complete", "complete"])
    for r in results.values():
        assert r.ok and "error" not in r.value, r
        assert r.value["created"] == 1 and r.value["calls"][1:] == ["allReduce", "bcast"]
        assert not r.value["aborted"]


def test_a_peer_dying_inside_nccl_aborts_the_communicator_instead_of_hanging(ranks):
    results = ranks(scenario_allreduce, 2, ["GPU-a", "GPU-b"], ["hang", "die"], timeout_s=120.0)
    assert 1 not in results  # rank 1's process ended inside its NCCL call
    survivor = results[0]
    assert survivor.ok, survivor
    assert survivor.value["aborted"], survivor.value
    assert "rank 0 lost its connection to rank 1" in survivor.value["error"]


def test_an_asynchronous_nccl_error_aborts_and_names_the_rank_everywhere(ranks):
    results = ranks(scenario_allreduce, 2, ["GPU-a", "GPU-b"], ["error", "hang"], timeout_s=120.0)
    errors = {rank: r.value["error"] for rank, r in results.items()}
    assert all(r.value["aborted"] for r in results.values()), results
    assert errors[0].startswith("rank 0: NCCL reported an error") and "unhandled system error" in errors[0]
    assert "rank 1 learned this from rank 0, which aborted" in errors[1] and "unhandled system error" in errors[1]


def test_a_hung_nccl_operation_ends_at_the_collective_timeout(ranks):
    results = ranks(scenario_allreduce, 2, ["GPU-a", "GPU-b"], ["hang", "hang"], timeout_s=1.5)
    for r in results.values():
        assert r.value["aborted"], r.value
    # whichever rank times out first tells the other one, which then names it
    assert any("did not complete within 1.5 s" in r.value["error"] for r in results.values()), results


@pytest.mark.parametrize("mode", ["host"])
def test_host_mode_never_creates_nccl(ranks, mode):
    results = ranks(scenario_allreduce, 2, ["GPU-a", "GPU-b"], ["hang", "hang"], env=mode_env(mode))
    for r in results.values():
        assert r.ok and r.value["created"] == 0 and r.value["y"] == [1, 1, 1, 1], r


def test_the_gpu_mode_comes_from_the_options_given_at_connect(ranks):
    from hopsml.collective.options import CollectiveOptions

    host = CollectiveOptions(timeout_s=20.0, gpu_mode="host")
    results = ranks(scenario_allreduce, 2, ["GPU-a", "GPU-b"], ["hang", "hang"], env=mode_env("nccl"),
                    options=lambda rank: host)
    for r in results.values():
        assert r.ok and r.value["created"] == 0 and r.value["y"] == [1, 1, 1, 1], r
