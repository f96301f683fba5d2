"""The shared-memory transport between ranks on one host: selection from the host identity, the rings
themselves (wrap-around, elements split at the ring's end, reducing straight out of the ring), the fall
back to TCP between "hosts", and that no segment outlives the ranks, not even a SIGKILLed one."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from own_processes import processes_mapping_segments, processes_of_this_test

from hopsml import collective
from hopsml.cluster.auth import ConnectionKeys
from hopsml.collective import shm
from hopsml.collective.options import CollectiveOptions
from hopsml.collective.transport import Link, PeerLost, TcpPeer

pytestmark = pytest.mark.skipif(not shm.supported(), reason="shared memory for collectives needs Linux on x86-64")


def shm_entries() -> set[str]:
    """hopsml's names in /dev/shm: there should be none, its segments are anonymous (memfd)."""
    return {name for name in os.listdir("/dev/shm") if name.startswith("hopsml-")}


def mapped_segments() -> int:
    """How many distinct shared segments this process maps."""
    with open("/proc/self/maps") as maps:
        return len({line.split()[4] for line in maps if "memfd:hopsml-collective" in line})


def scenario_transports(rank: int, size: int, n: int) -> tuple[list[int], str, list[str]]:
    comm = collective.current()
    failures = []
    for dtype in (np.float32, np.float64, np.int64, np.int8):
        for op in ("sum", "mean", "min", "max"):
            mine = (np.arange(n) % 251 + rank * 3).astype(dtype)
            collective.allreduce(mine, op=op)
            inputs = [(np.arange(n) % 251 + r * 3).astype(dtype) for r in range(size)]
            want = inputs[0].copy()
            for x in inputs[1:]:
                {"sum": np.add, "mean": np.add, "min": np.minimum, "max": np.maximum}[op](want, x, out=want)
            if op == "mean":
                want = (want // size if want.dtype.kind in "iu" else want / size).astype(dtype)
            if not np.allclose(mine, want):
                failures.append(f"{np.dtype(dtype).name} {op}")
    data = np.arange(n, dtype=np.float64) if rank == 1 else np.zeros(n)
    collective.broadcast(data, root=1)
    if not np.array_equal(data, np.arange(n, dtype=np.float64)):
        failures.append("broadcast")
    if collective.allgather(rank) != list(range(size)):
        failures.append("allgather")
    return comm.shared_memory_peers, comm.allreduce_path, failures


def scenario_segments(rank: int, size: int, n: int) -> tuple[list[int], str, list[str], int]:
    return *scenario_transports(rank, size, n), mapped_segments()


@pytest.mark.parametrize("size", [2, 3])
def test_ranks_on_one_host_use_shared_memory(ranks, size):
    before = shm_entries()
    outcomes = ranks(scenario_segments, size, 3_000_001)
    for rank, outcome in outcomes.items():
        assert outcome.ok, outcome
        peers, path, failures, segments = outcome.value
        assert failures == []
        assert peers == [r for r in range(size) if r != rank]
        assert path == "host", "all ranks on one host: large all-reduces go through the host segment"
        assert segments == size, "one segment per peer, one for the host"
    assert shm_entries() <= before, "a shared-memory segment was left behind"


@pytest.mark.parametrize("hosts", [["a", "a", "b", "b"], ["a", "b", "a"], ["a", "b", "b", "a", "c"]])
def test_ranks_on_several_hosts_reduce_hierarchically(ranks, hosts):
    size = len(hosts)
    outcomes = ranks(scenario_transports, size, 1_000_003, env=lambda r: {shm.HOST_ID_ENV: hosts[r]})
    assert sorted(outcomes) == list(range(size))
    for rank, outcome in outcomes.items():
        assert outcome.ok, outcome
        peers, path, failures = outcome.value
        assert failures == []
        assert peers == [r for r in range(size) if r != rank and hosts[r] == hosts[rank]], "TCP between hosts"
        assert path == "hierarchical"


def test_one_rank_per_host_is_a_plain_ring(ranks):
    outcomes = ranks(scenario_transports, 3, 100_003, env=lambda r: {shm.HOST_ID_ENV: f"host-{r}"})
    for outcome in outcomes.values():
        assert outcome.ok, outcome
        assert outcome.value == ([], "ring", [])


def test_shared_memory_can_be_turned_off(ranks):
    outcomes = ranks(scenario_transports, 2, 100_003, env=lambda r: {shm.SHM_ENV: "0"} if r == 1 else {})
    for outcome in outcomes.values():
        assert outcome.ok, outcome
        assert outcome.value == ([], "ring", [])


def test_the_options_given_at_connect_win_over_the_ranks_environment(ranks):
    """The launcher passes the run's options; a rank's own environment (here the opposite) is not read."""
    off = CollectiveOptions(timeout_s=20.0, shared_memory=False)
    outcomes = ranks(scenario_transports, 2, 100_003, env=lambda r: {shm.SHM_ENV: "1"}, options=lambda r: off)
    for outcome in outcomes.values():
        assert outcome.ok, outcome
        assert outcome.value == ([], "ring", [])
    hosts = ["a", "a", "b"]
    outcomes = ranks(scenario_transports, 3, 100_003, env=lambda r: {shm.SHM_ENV: "0", shm.HOST_ID_ENV: "x"},
                     options=lambda r: CollectiveOptions(timeout_s=20.0, host_id=hosts[r]))
    for rank, outcome in outcomes.items():
        assert outcome.ok, outcome
        peers, path, failures = outcome.value
        assert (peers, path, failures) == ([r for r in range(3) if r != rank and hosts[r] == hosts[rank]],
                                           "hierarchical", [])


def scenario_die_in_shm(rank: int, size: int, victim: int, hosts: str | None) -> str:
    import signal
    import time
    data = np.ones(2_000_000, dtype=np.float32)
    if collective.current().allreduce_path != ("hierarchical" if hosts else "host"):
        return "not on the expected path"
    for i in range(100_000):
        if rank == victim and i == 3:
            threading.Thread(target=lambda: (time.sleep(0.005), os.kill(os.getpid(), signal.SIGKILL))).start()
        collective.allreduce(data, op="sum")
    return "finished without noticing the dead rank"


@pytest.mark.parametrize("size,victim,hosts",
                         [(2, 0, None), (3, 1, None), (4, 3, None), (4, 1, "aabb"), (4, 2, "aabb")])
def test_sigkilled_rank_is_named_and_leaves_no_segment(ranks, size, victim, hosts):
    before = shm_entries()
    env = (lambda r: {shm.HOST_ID_ENV: hosts[r]}) if hosts else None
    outcomes = ranks(scenario_die_in_shm, size, victim, hosts, timeout_s=60.0, env=env)
    assert victim not in outcomes, "the victim should have died"
    assert sorted(outcomes) == [r for r in range(size) if r != victim]
    for outcome in outcomes.values():
        assert outcome.error_type == "CollectiveError", outcome
        assert f"rank {victim}" in outcome.error and "allreduce #" in outcome.error
    assert shm_entries() <= before, "a shared-memory segment outlived its ranks"
    assert processes_mapping_segments() == [], "the ranks are gone, and their segments with them"


# A process outside the test's tree that maps a segment named like hopsml's, as another job's rank on the same
# machine does: forked twice, so that it is reparented away from the test; it ends when told to, or after 120 s.
OUTSIDER = """
import mmap, os, sys, time
from pathlib import Path
if os.fork():
    os._exit(0)
fd = os.memfd_create("hopsml-collective", os.MFD_CLOEXEC)
os.ftruncate(fd, 4096)
segment = mmap.mmap(fd, 4096)
folder = Path(sys.argv[1])
(folder / "pid.tmp").write_text(str(os.getpid()))
(folder / "pid.tmp").rename(folder / "pid")
end = time.monotonic() + 120
while not (folder / "stop").exists() and time.monotonic() < end:
    time.sleep(0.05)
"""


def test_segments_of_other_jobs_are_not_counted_as_left_behind(tmp_path):
    subprocess.run([sys.executable, "-c", OUTSIDER, str(tmp_path)], check=True, timeout=60)
    try:
        pid_file = tmp_path / "pid"
        deadline = time.monotonic() + 60  # only so that a broken start fails instead of hanging
        while not pid_file.exists():
            assert time.monotonic() < deadline, "the outside process never started"
            time.sleep(0.05)
        outsider = int(pid_file.read_text())
        assert "memfd:hopsml-collective" in Path(f"/proc/{outsider}/maps").read_text()
        assert outsider not in processes_of_this_test()
        assert outsider not in processes_mapping_segments()
    finally:
        (tmp_path / "stop").touch()


# the rings in one process: two ShmPeers over a real segment, with real TCP peers beside them


def _tcp_pair() -> tuple[socket.socket, socket.socket]:
    with socket.create_server(("127.0.0.1", 0)) as server:
        dialed = socket.create_connection(server.getsockname(), timeout=10)
        accepted, _ = server.accept()
    return dialed, accepted


def _pair(capacity: int, timeout_s: float = 10.0) -> tuple[shm.ShmPeer, shm.ShmPeer]:
    data = _tcp_pair()
    ctrl = _tcp_pair()
    data_keys, ctrl_keys = (os.urandom(16), os.urandom(16)), (os.urandom(16), os.urandom(16))
    tcp_a = TcpPeer(1, Link(data[0], ConnectionKeys(*data_keys)), Link(ctrl[0], ConnectionKeys(*ctrl_keys)),
                 timeout_s)  # rank 0's view of rank 1
    tcp_b = TcpPeer(0, Link(data[1], ConnectionKeys(*data_keys[::-1])), Link(ctrl[1], ConnectionKeys(*ctrl_keys[::-1])),
                 timeout_s)  # rank 1's view of rank 0
    created = shm._create_segment(shm.segment_bytes(capacity))
    try:
        other = shm._open_segment(created.handle, shm.segment_bytes(capacity))
    finally:
        created.release()
    assert other is not None
    return (shm.ShmPeer(tcp_a, created.mapping, capacity, creator=True),
            shm.ShmPeer(tcp_b, other, capacity, creator=False))


def test_ring_wraps_and_reduces_elements_split_at_its_end():
    a, b = _pair(capacity=4099)  # odd: elements straddle the end of the ring
    try:
        payload = np.arange(100_003, dtype=np.float64)
        header = b"xyz"  # puts the data at an odd offset in the ring
        sender = threading.Thread(target=lambda: a.send([header, memoryview(payload.view(np.uint8))]))
        sender.start()
        got = bytearray(3)
        b.recv_into(memoryview(got))
        dst = np.full(payload.size, 0.5)
        b.recv_reduce(dst, np.add)
        sender.join(timeout=30)
        assert bytes(got) == header
        assert np.array_equal(dst, payload + 0.5)
        back = np.empty(10, dtype=np.int32)  # and the other direction, into a plain buffer
        b.send([memoryview(np.arange(10, dtype=np.int32).view(np.uint8))])
        a.recv_into(memoryview(back.view(np.uint8)))
        assert np.array_equal(back, np.arange(10))
    finally:
        a.close()
        b.close()


def test_waits_end_when_the_peer_aborts_or_stalls():
    a, b = _pair(capacity=1 << 12, timeout_s=0.3)
    try:
        with pytest.raises(PeerLost) as stalled:
            b.recv_into(memoryview(bytearray(8)))  # nobody sends
        assert stalled.value.timed_out and stalled.value.peer == 0
        threading.Timer(0.05, a.shutdown).start()
        with pytest.raises(PeerLost, match="closed") as aborted:
            b.send([bytes(1 << 16)])  # more than the ring holds; the reader aborts instead of reading
        assert not aborted.value.timed_out
    finally:
        a.close()
        b.close()


def test_segments_are_private_nameless_and_checked(tmp_path):
    size = shm.segment_bytes(4096)
    created = shm._create_segment(size)
    pid, fd, dev, ino = (int(part) for part in created.handle.split(":"))
    assert pid == os.getpid() and os.fstat(fd).st_mode & 0o777 == 0o600
    assert shm_entries() == set(), "nothing is named in /dev/shm"
    assert shm._open_segment(created.handle, shm.segment_bytes(8192)) is None, "a size other than announced"
    assert shm._open_segment("../etc/passwd", size) is None
    with open(tmp_path / "other", "wb") as other:  # a descriptor of another file under the same number
        other.truncate(size)
        assert shm._open_segment(f"{pid}:{other.fileno()}:{dev}:{ino}", size) is None
    mapped = shm._open_segment(created.handle, size)
    assert mapped is not None
    mapped[:5] = b"hello"
    assert created.mapping[:5] == b"hello", "the same memory on both sides"
    created.release()
    assert shm._open_segment(created.handle, size) is None, "gone from /proc once the creator closed it"
    mapped.close()
    created.mapping.close()
