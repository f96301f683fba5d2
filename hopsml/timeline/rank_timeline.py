"""A rank's timeline for the length of its function: record, report live, write its part at the end."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from hopsml.timeline import chrome, gpu
from hopsml.timeline.recorder import Recorder, recording
from hopsml.timeline.reporter import Reporter

logger = logging.getLogger(__name__)


@contextmanager
def rank_timeline(rank: int, size: int, *, send: Callable[[dict[str, Any]], None] | None = None,
                  ask_clock: Callable[[int], int | None] | None = None,
                  write_part: Callable[[bytes], None] | None = None, comm: Any = None) -> Iterator[Recorder]:
    """Record this rank's timeline inside the block (and the communicator's ops, when `comm` is given);
    batches go to `send`; at the end the rank's Chrome trace part goes to `write_part`."""
    recorder = Recorder(rank, size)
    reporter = Reporter(recorder, send, ask_clock).start()
    if comm is not None:
        comm.attach_timeline(recorder)
    try:
        with recording(recorder):
            yield recorder
    finally:
        if comm is not None:
            comm.attach_timeline(None)
        reporter.close()
        if write_part is not None:
            try:
                gpu.resolve(recorder)
                write_part(json.dumps(chrome.rank_trace(recorder), separators=(",", ":")).encode())
            except Exception as exc:  # noqa: BLE001 - the run's result matters more than its timeline
                logger.warning("rank %d: its timeline could not be written (%s)", rank, exc)
