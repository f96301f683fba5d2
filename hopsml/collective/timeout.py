"""How long a collective waits for its peers: the setting, and a deadline that can say what it guarded."""

from __future__ import annotations

import math
import os
import time

from hopsml.errors import CollectiveError, SettingsError

DEFAULT_TIMEOUT_S = 300.0
TIMEOUT_ENV = "HOPSML_COLLECTIVE_TIMEOUT_S"


def resolve_timeout(timeout_s: float | None = None) -> float:
    """The collective timeout in seconds: the argument, else $HOPSML_COLLECTIVE_TIMEOUT_S, else 300."""
    if timeout_s is not None:
        value, source = timeout_s, "the timeout_s argument"
    elif os.environ.get(TIMEOUT_ENV, "").strip():
        raw = os.environ[TIMEOUT_ENV].strip()
        source = f"the environment variable {TIMEOUT_ENV}"
        try:
            value = float(raw)
        except ValueError:
            raise SettingsError(f"{source} is {raw!r}, which is not a number of seconds; "
                                f"set it to a positive number such as 300") from None
    else:
        return DEFAULT_TIMEOUT_S
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise SettingsError(f"{source} is {value!r}; the collective timeout must be a positive number of seconds")
    return float(value)


class Timeout:
    """A deadline for one activity; its error message names the activity and what to check."""

    def __init__(self, seconds: float, activity: str) -> None:
        self.seconds = seconds
        self.activity = activity
        self._deadline = time.monotonic() + seconds

    def remaining(self) -> float:
        """Seconds left, never negative."""
        return max(0.0, self._deadline - time.monotonic())

    def expired(self) -> bool:
        return self.remaining() <= 0.0

    def error(self, detail: str = "") -> CollectiveError:
        """The error to raise when the deadline passed."""
        message = f"timed out after {self.seconds:g} s waiting for {self.activity}"
        if detail:
            message += f" ({detail})"
        return CollectiveError(message + "; check that every rank started, that the ranks can reach each "
                               f"other, and raise {TIMEOUT_ENV} if they need longer")
