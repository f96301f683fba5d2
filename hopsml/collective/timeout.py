"""How long a collective waits for its peers: the setting, and a deadline that can say what it guarded."""

from __future__ import annotations

import time

from hopsml import config
from hopsml.errors import CollectiveError

DEFAULT_TIMEOUT_S = float(config.default("collective_timeout_s"))   # the settings table's, written there once
TIMEOUT_ENV = config.ENV_PREFIX + "COLLECTIVE_TIMEOUT_S"


def resolve_timeout(timeout_s: float | None = None) -> float:
    """The collective timeout in seconds: the argument, else the collective_timeout_s setting
    ($HOPSML_COLLECTIVE_TIMEOUT_S, conf/hopsml.toml), else its default; for ranks connected without the launcher,
    which passes its run's snapshot instead."""
    return float(config.value("collective_timeout_s", timeout_s))


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
