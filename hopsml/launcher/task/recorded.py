"""Task side of a run's timeline: record a rank's (or a launched function's) timeline around its function,
with clock pings and batches to the driver on a channel connection of the timeline's own, and the rank's trace
part written into the run folder at the end. Used by the allreduce ranks (with their communicator) and by
`run_function(timeline=True)` (experiment.launch: spans, reader waits, checkpoint saves, system metrics)."""

from __future__ import annotations

import os
import queue
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from hopsml.launcher.channel import TaskChannel
from hopsml.launcher.messages import Clock, Timing, decode, to_wire
from hopsml.launcher.spec import TaskSpec
from hopsml.layout import TIMELINE
from hopsml.timeline.merge import new_part
from hopsml.timeline.rank_timeline import rank_timeline
from hopsml.tracking.run_context import current_or_none

_CLOCK_WAIT_S = 2.0


@contextmanager
def recorded(rank: int, world_size: int, spec: TaskSpec, comm: object = None) -> Iterator[None]:
    """Record this rank's timeline for the block (and `comm`'s collective ops, when given); inside the run's
    context (`active_run`), whose folder gets the rank's part `timeline/rank-<rank>.json`."""
    channel = TaskChannel.connect(spec.channel_address, spec.secret) if spec.channel_address else None
    ctx = current_or_none()

    def send(payload: dict[str, Any]) -> None:
        if channel is not None:
            channel.send(to_wire(Timing(rank, world_size, payload["ops"], payload.get("system"))))

    def ask_clock(t0: int) -> int | None:
        if channel is None:
            return None
        channel.send(to_wire(Clock(rank, t0)))
        try:
            answer = decode(channel.inbox.get(timeout=_CLOCK_WAIT_S))
        except queue.Empty:
            return None
        return answer.t1 if isinstance(answer, Clock) and answer.t0 == t0 else None

    def write_part(data: bytes) -> None:
        if ctx is None:
            return
        folder = os.path.join(ctx.local_dir, TIMELINE)
        os.makedirs(folder, exist_ok=True)
        # a search trial run again for a promoted rung keeps the parts of its earlier runs; a run's own
        # retried attempt replaces its part
        path = (new_part(folder, rank, world_size) if spec.trial is not None
                else os.path.join(folder, f"rank-{rank}.json"))
        with open(path, "wb") as out:
            out.write(data)

    try:
        with rank_timeline(rank, world_size, send=send, ask_clock=ask_clock if channel else None,
                           write_part=write_part, comm=comm):
            yield
    finally:
        if channel is not None:
            channel.close()
