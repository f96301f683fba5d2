"""Repeated failures logged once: a client that sends the same bad request 2,000 times must not write 2,000
tracebacks into the serving's log (6 MB in 3 s, measured). The first failure of each kind (exception type and
the line that raised it) is logged whole; repeats within the window are counted, and the count is logged in one
line when that kind next fails after the window."""

from __future__ import annotations

import logging
import time
import traceback

_KINDS = 1000   # kinds remembered at most: a client cannot grow the table without bound


class RepeatedFailures:
    """`exception(message, exc)` in place of `log.exception(message)`, for failures that clients can repeat."""

    def __init__(self, log: logging.Logger, window_s: float = 60.0) -> None:
        self.log = log
        self.window_s = window_s
        self.seen: dict[tuple[str, str], list[float]] = {}   # kind -> [when its traceback was logged, repeats since]

    def exception(self, message: str, exc: BaseException, *args: object) -> None:
        kind = (type(exc).__name__, _where(exc))
        now = time.monotonic()
        entry = self.seen.get(kind)
        if entry is not None and now - entry[0] < self.window_s:
            entry[1] += 1
            return
        if entry is not None and entry[1]:
            self.log.error("%s at %s happened %d more times in %.0f s (traceback logged once)", kind[0], kind[1],
                           int(entry[1]), now - entry[0])
        if len(self.seen) >= _KINDS:
            self.seen.clear()
        self.seen[kind] = [now, 0]
        self.log.error(message, *args, exc_info=exc)


def _where(exc: BaseException) -> str:
    """The file and line that raised `exc` (its innermost frame)."""
    frames = traceback.extract_tb(exc.__traceback__)
    return f"{frames[-1].filename}:{frames[-1].lineno}" if frames else "?"
