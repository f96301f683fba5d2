"""Processes known by (pid, start time), so a recorded pid that the system gave to another process since is
never taken for the one recorded; waiting for a process that is not our child (pidfd); and a child that the
kernel ends when its parent dies, so no orphan keeps a port or runs on unwatched. Below the wings that start
processes of their own (a serving's supervisor and instances, a job's runner and its app).
"""

from __future__ import annotations

import ctypes
import errno
import os
import select
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

_PR_SET_PDEATHSIG = 1


def _stat(pid: int) -> tuple[bytes, int] | None:
    """(state letter, start time in clock ticks since boot) from /proc/<pid>/stat; None if there is no such pid."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            text = stat.read()
    except OSError:
        return None
    fields = text.rpartition(b")")[2].split()
    return fields[0], int(fields[19])


def start_time(pid: int) -> int | None:
    """The start time of a running process (a zombie has ended: None), None if gone."""
    found = _stat(pid)
    return found[1] if found is not None and found[0] != b"Z" else None


@dataclass(frozen=True)
class Proc:
    """A process as recorded: pid and start time."""

    pid: int
    started: int

    @classmethod
    def of(cls, pid: int) -> Proc:
        return cls(pid, start_time(pid) or 0)

    def alive(self) -> bool:
        return self.started != 0 and start_time(self.pid) == self.started

    def signal(self, signum: int) -> bool:
        """Send `signum` if the process is still this one; False if it is gone."""
        if not self.alive():
            return False
        try:
            os.kill(self.pid, signum)
        except ProcessLookupError:
            return False
        return True

    def to_dict(self) -> dict[str, int]:
        return {"pid": self.pid, "started": self.started}

    @classmethod
    def from_dict(cls, data: Any) -> Proc:
        return cls(int(data["pid"]), int(data["started"]))


def wait_gone(proc: Proc, timeout_s: float) -> bool:
    """Wait until `proc` has ended (reaping it if it is our child); True if it did within `timeout_s`."""
    try:
        fd = os.pidfd_open(proc.pid)
    except OSError as exc:
        if exc.errno == errno.ESRCH:
            return True  # ended and reaped
        raise
    try:
        found = _stat(proc.pid)
        if found is not None and found[1] != proc.started:
            return True  # the pid belongs to another process now: ours ended long ago
        readable, _, _ = select.select([fd], [], [], timeout_s)
        if not readable:
            return False
        _reap(proc.pid)  # our child stays a zombie until waited for
        return True
    finally:
        os.close(fd)


def _reap(pid: int) -> None:
    """Collect the exit status of our child `pid` so that no zombie stays; nothing for others' processes."""
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


def die_with_parent(parent: int) -> None:
    """Have the kernel kill this process when its parent `parent` ends (Linux), so that no instance outlives
    its supervisor with the port; if the parent is already gone, end now. Called in the child itself."""
    _die_with(_libc(), parent)


def parent_death_hook(parent: int) -> Callable[[], None]:
    """`die_with_parent(parent)` for a `preexec_fn`, with the C library loaded now, in the parent: the forked
    child then only calls into it, and never takes the dynamic loader's lock that another thread may have held
    at the fork."""
    libc = _libc()
    return lambda: _die_with(libc, parent)


def _libc() -> Any:
    try:
        return ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None


def _die_with(libc: Any, parent: int) -> None:
    """The parent-death signal, then the check for a parent that ended before it was set. Linux sends the signal
    when the *thread* that forked ends: fork from a thread that lives as long as the parent's process."""
    try:
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except AttributeError:   # no prctl (not Linux), or no C library at all
        pass
    if os.getppid() != parent:
        os._exit(1)


_LISTEN = "0A"


def listening(port: int) -> bool:
    """Whether any socket on this host listens on TCP `port` (IPv4 or IPv6), from /proc/net."""
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as rows:
                next(rows, None)
                for row in rows:
                    fields = row.split()
                    if fields[3] == _LISTEN and int(fields[1].rsplit(":", 1)[1], 16) == port:
                        return True
        except OSError:
            continue
    return False


def wait_port_closed(port: int, timeout_s: float) -> bool:
    """Wait until nothing listens on `port`; True if so within `timeout_s`. The kernel may release a killed
    process's socket a moment after the process has ended, and there is nothing to wait on but the table."""
    end = time.monotonic() + timeout_s
    while listening(port):
        if time.monotonic() > end:
            return False
        time.sleep(0.02)
    return True
