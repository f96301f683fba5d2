"""Every message between ranks is authenticated: with a real on-path tamperer (a TCP proxy between rank 1
and rank 0), an altered, injected, replayed or reordered message is refused with a CollectiveError that
names the peer, before it is used, and a forged pickle is never loaded."""

from __future__ import annotations

import logging
import pickle
import threading
from collections.abc import Callable

import numpy as np
import pytest
from tcp_tamper import DOWN, UP, Rewrite, TamperProxy

from hopsml import collective
from hopsml.cluster import auth
from hopsml.cluster.auth import TAG_BYTES
from hopsml.collective import handshake, shm, transport
from hopsml.collective.communicator import SEGMENT_BYTES, SMALL_BYTES
from hopsml.collective.protocol import FIXED_SIZE, Header
from hopsml.errors import CollectiveError

DATA_CONNECTION = 0  # rank 1 dials rank 0's data connection first, its control connection second
UNPICKLED: list[str] = []


def _mark_unpickled(what: str) -> str:
    UNPICKLED.append(what)
    return what


class Payload:
    """An object whose unpickling calls a function: what an attacker would send into allgather."""

    def __reduce__(self):
        return _mark_unpickled, ("the forged pickle was loaded",)


@pytest.fixture(autouse=True)
def tcp_only(monkeypatch):
    """The two ranks share this host, and would otherwise move their data to shared memory, past the proxy."""
    monkeypatch.setenv(shm.SHM_ENV, "0")


def run_pair(arm: Callable[[TamperProxy], None], work: Callable[[collective.Communicator], object],
             timeout_s: float = 60.0) -> tuple[dict[int, object], TamperProxy]:
    """Ranks 0 and 1 in threads, rank 1 reaching rank 0 through a TamperProxy; `arm` runs once both are
    connected and before either calls `work`. Returns each rank's result or exception."""
    secret = auth.new_secret()
    (l0, a0), (l1, a1) = collective.listen("127.0.0.1"), collective.listen("127.0.0.1")
    proxy = TamperProxy(a0)
    addresses = {0: [a0, a1], 1: [proxy.address, a1]}
    listeners = {0: l0, 1: l1}
    connected, armed = threading.Barrier(3, timeout=timeout_s), threading.Barrier(3, timeout=timeout_s)
    results: dict[int, object] = {}

    def rank_main(rank: int) -> None:
        try:
            with collective.Communicator.connect(rank, 2, addresses[rank], listeners[rank], secret,
                                                 timeout_s=timeout_s) as comm:
                connected.wait()
                armed.wait()
                results[rank] = work(comm)
                comm.barrier()  # a rank that got all it needed before the other refused learns of it here
        except Exception as exc:  # noqa: BLE001 - the test looks at it
            results[rank] = exc

    threads = [threading.Thread(target=rank_main, args=(rank,)) for rank in (0, 1)]
    for thread in threads:
        thread.start()
    try:
        connected.wait()
        arm(proxy)
        armed.wait()
        for thread in threads:
            thread.join(timeout_s * 2)
        assert not any(thread.is_alive() for thread in threads)
    finally:
        proxy.close()
    return results, proxy


def assert_refused_by_rank0(results: dict[int, object]) -> None:
    """Rank 0 refused rank 1's message; rank 1 learned that from rank 0's (authenticated) abort notice."""
    refused, informed = results[0], results[1]
    assert isinstance(refused, CollectiveError), refused
    assert "rank 0 refused a message" in str(refused), refused
    assert "from rank 1 failed its authentication tag check" in str(refused), refused
    assert isinstance(informed, CollectiveError), informed
    assert "rank 0 refused a message" in str(informed) and "learned this from rank 0" in str(informed), informed


# A 2-rank ring all-reduce of 256 KiB: rank 1 sends rank 0 its header message, then one segment per step.
RING_ELEMENTS = 64 << 10
RING_DESC = f"float32[{RING_ELEMENTS}]"
HEADER_MESSAGE = FIXED_SIZE + len(RING_DESC) + TAG_BYTES
SEGMENT = RING_ELEMENTS * 4 // 2
SEGMENT_MESSAGE = SEGMENT + TAG_BYTES
assert SMALL_BYTES < RING_ELEMENTS * 4 and SEGMENT <= SEGMENT_BYTES  # the ring path, one segment a step


def ring_allreduce(comm: collective.Communicator) -> np.ndarray:
    data = np.arange(RING_ELEMENTS, dtype=np.float32) * (comm.rank + 1)
    return comm.allreduce(data)


