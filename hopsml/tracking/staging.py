"""A run's local staging folder on HDFS and S3 roots, which cannot append: the task writes its files
(output.log, metrics, TensorBoard events, checkpoints) here, and they are copied to the run
directory every few seconds (`sync_interval_s`), at each `sync()` and when the run ends.

The folder is removed when the run ends, also when it fails. A process that dies without cleaning
up (os._exit, a signal, the OOM killer) is covered by a small watcher process: it waits for the
run's process to go, copies what was written since the last copy, and removes the folder. Folders
of dead processes that even the watcher could not clean are removed by the next run on the host.

Importable without pyspark; the watcher (``python -m hopsml.tracking.staging``) imports nothing
heavy until the run's process is gone.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from typing import IO

from hopsml import orphans
from hopsml.fs import Storage

log = logging.getLogger(__name__)

PREFIX = "hopsml-run-"          # /tmp/hopsml-run-<pid>-<random>
_DONE = b"done\n"               # what the run's process tells its watcher when it cleaned up itself
_WATCHER_TIMEOUT_S = 300.0      # the most the watcher spends copying a dead run's files
_CLOSE_TIMEOUT_S = 30.0         # the most close() waits for a copy in progress
_WARN_EVERY_S = 60.0


def _changed(folder: str, seen: dict[str, tuple[int, int]]) -> list[tuple[str, str, tuple[int, int]]]:
    """(local path, '/'-separated relative path, stat key) of the files new or changed since `seen`."""
    out = []
    for dirpath, _, names in os.walk(folder):
        for name in names:
            path = os.path.join(dirpath, name)
            try:
                st = os.stat(path)
            except OSError:  # removed while we looked
                continue
            key = (st.st_size, st.st_mtime_ns)
            rel = os.path.relpath(path, folder).replace(os.sep, "/")
            if seen.get(rel) != key:
                out.append((path, rel, key))
    return sorted(out, key=lambda item: item[1])


def copy_changed(storage: Storage, folder: str, run_path: str, seen: dict[str, tuple[int, int]]) -> int:
    """Copy the files of `folder` new or changed since `seen` (updated) to `run_path`; returns how many."""
    copied = 0
    for path, rel, key in _changed(folder, seen):
        try:
            storage.upload(path, f"{run_path}/{rel}")
        except FileNotFoundError:
            continue
        seen[rel] = key
        copied += 1
    return copied


def sweep_dead(older_than_s: float, tmp: str | None = None) -> list[str]:
    """Remove the staging folders of processes that are gone, untouched for `older_than_s`; returns them."""
    return orphans.sweep(PREFIX, "a run", older_than_s, tmp)


class StagedRun:
    """The local folder of one run on a remote root, kept copied to the run directory."""

    def __init__(self, storage: Storage, run_path: str, interval_s: float, *, stale_after_s: float = 3600.0) -> None:
        sweep_dead(stale_after_s)
        self.storage = storage
        self.run_path = run_path
        self.interval_s = interval_s
        self.dir = tempfile.mkdtemp(prefix=f"{PREFIX}{os.getpid()}-")
        self._seen: dict[str, tuple[int, int]] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._last_warning = 0.0
        self._watcher = _start_watcher(storage.root, run_path, self.dir)
        self._thread = threading.Thread(target=self._loop, name="hopsml-run-sync", daemon=True)
        self._thread.start()

    def sync(self) -> int:
        """Copy what changed to the run directory now (a checkpoint, a flush); returns how many files."""
        with self._lock:
            return copy_changed(self.storage, self.dir, self.run_path, self._seen)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.sync()
                os.utime(self.dir)  # the folder looks alive to sweep_dead on this host
            except Exception as exc:  # noqa: BLE001 - a failed copy is retried at the next interval
                if time.monotonic() - self._last_warning > _WARN_EVERY_S:
                    self._last_warning = time.monotonic()
                    log.warning("could not copy the run's files to %s (retried every %.0fs): %s",
                                self.storage.uri(self.run_path), self.interval_s, exc)

    def close(self) -> None:
        """Copy the last changes, then remove the folder (also when the copy fails, which is raised)."""
        self._stop.set()
        self._thread.join(_CLOSE_TIMEOUT_S)
        try:
            with self._lock:
                copy_changed(self.storage, self.dir, self.run_path, self._seen)
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)
            _release_watcher(self._watcher)


def _start_watcher(root: str, run_path: str, folder: str) -> subprocess.Popen | None:
    """A process that cleans `folder` up if this one dies first; None (with a warning) if it cannot start."""
    try:
        watcher = subprocess.Popen([sys.executable, "-m", "hopsml.tracking.staging"], stdin=subprocess.PIPE,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                   start_new_session=True, close_fds=True)
        # the root may carry credentials: through the pipe, never on the command line
        assert watcher.stdin is not None  # stdin=PIPE
        watcher.stdin.write(json.dumps({"root": root, "run": run_path, "dir": folder}).encode() + b"\n")
        watcher.stdin.flush()
    except OSError as exc:
        log.warning("no watcher for the staging folder %s (%s): if this process dies, the next run on "
                    "this host removes it", folder, exc)
        return None
    return watcher


def _release_watcher(watcher: subprocess.Popen | None) -> None:
    if watcher is None or watcher.stdin is None:
        return
    try:
        watcher.stdin.write(_DONE)
        watcher.stdin.close()
    except OSError:
        pass
    try:
        watcher.wait(_CLOSE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        log.warning("the staging watcher %d did not end; it ends by itself", watcher.pid)


def _watch(stdin: IO[bytes]) -> int:
    """The watcher: wait for the run's process to go; if it did not clean up, copy and clean."""
    job = json.loads(stdin.readline())
    # a line, not the end of the stream: a child the run forked may hold the pipe open after it ended
    if stdin.readline() == _DONE or not os.path.isdir(job["dir"]):
        return 0  # the run ended normally and cleaned up itself

    def give_up(signum: int, frame: object) -> None:
        raise TimeoutError(f"copying took more than {_WATCHER_TIMEOUT_S:.0f}s")

    signal.signal(signal.SIGALRM, give_up)
    signal.alarm(int(_WATCHER_TIMEOUT_S))
    try:
        from hopsml.fs import Storage

        copy_changed(Storage(job["root"]), job["dir"], job["run"], _remote_sizes(Storage(job["root"]), job))
    finally:
        signal.alarm(0)
        shutil.rmtree(job["dir"], ignore_errors=True)
    return 0


def _remote_sizes(storage: Storage, job: dict[str, str]) -> dict[str, tuple[int, int]]:
    """The `seen` of files already in the run directory with the local size and time (not copied again)."""
    seen = {}
    for _path, rel, key in _changed(job["dir"], {}):
        info = storage.info(f"{job['run']}/{rel}")
        if info.size == key[0]:
            seen[rel] = key
    return seen


if __name__ == "__main__":
    sys.exit(_watch(sys.stdin.buffer))
