"""Warnings of one kind at most once per interval, so that a flood (of refused connections, say) logs a line
per interval with the count of those held back instead of a line per event."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

WARNING_INTERVAL_S = 10.0  # at most one warning line per this many seconds about refused connections


class RateLimitedWarning:
    """Warnings of one kind at most once per `interval_s`: the next line says how many were held
    back, and `flush` reports those still held when the activity ends."""

    def __init__(self, log: logging.Logger, interval_s: float = WARNING_INTERVAL_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._log, self._interval, self._clock = log, interval_s, clock
        self._lock = threading.Lock()
        self._last: float | None = None
        self._held = 0
        self.total = 0

    def warning(self, message: str, *args: object) -> None:
        with self._lock:
            self.total += 1
            now = self._clock()
            if self._last is not None and now - self._last < self._interval:
                self._held += 1
                return
            held, self._held, self._last = self._held, 0, now
        if held:
            message += " (and %d more like it held back in the last %.0f s)"
            args += (held, self._interval)
        self._log.warning(message, *args)

    def flush(self, what: str) -> None:
        """Log how many warnings are still held back, described as `what` (e.g. 'refused connections')."""
        with self._lock:
            held, self._held = self._held, 0
        if held:
            self._log.warning("%d more %s after the last warning (%d in all)", held, what, self.total)
