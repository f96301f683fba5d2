"""What a serving's request saw, noted for its inference log: the rows the app read, and what the model got
(after a transformer, or the feature vectors a predictor looked up). The serving's logging wrapper opens a
note per request (`noting`); code deeper down (the protocol, a transformer, a feature view serving vectors)
adds to it with `note`, which does nothing outside a logged request. Here, at the bottom of the layers, so that
the feature store can note its vectors without importing the serving."""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
from typing import Any

_seen: contextvars.ContextVar[dict[str, Any] | None] = contextvars.ContextVar("hopsml_request_notes", default=None)


def note(**seen: object) -> None:
    """Add to the note of the request being answered (nothing when there is none)."""
    holder = _seen.get()
    if holder is not None:
        holder.update(seen)


@contextlib.contextmanager
def noting() -> Iterator[dict[str, Any]]:
    """A note for the request answered inside the block: what `note` was given meanwhile."""
    holder: dict[str, Any] = {}
    token = _seen.set(holder)
    try:
        yield holder
    finally:
        _seen.reset(token)
