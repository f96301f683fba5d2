"""Shared memory between ranks on the same host: a byte ring per direction in a shared segment.

After the authenticated TCP mesh is up, every rank tells every peer its host identity (boot id and host
name) over the data connection. Each pair on the same host then moves its collective data through a
segment of shared memory instead of TCP: the lower rank creates it as anonymous memory (memfd, mode 0600)
and sends its handle (process id, descriptor, device and inode) over their authenticated connection; the
higher rank opens it through /proc, checks it is that very file, maps it and answers; the lower rank then
closes its descriptor. The segment never has a name and lives only in the two mappings, so nothing is
left behind however either process ends, SIGKILL included. A pair that cannot share memory (another PID
namespace, /proc closed, memory refused, shared memory turned off in either side's options) keeps TCP.

Each direction is a single-producer single-consumer ring: the producer copies into it and advances
`head`, the consumer copies out (or reduces straight out of it) and advances `tail`. A waiting side polls
for a while (yielding its core between polls), then announces that it sleeps and re-reads the counter
(with a memory fence between, so that the other side cannot miss it). A receiver then sleeps in a
blocking read of the now idle TCP data connection, and the producer rings it with one byte: the kernel
hands a socket's reader the CPU synchronously, and the read ends at once when the peer dies or aborts
(its connections close), or after the collective timeout. A producer waiting for space sleeps on a futex
on `tail`, in slices that check the peer's control connection and the deadline. The control connection
still carries abort notices.

Linux on x86-64 only: the rings rely on its ordering of plain stores (data before `head`) and on the
futex system call; elsewhere every pair keeps TCP.
"""

from __future__ import annotations

import ctypes
import logging
import mmap
import os
import platform
import socket
import struct
import sys
import threading
import time
from collections.abc import Callable, Sequence

import numpy as np

from hopsml.collective.options import HOST_ID_ENV as HOST_ID_ENV  # the settings' variables, named here too
from hopsml.collective.options import SHM_ENV as SHM_ENV
from hopsml.collective.options import CollectiveOptions
from hopsml.collective.peers import Buffer, Peer
from hopsml.collective.transport import PeerLost, TcpPeer

logger = logging.getLogger(__name__)

NEIGHBOUR_CAPACITY = 2 << 20  # ring bytes per direction between ring neighbours (the bandwidth path)
OTHER_CAPACITY = 256 << 10  # between other pairs: headers and small inline payloads only
_PUBLISH_BYTES = 256 << 10  # the producer publishes at least this often, so the consumer starts early
# A waiting rank polls this long before it sleeps (a sleep and its wake-up cost tens of microseconds), giving
# its core away between polls (sched_yield) to the rank it waits for, when ranks share cores
SPIN_S = 200e-6
_FIRST_SLICE_S = 0.001  # a sleep is this short at first, doubling up to _SLICE_S between liveness and
_SLICE_S = 0.05  # deadline checks
_PAGE = 4096
# uint64 indexes in a ring's control page, each on its own cache line: the counters, the closed flag,
# and whether a side sleeps on a counter (the other side makes the wake-up system call only then)
_HEAD, _TAIL, _CLOSED, _HEAD_SLEEPER, _TAIL_SLEEPER = 0, 8, 16, 24, 32
_SLEEPER = {_HEAD: _HEAD_SLEEPER, _TAIL: _TAIL_SLEEPER}
_HELLO = struct.Struct("!4sH")
_MAGIC = b"HMLS"
_FUTEX_WAIT, _FUTEX_WAKE = 0, 1
_SYS_FUTEX = 202  # x86-64
_MASK32 = 0xFFFFFFFF
_BELL = (b"\x01",)


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


_libc: ctypes.CDLL | None = None
_fence_lock = threading.Lock()


def fence() -> None:
    """A full memory barrier on this CPU: taking a lock is a locked instruction, which drains the store buffer
    and the write-combining buffers of large copies' non-temporal stores. Between writing data and the
    counter that publishes it, and between announcing a sleep and re-reading the counter slept on."""
    with _fence_lock:
        pass


