"""Heartbeats: a small file a living process rewrites every few seconds, so that a reader can tell
a run or a data job whose process was killed (SIGKILL, a lost host) from one that is still working.

One write per beat (a single PUT on S3, no rename), holding the writer's time, host and pid. A reader
takes the newer of the time inside and the file's modification time, so a beat read half written
still counts.
"""

from __future__ import annotations

import json
import logging
import os
import posixpath
import socket
import threading
import time
from datetime import datetime, timezone

from hopsml.errors import StorageError
from hopsml.fs import Storage

log = logging.getLogger(__name__)

_WARN_EVERY_S = 60.0


def beat(storage: Storage, rel: str) -> None:
    """Write one heartbeat at `rel` now."""
    data = json.dumps({"time": time.time(), "host": socket.gethostname(), "pid": os.getpid()}).encode()
    try:
        storage.overwrite_bytes(rel, data)
    except StorageError as exc:
        raise StorageError(f"cannot write the heartbeat {storage.uri(rel)}: {exc.__cause__ or exc}") from exc


def last_beat(storage: Storage, rel: str) -> float | None:
    """When the heartbeat at `rel` was last written (seconds since the epoch), or None without one."""
    info = storage.info(rel)
    if not info.is_file:
        return None
    times = []
    if info.mtime is not None:
        times.append(info.mtime.timestamp())
    try:
        stamp = json.loads(storage.read_bytes(rel)).get("time")
        if isinstance(stamp, (int, float)) and not isinstance(stamp, bool):
            times.append(float(stamp))
    except (StorageError, ValueError, AttributeError):
        pass  # read while being rewritten: the file time stands
    return max(times) if times else None


def age_text(seconds: float) -> str:
    """'42 s', '7 min', '3.5 h', '2.0 days': an age for people."""
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    if seconds < 172800:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} days"


def iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, timezone.utc).isoformat(timespec="seconds")


class Heartbeat:
    """Writes a heartbeat at `rel` every `interval_s` from a daemon thread until stopped."""

    def __init__(self, storage: Storage, rel: str, interval_s: float) -> None:
        self.storage, self.rel, self.interval_s = storage, rel, interval_s
        self._stop = threading.Event()
        self._last_warning = 0.0
        storage.makedirs(posixpath.dirname(rel))  # once (on S3 it may create the bucket), not per beat
        beat(storage, rel)  # the first one at once: a reader never sees a run without one
        self._thread = threading.Thread(target=self._loop, name="hopsml-heartbeat", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                beat(self.storage, self.rel)
            except Exception as exc:  # noqa: BLE001 - a missed beat is retried; only a long gap counts
                if time.monotonic() - self._last_warning > _WARN_EVERY_S:
                    self._last_warning = time.monotonic()
                    log.warning("heartbeat not written (retried every %.0fs): %s", self.interval_s, exc)

    def stop(self, remove: bool = False) -> None:
        """Stop beating (bounded wait); `remove` deletes the file too, for a process that ended cleanly."""
        self._stop.set()
        if self._thread is not threading.current_thread():
            self._thread.join(self.interval_s + 30.0)
        if remove:
            try:
                self.storage.delete(self.rel)
            except (OSError, StorageError) as exc:
                log.debug("could not remove the heartbeat %s: %s", self.storage.uri(self.rel), exc)

    def __enter__(self) -> Heartbeat:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop(remove=True)