def rewrite_segments(fn: Callable[[bytes, bytes], bytes]) -> Callable[[TamperProxy], None]:
    """Arm a rewrite of rank 1's two ring segments (each followed by its tag) on the data connection."""
    def arm(proxy: TamperProxy) -> None:
        proxy.rewrite(DATA_CONNECTION, UP, Rewrite(HEADER_MESSAGE, lambda header: header))  # passed on at once
        proxy.rewrite(DATA_CONNECTION, UP, Rewrite(2 * SEGMENT_MESSAGE, lambda both: fn(both[:SEGMENT_MESSAGE],
                                                                                     both[SEGMENT_MESSAGE:])))
    return arm


def test_the_proxy_alone_changes_nothing():
    results, _ = run_pair(lambda proxy: None, ring_allreduce)
    expected = np.arange(RING_ELEMENTS, dtype=np.float32) * 3
    assert np.array_equal(results[0], expected) and np.array_equal(results[1], expected)


def test_a_flipped_bit_in_a_segment_is_refused():
    def flip(first: bytes, second: bytes) -> bytes:
        altered = bytearray(first)
        altered[100] ^= 0x01  # a low mantissa bit: without a tag the sum would just be slightly wrong
        return bytes(altered) + second
    results, _ = run_pair(rewrite_segments(flip), ring_allreduce)
    assert_refused_by_rank0(results)
    assert f"a message of {SEGMENT} bytes" in str(results[0])


def test_a_replayed_segment_is_refused():
    results, _ = run_pair(rewrite_segments(lambda first, second: first + first), ring_allreduce)
    assert_refused_by_rank0(results)


def test_reordered_segments_are_refused():
    results, _ = run_pair(rewrite_segments(lambda first, second: second + first), ring_allreduce)
    assert_refused_by_rank0(results)


def test_a_replayed_collective_header_is_refused():
    recorded: list[bytes] = []
    barrier_message = FIXED_SIZE + TAG_BYTES

    def arm(proxy: TamperProxy) -> None:
        proxy.rewrite(DATA_CONNECTION, UP, Rewrite(barrier_message, lambda b: recorded.append(b) or b))
        proxy.rewrite(DATA_CONNECTION, UP, Rewrite(0, lambda _: recorded[0]))  # again, before the 2nd barrier

    def barriers(comm: collective.Communicator) -> str:
        comm.barrier()
        comm.barrier()
        return "passed"

    results, _ = run_pair(arm, barriers)
    assert_refused_by_rank0(results)
    assert len(recorded) == 1


def test_an_injected_allgather_message_is_refused_before_unpickling():
    evil = pickle.dumps(Payload())
    # a whole allgather message as rank 1 would send it (header, description, pickle), with a made-up tag
    forged = Header("allgather", 1, "object", nbytes=len(evil), inline=len(evil)).pack() + evil + bytes(TAG_BYTES)

    def arm(proxy: TamperProxy) -> None:
        proxy.rewrite(DATA_CONNECTION, UP, Rewrite(0, lambda _: forged))

    UNPICKLED.clear()
    results, _ = run_pair(arm, lambda comm: comm.allgather({"rank": comm.rank}))
    assert_refused_by_rank0(results)
    assert UNPICKLED == []
    assert f"a message of {FIXED_SIZE + len('object') + len(evil)} bytes" in str(results[0])


def test_an_altered_answer_to_rank_0_is_refused_by_rank_1():
    def arm(proxy: TamperProxy) -> None:
        def flip(message: bytes) -> bytes:
            return bytes([message[0] ^ 0x80]) + message[1:]
        proxy.rewrite(DATA_CONNECTION, DOWN, Rewrite(FIXED_SIZE + TAG_BYTES, flip))

    results, _ = run_pair(arm, lambda comm: comm.barrier())
    refused, informed = results[1], results[0]
    assert isinstance(refused, CollectiveError) and "rank 1 refused a message" in str(refused), refused
    assert "from rank 0 failed its authentication tag check" in str(refused)
    assert isinstance(informed, CollectiveError) and "learned this from rank 1" in str(informed), informed