def _syscall() -> Callable[..., int]:
    global _libc
    if _libc is None:
        libc = ctypes.CDLL(None, use_errno=True)
        # futex(uaddr, op, val, timeout, uaddr2, val3): typed once, so that a call converts plain ints quickly
        libc.syscall.argtypes = [ctypes.c_long, ctypes.c_void_p, ctypes.c_int, ctypes.c_uint,
                                 ctypes.POINTER(_Timespec), ctypes.c_void_p, ctypes.c_int]
        libc.syscall.restype = ctypes.c_long
        _libc = libc
    return _libc.syscall


def _futex_wait(address: int, expected: int, seconds: float) -> None:
    """Sleep while the 32-bit word at `address` holds `expected`, at most `seconds` (GIL released)."""
    ts = _Timespec(int(seconds), int((seconds - int(seconds)) * 1e9))
    _syscall()(_SYS_FUTEX, address, _FUTEX_WAIT, expected, ts, None, 0)


def _futex_wake(address: int) -> None:
    _syscall()(_SYS_FUTEX, address, _FUTEX_WAKE, 1 << 30, None, None, 0)


def _has_space(head: int, capacity: int) -> Callable[[int], bool]:
    """Whether a ring whose producer is at `head` has room, given the consumer's tail."""
    return lambda tail: capacity - (head - tail) > 0


def poll(read: Callable[[], int], ready: Callable[[int], bool]) -> int | None:
    """Re-read a counter for up to SPIN_S, giving the core away between reads; its value once `ready(value)`,
    None if it never was (the caller then sleeps)."""
    end = time.perf_counter() + SPIN_S
    while True:
        value = read()
        if ready(value):
            return value
        if time.perf_counter() >= end:
            return None
        os.sched_yield()


def supported() -> bool:
    """Whether this process can use shared memory for collectives (Linux x86-64 with memfd)."""
    return sys.platform.startswith("linux") and platform.machine() in ("x86_64", "AMD64") and \
        hasattr(os, "memfd_create")


def host_identity(override: str = "") -> str:
    """What ranks on the same host share: the kernel's boot id and the host name, unless `override` (the
    options' host_id: tests fake several hosts with it) replaces them."""
    if override.strip():
        return override.strip()
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as f:
            boot = f.read().strip()
    except OSError:
        boot = ""
    return f"{boot}/{socket.gethostname()}"


def segment_bytes(capacity: int) -> int:
    """Size of a pair's segment: two directions, each a control page and `capacity` ring bytes."""
    return 2 * (_PAGE + capacity)


class ByteRing:
    """One direction of a pair's segment: a single-producer single-consumer byte ring."""

    def __init__(self, buffer: mmap.mmap, offset: int, capacity: int) -> None:
        self.capacity = capacity
        self.ctl = np.ndarray((40,), dtype=np.uint64, buffer=buffer, offset=offset)
        self.data = np.ndarray((capacity,), dtype=np.uint8, buffer=buffer, offset=offset + _PAGE)
        self.view = memoryview(self.data)
        base = self.ctl.ctypes.data
        self.head_address = base + 8 * _HEAD
        self.tail_address = base + 8 * _TAIL
        self.closed_address = base + 8 * _CLOSED

    def close_ring(self) -> None:
        """Mark the ring closed and wake both of its sides."""
        self.ctl[_CLOSED] = 1
        _futex_wake(self.head_address)
        _futex_wake(self.tail_address)

    def release(self) -> None:
        del self.ctl, self.data, self.view


def _copy(dst: memoryview, src: memoryview, n: int) -> None:
    if n >= 1 << 16:  # numpy releases the GIL for large copies; the other thread of the rank goes on
        np.copyto(np.frombuffer(dst, np.uint8, n), np.frombuffer(src, np.uint8, n))
    else:
        dst[:n] = src[:n]


