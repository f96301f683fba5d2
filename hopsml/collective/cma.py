"""Reading another process's memory in one copy: Linux cross-memory attach (process_vm_readv).

Ranks on one host can then combine each other's arrays where they lie, instead of copying them into shared
memory first and out again (`host`). The kernel allows it to processes of the same user that may trace
each other: it is refused under Yama's ptrace_scope >= 1 between processes that are not parent and child,
by seccomp filters of some containers, and across PID namespaces the peer's process id means another
process. So the ranks probe it when they set up (each reads a random token from every other rank) and
keep the shared-memory copies when any probe fails.
"""

from __future__ import annotations

import ctypes
import errno
import os
import sys
from collections.abc import Callable

import numpy as np


CMA_ENV = "HOPSML_COLLECTIVE_CMA"  # '0' keeps the copies through shared memory


class _IoVec(ctypes.Structure):
    _fields_ = [("iov_base", ctypes.c_void_p), ("iov_len", ctypes.c_size_t)]


_readv: Callable[..., int] | None = None


def _function() -> Callable[..., int] | None:
    global _readv
    if _readv is None and sys.platform.startswith("linux"):
        try:
            readv = ctypes.CDLL(None, use_errno=True).process_vm_readv
        except AttributeError:  # a C library without it
            return None
        readv.argtypes = [ctypes.c_int, ctypes.POINTER(_IoVec), ctypes.c_ulong, ctypes.POINTER(_IoVec),
                          ctypes.c_ulong, ctypes.c_ulong]
        readv.restype = ctypes.c_ssize_t
        _readv = readv
    return _readv


def supported() -> bool:
    """Whether this process may use process_vm_readv at all (whether a peer may be read shows only by trying);
    HOPSML_COLLECTIVE_CMA=0 turns it off."""
    if os.environ.get(CMA_ENV, "").strip().lower() in ("0", "false", "no", "off"):
        return False
    return _function() is not None


def read_into(pid: int, address: int, dst: np.ndarray) -> None:
    """Copy dst.nbytes bytes from `address` in process `pid` into the C-contiguous array dst (GIL released).
    Raises OSError: ESRCH when that process is gone, EPERM when it may not be read."""
    readv = _function()
    if readv is None:
        raise OSError(errno.ENOSYS, "process_vm_readv is not available")
    n, base, done = dst.nbytes, dst.ctypes.data, 0
    while done < n:
        local, remote = _IoVec(base + done, n - done), _IoVec(address + done, n - done)
        got = readv(pid, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0)
        if got <= 0:
            code = ctypes.get_errno() if got < 0 else errno.EIO
            raise OSError(code, os.strerror(code))
        done += got
