"""Processes known by (pid, start time), so a recorded pid that the system gave to another process
since is never taken for the server, and waiting for a process that is not our child (pidfd).
"""

from __future__ import annotations

import ctypes
import errno
import os
import select
import signal
from dataclasses import dataclass
from typing import Any

_PR_SET_PDEATHSIG = 1


def start_time(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (field 22 of /proc/<pid>/stat), None if gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            text = stat.read()
    except OSError:
        return None
    fields = text.rpartition(b")")[2].split()
    if fields[0] == b"Z":  # a zombie has ended; only its parent's wait is missing
        return None
    return int(fields[19])


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
    fd = None
    if proc.alive():
        try:
            fd = os.pidfd_open(proc.pid)
        except OSError as exc:
            if exc.errno != errno.ESRCH:
                raise
    try:
        if fd is not None and proc.alive():
            readable, _, _ = select.select([fd], [], [], timeout_s)
            if not readable and proc.alive():
                return False
        _reap(proc.pid)
        return not proc.alive()
    finally:
        if fd is not None:
            os.close(fd)


def _reap(pid: int) -> None:
    """Collect the exit status of our child `pid` so that no zombie stays; nothing for others' processes."""
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


def die_with_parent(parent: int) -> None:
    """Have the kernel kill this process when its parent ends (Linux), so that no instance outlives its
    supervisor with the port; if the parent is already gone, end now."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        pass
    if os.getppid() != parent:
        os._exit(1)

