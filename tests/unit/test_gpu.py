"""The GPU path's decisions and waits, without a GPU: the path agreement, the bounded NCCL wait, peer watching."""

from __future__ import annotations

import os
import socket

import pytest

from hopsml.cluster.auth import ConnectionKeys
from hopsml.collective import gpu
from hopsml.collective.options import CollectiveOptions
from hopsml.collective.transport import Link, TcpPeer
from hopsml.errors import CollectiveError, SettingsError


class FakeComm:
    """The two methods of cupy.cuda.nccl.NcclCommunicator that the wait uses."""

    def __init__(self, error_after: int | None = None) -> None:
        self.checks = 0
        self.aborted = False
        self.error_after = error_after

    def check_async_error(self) -> None:
        self.checks += 1
        if self.error_after is not None and self.checks > self.error_after:
            raise RuntimeError("NCCL_ERROR_REMOTE_ERROR: remote process exited or there was a network error")

    def abort(self) -> None:
        self.aborted = True


def after(n: int):
    """A done() that becomes true on its n-th call."""
    calls = iter(range(n, 0, -1))
    return lambda: next(calls, 0) <= 1


def test_wait_returns_when_the_stream_completes_and_keeps_the_communicator():
    comm = FakeComm()
    gpu.wait_for(after(5), comm, 30.0, lambda: None, "NCCL allreduce")
    assert comm.checks == 4 and not comm.aborted


def test_an_asynchronous_error_aborts_and_says_what_nccl_said():
    comm = FakeComm(error_after=2)
    with pytest.raises(gpu.NcclFailure, match="NCCL reported an error during NCCL allreduce: .*REMOTE_ERROR") as info:
        gpu.wait_for(lambda: False, comm, 30.0, lambda: None, "NCCL allreduce")
    assert comm.aborted and info.value.peer is None


def test_the_timeout_aborts_a_wait_that_never_completes():
    comm = FakeComm()
    with pytest.raises(gpu.NcclFailure, match=r"NCCL broadcast did not complete within 0\.05 s"):
        gpu.wait_for(lambda: False, comm, 0.05, lambda: None, "NCCL broadcast")
    assert comm.aborted


def test_a_lost_peer_aborts_and_is_named():
    comm = FakeComm()
    with pytest.raises(gpu.NcclFailure, match="rank 3 closed its connections") as info:
        gpu.wait_for(lambda: False, comm, 30.0, lambda: 3, "NCCL allreduce")
    assert comm.aborted and info.value.peer == 3


def test_an_operation_that_completes_within_the_grace_is_not_a_failure():
    # a peer that finished the same collective first may close before this rank sees its stream complete
    comm = FakeComm()
    gpu.wait_for(after(50), comm, 30.0, lambda: 1, "NCCL allreduce")
    assert not comm.aborted


def test_the_set_up_wait_has_no_communicator_to_abort():
    with pytest.raises(gpu.NcclFailure, match="did not complete"):
        gpu.wait_for(lambda: False, None, 0.02, lambda: None, "the NCCL set-up of rank 0")


def offer(device: str, nccl: bool = True, mode: str = "auto") -> dict:
    return {"nccl": nccl, "device": device, "mode": mode, "uid": None}


def test_distinct_gpus_use_nccl():
    assert gpu.choose_path([offer("GPU-a"), offer("GPU-b"), offer("GPU-c")]) == ""


def test_shared_gpus_fall_back_to_the_host_path_and_say_which_ranks():
    reason = gpu.choose_path([offer("GPU-a"), offer("GPU-b"), offer("GPU-a"), offer("GPU-b")])
    assert "ranks 0, 2 share one GPU (GPU-a)" in reason and "ranks 1, 3 share one GPU (GPU-b)" in reason


def test_forcing_nccl_on_shared_gpus_is_an_error_that_says_what_to_do():
    with pytest.raises(CollectiveError, match=r"ranks 0, 1 share one GPU .*HOPSML_GPU_COLLECTIVE=nccl.*own GPU"):
        gpu.choose_path([offer("GPU-a", mode="nccl"), offer("GPU-a", mode="nccl")])


def test_a_rank_without_nccl_means_host_path_unless_nccl_is_forced():
    assert "rank(s) 1 have a cupy without NCCL" in gpu.choose_path([offer("GPU-a"), offer("GPU-b", nccl=False)])
    with pytest.raises(CollectiveError, match="install a cupy build with NCCL"):
        gpu.choose_path([offer("GPU-a", mode="nccl"), offer("GPU-b", nccl=False, mode="nccl")])


def test_host_mode_and_disagreeing_modes():
    assert gpu.choose_path([offer("GPU-a", mode="host"), offer("GPU-b", mode="host")]) == "HOPSML_GPU_COLLECTIVE=host"
    with pytest.raises(CollectiveError, match="rank 0: 'auto', rank 1: 'nccl'"):
        gpu.choose_path([offer("GPU-a"), offer("GPU-b", mode="nccl")])


def test_collective_mode_setting(monkeypatch):
    """The GPU mode is a setting, fixed in the options a communicator is connected with."""
    monkeypatch.delenv(gpu.MODE_ENV, raising=False)
    assert CollectiveOptions.resolve().gpu_mode == "auto"
    monkeypatch.setenv(gpu.MODE_ENV, " NCCL ")
    assert CollectiveOptions.resolve().gpu_mode == "nccl"
    monkeypatch.setenv(gpu.MODE_ENV, "fast")
    with pytest.raises(SettingsError, match=r"gpu_collective='fast' \(from environment variable "
                                            r"HOPSML_GPU_COLLECTIVE\) is invalid: must be one of auto, nccl, host"):
        CollectiveOptions.resolve()
    with pytest.raises(SettingsError, match="gpu_mode is 'fast'; pass one of auto, nccl, host"):
        CollectiveOptions(gpu_mode="fast")


def tcp_pair() -> tuple[socket.socket, socket.socket]:
    with socket.create_server(("127.0.0.1", 0)) as server:
        client = socket.create_connection(server.getsockname())
        accepted, _ = server.accept()
    return client, accepted


def link_pair(a: socket.socket, b: socket.socket) -> tuple[Link, Link]:
    """Both ends of one connection, with matching message keys."""
    one, two = os.urandom(16), os.urandom(16)
    return Link(a, ConnectionKeys(one, two)), Link(b, ConnectionKeys(two, one))


def test_a_peer_is_signalled_by_an_abort_notice_or_by_closing():
    pairs = [tcp_pair() for _ in range(4)]
    (data_a, data_b), (ctrl_a, ctrl_b), (data_c, data_d), (ctrl_c, ctrl_d) = pairs
    (data_la, data_lb), (ctrl_la, ctrl_lb) = link_pair(data_a, data_b), link_pair(ctrl_a, ctrl_b)
    mine, theirs = TcpPeer(1, data_la, ctrl_la, 5.0), TcpPeer(0, data_lb, ctrl_lb, 5.0)
    assert not mine.signalled()
    theirs.send_notice("rank 0 failed")
    assert mine.signalled() and mine.read_notice() == "rank 0 failed"
    other = TcpPeer(2, link_pair(data_c, data_d)[0], link_pair(ctrl_c, ctrl_d)[0], 5.0)
    assert not other.signalled()
    ctrl_d.close()
    assert other.signalled() and other.read_notice() is None
    for sock in (data_d, data_a, data_b, ctrl_a, ctrl_b, data_c, ctrl_c):
        sock.close()