class ShmPeer:
    """A peer on the same host: collective data through the shared rings, abort notices over TCP."""

    def __init__(self, tcp: TcpPeer, segment: mmap.mmap, capacity: int, creator: bool) -> None:
        self.rank = tcp.rank
        self.timeout_s = tcp.timeout_s
        self._tcp = tcp
        self._segment = segment
        first, second = ByteRing(segment, 0, capacity), ByteRing(segment, _PAGE + capacity, capacity)
        self._out, self._in = (first, second) if creator else (second, first)
        self._shut = False
        self._bell = memoryview(bytearray(1))

    def __repr__(self) -> str:
        return f"ShmPeer(rank={self.rank})"

    # waiting

    def _check_alive(self) -> None:
        if self._shut:
            raise PeerLost(self.rank, "this rank shut its connections down")
        if self._in.ctl[_CLOSED] or self._out.ctl[_CLOSED]:
            raise PeerLost(self.rank, "peer closed the connection")
        if self._tcp.signalled():  # the control connection: readable once the peer aborts, closes or dies
            raise PeerLost(self.rank, "peer closed the connection")

    def _wait(self, ctl: np.ndarray, index: int, address: int, ready: Callable[[int], bool]) -> int:
        """Wait until `ready(ctl[index])` (a ring counter at `address`); returns the counter's value."""
        value = poll(lambda: int(ctl[index]), ready)
        if value is not None:
            return value
        deadline = time.monotonic() + self.timeout_s
        sleeper = _SLEEPER[index]
        ctl[sleeper] = 1
        fence()
        try:
            sleep = _FIRST_SLICE_S
            while True:
                value = int(ctl[index])
                if ready(value):
                    return value
                if sleep > _FIRST_SLICE_S:  # after a sleep that brought nothing: is the peer still there?
                    self._check_alive()
                elif self._shut:
                    self._check_alive()
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise PeerLost(self.rank, f"no progress for {self.timeout_s:g} s", timed_out=True)
                _futex_wait(address, value & _MASK32, min(sleep, remaining))
                sleep = min(2 * sleep, _SLICE_S)
        finally:
            ctl[sleeper] = 0

    def ring_bell(self) -> None:
        """Wake the peer if it sleeps on the data connection (`_wait_data`, `wait_bell`; the host segment's
        counters use it too): a byte on TCP rather than a futex, because the kernel wakes a socket's reader
        as a synchronous hand-off (on a busy host it then runs at once)."""
        self._tcp.send(_BELL)

    def _publish(self, ctl: np.ndarray, head: int) -> None:
        """Make the bytes written up to `head` visible to the peer, and wake it if it sleeps."""
        fence()
        ctl[_HEAD] = head
        fence()
        if ctl[_HEAD_SLEEPER]:
            self.ring_bell()

    def wait_bell(self) -> None:
        """Sleep until the peer rings (or rang earlier), raising PeerLost if it dies, aborts or the timeout passes."""
        if self._shut:
            self._check_alive()
        self._tcp.recv_into(self._bell)

    def _wait_data(self, ctl: np.ndarray, tail: int) -> int:
        """Wait until the incoming ring's head moves past `tail`; returns the head. Sleeps in a blocking read of
        the idle data connection, which also ends at once with PeerLost when the peer dies or aborts (its
        socket closes), or after the collective timeout."""
        head = poll(lambda: int(ctl[_HEAD]), lambda h: h != tail)
        if head is not None:
            return head
        ctl[_HEAD_SLEEPER] = 1
        fence()
        try:
            while True:
                head = int(ctl[_HEAD])
                if head != tail:
                    return head
                if self._shut:
                    self._check_alive()
                self._tcp.recv_into(self._bell)  # a bell rung for an earlier sleep just loops once more
        finally:
            ctl[_HEAD_SLEEPER] = 0

    # the Peer interface

    def send(self, messages: Sequence[Buffer]) -> None:
        """Copy the messages into the outgoing ring, publishing at least every _PUBLISH_BYTES."""
        ring = self._out
        ctl, capacity, view = ring.ctl, ring.capacity, ring.view
        head = int(ctl[_HEAD])
        published = head
        tail = int(ctl[_TAIL])
        total = sum(len(b) for b in messages) if len(messages) > 1 else len(messages[0])
        pos = head % capacity
        if total <= min(capacity - (head - tail), capacity - pos, _PUBLISH_BYTES) and not self._shut:
            for buffer in messages:  # the common small message: no wrap, no wait, one publication
                n = len(buffer)
                view[pos:pos + n] = buffer if isinstance(buffer, (bytes, bytearray)) or buffer.format == "B" else \
                    memoryview(buffer).cast("B")
                pos += n
            self._publish(ctl, head + total)
            return
        for buffer in messages:
            src = memoryview(buffer).cast("B") if not isinstance(buffer, memoryview) or buffer.format != "B" \
                else buffer
            done, n = 0, len(src)
            while done < n:
                free = capacity - (head - tail)
                if free == 0 or head - published >= _PUBLISH_BYTES:
                    if head != published:
                        self._publish(ctl, head)
                        published = head
                    if free == 0:
                        tail = self._wait(ctl, _TAIL, ring.tail_address, _has_space(head, capacity))
                        continue
                if self._shut or ring.ctl[_CLOSED]:
                    self._check_alive()
                pos = head % capacity
                k = min(free, capacity - pos, n - done, _PUBLISH_BYTES)
                _copy(view[pos:pos + k], src[done:done + k], k)
                head += k
                done += k
        if head != published:
            self._publish(ctl, head)

    def _receive(self, n: int, consume: Callable[[memoryview, int, int], None]) -> None:
        """Hand `n` bytes from the incoming ring to `consume(ring_view, done, k)` piece by piece."""
        ring = self._in
        ctl, capacity, view = ring.ctl, ring.capacity, ring.view
        tail = int(ctl[_TAIL])
        head = int(ctl[_HEAD])
        done = 0
        while done < n:
            if head == tail:
                head = self._wait_data(ctl, tail)
            pos = tail % capacity
            k = min(head - tail, capacity - pos, n - done)
            consume(view[pos:pos + k], done, k)
            tail += k
            done += k
            ctl[_TAIL] = tail
            fence()
            if ctl[_TAIL_SLEEPER]:
                _futex_wake(ring.tail_address)

    def recv_into(self, view: memoryview | bytearray) -> None:
        """Fill the whole byte view from the peer."""
        target = memoryview(view) if isinstance(view, bytearray) else view.cast("B") if view.format != "B" else view
        n = len(target)
        ring = self._in
        ctl, capacity = ring.ctl, ring.capacity
        tail = int(ctl[_TAIL])
        pos = tail % capacity
        if n < 1 << 16 and pos + n <= capacity and int(ctl[_HEAD]) - tail >= n:
            target[:] = ring.view[pos:pos + n]  # the common small message, already there and not wrapped
            ctl[_TAIL] = tail + n
            fence()
            if ctl[_TAIL_SLEEPER]:
                _futex_wake(ring.tail_address)
            return
        self._receive(n, lambda src, done, k: _copy(target[done:done + k], src, k))

    def recv_message(self, first: int, rest: Callable[[memoryview], int]) -> bytes:
        """One message whose length shows in its first `first` bytes (`rest` says how many follow), as
        `transport.TcpPeer.recv_message`; shared memory needs no tag, only the two ranks can map it."""
        ring = self._in
        ctl, capacity = ring.ctl, ring.capacity
        tail = int(ctl[_TAIL])
        pos = tail % capacity
        ready = int(ctl[_HEAD]) - tail
        if ready >= first and pos + ready <= capacity:  # the common case: the message is there, not wrapped
            more = rest(ring.view[pos:pos + first])
            if 0 <= more <= ready - first:
                message = bytes(ring.view[pos:pos + first + more])
                ctl[_TAIL] = tail + first + more
                fence()
                if ctl[_TAIL_SLEEPER]:
                    _futex_wake(ring.tail_address)
                return message
        start = bytearray(first)
        self.recv_into(memoryview(start))
        more = rest(memoryview(start))
        if more < 0:
            raise PeerLost(self.rank, f"it announced a message of {more} more bytes: the ranks are out of step")
        if more:
            body = bytearray(more)
            self.recv_into(memoryview(body))
            start += body
        return bytes(start)

    def recv_reduce(self, dst: np.ndarray, ufunc: np.ufunc) -> None:
        """Combine the peer's next dst.nbytes bytes into dst with the ufunc, straight out of the ring."""
        itemsize = dst.itemsize
        pending = bytearray(itemsize)  # an element split by the ring's end

        def consume(src: memoryview, done: int, k: int) -> None:
            start = done
            piece = src
            split = (-done) % itemsize
            if split:  # finish the element that began at the end of the ring
                take = min(split, k)
                pending[itemsize - split:itemsize - split + take] = src[:take]
                if take < split:
                    return
                first = done - (itemsize - split)
                element = dst[first // itemsize:first // itemsize + 1]
                ufunc(element, np.frombuffer(pending, dst.dtype), out=element)
                start, piece = done + take, src[take:]
            whole = len(piece) // itemsize * itemsize
            if whole:
                a = start // itemsize
                part = dst[a:a + whole // itemsize]
                ufunc(part, np.frombuffer(piece, dst.dtype, whole // itemsize), out=part)
            rest = len(piece) - whole
            if rest:
                pending[:rest] = piece[whole:]

        self._receive(dst.nbytes, consume)

    def send_notice(self, text: str) -> None:
        self._tcp.send_notice(text)

    def read_notice(self, wait_s: float = 1.0) -> str | None:
        return self._tcp.read_notice(wait_s)

    def signalled(self) -> bool:
        return self._tcp.signalled()

    def control_fd(self) -> int:
        return self._tcp.control_fd()

    def shutdown(self) -> None:
        """Wake any thread of this rank waiting on the rings, and make the peer see the end at once."""
        self._shut = True
        for ring in (self._out, self._in):
            ring.close_ring()
        self._tcp.shutdown()

    def close(self) -> None:
        if self._segment.closed:
            return
        try:
            self._out.close_ring()  # the peer reads what is already in the ring, then sees the end
        except ValueError:
            pass
        self._tcp.close()
        for ring in (self._out, self._in):
            ring.release()
        try:
            self._segment.close()
        except BufferError:  # a view still exported (e.g. a pending traceback): the mapping goes with it
            logger.debug("shared memory with rank %d stays mapped until its last view is gone", self.rank)


class Created:
    """A segment this rank made: anonymous memory (memfd) that exists only while a descriptor or a mapping
    holds it, so no exit of any rank, SIGKILL included, can leave it behind. `handle` tells a peer on this
    host where to open it (this process's descriptor, through /proc) and how to recognise it."""

    def __init__(self, fd: int, mapping: mmap.mmap) -> None:
        info = os.fstat(fd)
        self.handle = f"{os.getpid()}:{fd}:{info.st_dev}:{info.st_ino}"
        self.mapping = mapping
        self._fd: int | None = fd

    def release(self) -> None:
        """Close the descriptor once the peers have mapped the segment (or will not): only mappings hold it now."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def _create_segment(size: int) -> Created | None:
    """A new segment of `size` bytes (mode 0600); None (with a log line) if it cannot be made."""
    try:
        fd = os.memfd_create("hopsml-collective", os.MFD_CLOEXEC)
    except OSError as exc:
        logger.info("cannot create shared memory (%s); using TCP", exc)
        return None
    try:
        os.fchmod(fd, 0o600)
        os.posix_fallocate(fd, 0, size)  # reserve the pages now: too little memory fails here, not as SIGBUS later
        return Created(fd, mmap.mmap(fd, size))
    except OSError as exc:
        os.close(fd)
        logger.info("cannot reserve %d bytes of shared memory (%s); using TCP", size, exc)
        return None


def _open_segment(handle: str, size: int) -> mmap.mmap | None:
    """Map a segment a peer on this host created, after checking that the descriptor it names is that very
    file (device and inode: in another PID namespace the process id names another process), ours, private
    and of the agreed size."""
    try:
        pid, fd, dev, ino = (int(part) for part in handle.split(":"))
    except ValueError:
        return None
    try:
        mine = os.open(f"/proc/{pid}/fd/{fd}", os.O_RDWR)
    except OSError as exc:
        logger.info("cannot open the peer's shared memory (%s); using TCP", exc)
        return None
    try:
        info = os.fstat(mine)
        if (info.st_dev, info.st_ino) != (dev, ino) or info.st_size != size or info.st_uid != os.geteuid() or \
                info.st_mode & 0o077:
            logger.warning("the peer's shared memory is not what it announced (another PID namespace?); using TCP")
            return None
        return mmap.mmap(mine, size)
    except OSError as exc:
        logger.info("cannot map the peer's shared memory (%s); using TCP", exc)
        return None
    finally:
        os.close(mine)


def send_text(peer: Peer, text: str) -> None:
    payload = text.encode("utf-8")
    peer.send([_HELLO.pack(_MAGIC, len(payload)), payload])


def recv_text(peer: Peer) -> str:
    fixed = bytearray(_HELLO.size)
    peer.recv_into(memoryview(fixed))
    magic, length = _HELLO.unpack(fixed)
    if magic != _MAGIC:
        raise PeerLost(peer.rank, "it sent bytes that are not part of the shared-memory set-up")
    payload = bytearray(length)
    if length:
        peer.recv_into(memoryview(payload))
    return payload.decode("utf-8", "replace")


def attach_same_host(rank: int, size: int, peers: dict[int, TcpPeer],
                     options: CollectiveOptions) -> tuple[dict[int, Peer], list[str]]:
    """Move the pairs on this host to shared memory; the rest keep TCP. Every rank must call it together.

    Returns the peers (shared-memory ones where possible) and every rank's host identity ('' for a rank
    that does not use shared memory).

    The set-up messages are small (they fit in the socket buffers), so every rank first sends, then reads:
    host identities to all peers; segment handles to the higher same-host peers; then, for the lower ones,
    maps theirs and answers; last, reads the answers of the higher ones and closes its segments' descriptors.
    Raises PeerLost if a peer vanishes meanwhile.
    """
    mine = host_identity(options.host_id) if options.shared_memory and supported() else ""
    for peer in peers.values():
        send_text(peer, mine)
    theirs = {r: recv_text(peer) for r, peer in sorted(peers.items())}
    same = [r for r, text in theirs.items() if mine and text == mine]
    neighbours = {(rank - 1) % size, (rank + 1) % size}

    def capacity(other: int) -> int:
        return NEIGHBOUR_CAPACITY if other in neighbours else OTHER_CAPACITY

    created: dict[int, Created] = {}
    mapped: dict[int, mmap.mmap] = {}
    try:
        for other in (r for r in same if r > rank):
            made = _create_segment(segment_bytes(capacity(other)))
            if made is not None:
                created[other] = made
            send_text(peers[other], made.handle if made else "")
        for other in (r for r in same if r < rank):
            handle = recv_text(peers[other])
            opened = _open_segment(handle, segment_bytes(capacity(other))) if handle else None
            if opened is not None:
                mapped[other] = opened
            send_text(peers[other], "mapped" if opened is not None else "")
        for other, made in list(created.items()):
            answer = recv_text(peers[other])
            made.release()
            if answer == "mapped":
                mapped[other] = made.mapping
            else:
                del created[other]
                made.mapping.close()
    except BaseException:
        for made in created.values():
            made.release()
            made.mapping.close()
        for mapping in mapped.values():
            mapping.close()
        raise
    result: dict[int, Peer] = dict(peers)
    for other, mapping in mapped.items():
        result[other] = ShmPeer(peers[other], mapping, capacity(other), creator=other > rank)
    if mapped:
        logger.debug("rank %d shares memory with ranks %s", rank, sorted(mapped))
    return result, [mine if r == rank else theirs[r] for r in range(size)]