def test_an_altered_hello_is_refused_at_the_rendezvous(caplog):
    caplog.set_level(logging.WARNING, logger=handshake.logger.name)
    challenge_answer = 32 + 32  # the dialer's nonce and its HMAC answer come before its hello

    secret = auth.new_secret()
    (l0, a0), (l1, a1) = collective.listen("127.0.0.1"), collective.listen("127.0.0.1")
    proxy = TamperProxy(a0)
    # the kind byte of rank 1's data hello, data -> control: untagged, rank 0 would take the data
    # connection for the control connection
    proxy.rewrite(DATA_CONNECTION, UP, Rewrite(challenge_answer, lambda answer: answer))
    proxy.rewrite(DATA_CONNECTION, UP, Rewrite(17, lambda hello: hello[:16] + bytes([hello[16] ^ 0x01])))
    errors: dict[int, Exception] = {}

    def rank_main(rank: int, addresses: list[str], listener, timeout_s: float) -> None:
        try:
            collective.Communicator.connect(rank, 2, addresses, listener, secret, timeout_s=timeout_s).close()
        except CollectiveError as exc:
            errors[rank] = exc

    threads = [threading.Thread(target=rank_main, args=(0, [a0, a1], l0, 3.0)),
               threading.Thread(target=rank_main, args=(1, [proxy.address, a1], l1, 30.0))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    proxy.close()
    assert set(errors) == {0, 1}
    assert "never connected" in str(errors[0])
    assert "could not complete the handshake with rank 0" in str(errors[1])
    warnings = [r.getMessage() for r in caplog.records if r.name == handshake.logger.name]
    assert any("hello failed the authentication tag check" in line for line in warnings), warnings


def test_message_tags_count_per_direction():
    keys = auth.ConnectionKeys(b"k" * 16, b"j" * 16)
    sender, receiver = auth.MessageTags(keys.send), auth.MessageTags(keys.send)
    first, second = sender.next_tag(b"one"), sender.next_tag(b"two")
    assert receiver.check_next(b"one", first)
    assert not receiver.check_next(b"one", first)  # the same message again: the count moved on
    assert not receiver.check_next(b"two", second)  # and the receiver stays one behind from then on
    assert repr(b"k" * 16) not in repr(keys) and repr(b"j" * 16) not in repr(keys)


def test_both_ends_derive_matching_keys_bound_to_the_handshake():
    import socket

    secret = auth.new_secret()
    server_keys: list[auth.ConnectionKeys] = []
    with socket.create_server(("127.0.0.1", 0)) as server:
        for _ in range(2):
            client = socket.create_connection(server.getsockname())
            accepted, _ = server.accept()
            thread = threading.Thread(
                target=lambda accepted=accepted: server_keys.append(auth.challenge(accepted, secret)))
            thread.start()
            client_keys = auth.respond(client, secret)
            thread.join()
            client.close()
            accepted.close()
            assert client_keys.send == server_keys[-1].recv and client_keys.recv == server_keys[-1].send
            assert client_keys.send != client_keys.recv
    assert server_keys[0] != server_keys[1]  # fresh nonces: a new connection never reuses keys


def test_long_messages_travel_as_tagged_frames(monkeypatch):
    # 1 GiB frames in production; 32 KiB here, still above every message this test reads whole (headers)
    monkeypatch.setattr(transport, "_FRAME_BYTES", 32 << 10)
    big = bytes(range(256)) * 400  # about 100 KB: a payload message of its own, four frames

    def work(comm: collective.Communicator) -> tuple[list, np.ndarray]:
        return comm.allgather(big + bytes([comm.rank])), ring_allreduce(comm)

    results, _ = run_pair(lambda proxy: None, work)
    for rank in (0, 1):
        gathered, reduced = results[rank]
        assert gathered == [big + b"\x00", big + b"\x01"]
        assert np.array_equal(reduced, np.arange(RING_ELEMENTS, dtype=np.float32) * 3)


def test_a_flipped_bit_in_a_later_frame_is_refused(monkeypatch):
    monkeypatch.setattr(transport, "_FRAME_BYTES", 32 << 10)
    frame_message = (32 << 10) + TAG_BYTES

    def arm(proxy: TamperProxy) -> None:  # rank 1's first ring segment: 128 KiB as four frames; alter the third
        proxy.rewrite(DATA_CONNECTION, UP, Rewrite(HEADER_MESSAGE + 2 * frame_message, lambda b: b))
        proxy.rewrite(DATA_CONNECTION, UP, Rewrite(1, lambda b: bytes([b[0] ^ 0x10])))

    results, _ = run_pair(arm, ring_allreduce)
    assert_refused_by_rank0(results)
    assert f"a message of {32 << 10} bytes" in str(results[0])
