"""The wall-clock time hopsml's records carry: UTC, ISO 8601, milliseconds, one form for every record (experiments,
jobs and their executions, datasets, models, servings), so records sort and compare alike."""

from __future__ import annotations

from datetime import datetime, timezone


def utc_now() -> str:
    """Now, as a record writes it.

    >>> len(utc_now()), utc_now().endswith("+00:00")
    (29, True)
    """
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")
