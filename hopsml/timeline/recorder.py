"""One rank's timeline: the spans it records while it runs, kept as plain tuples in lists.

The hot path (a collective op, a reader wait) costs two or three `perf_counter_ns` calls and one
`list.append` of a tuple: no dict, no lock, no I/O. Appends come from the training thread (and the torch
gradient thread); the reporter thread only reads what is there (`list` appends and slices are atomic in
CPython). Everything is turned into events later (`chrome`), off the hot path.

`current()` is the recorder of this rank (a context variable set by `recording`, with a process default
for ranks started by hand), or None when nothing records: every hook checks that first.
"""

from __future__ import annotations

import time
from _thread import get_ident
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, NamedTuple

# span categories: what a span's time is, for the trace's colours and the straggler's cause
INPUT = "input"          # blocked on the next batch
COMPUTE = "compute"      # the user's own spans (and framework steps)
CHECKPOINT = "checkpoint"
COLLECTIVE = "collective"
GPU = "gpu"
GRADIENTS = "gradients"  # hopsml.torch: a gradient bucket reduced, the training thread waiting for them

MAX_RECORDS = 1_000_000  # per list (~120 MB at most): a run that records more keeps its first ones, counts the rest


class Op(NamedTuple):
    """One collective op as recorded: arrival (start), all peers' headers in (peers), done (end)."""

    kind: str
    seq: int
    start: int
    peers: int
    end: int
    nbytes: int
    tid: int


class Span(NamedTuple):
    category: str
    name: str
    start: int
    end: int
    tid: int
    args: dict[str, Any] | None


class Recorder:
    """The spans of one rank, with the clock anchor that maps them onto wall-clock time."""

    def __init__(self, rank: int = 0, size: int = 1, capacity: int = MAX_RECORDS) -> None:
        self.rank, self.size, self.capacity = rank, size, capacity
        self.ops: list[tuple[str, int, int, int, int, int, int]] = []
        self.spans: list[tuple[str, str, int, int, int, dict[str, Any] | None]] = []
        self.inputs: list[tuple[int, int]] = []  # (start, end) of every input wait, for the straggler's cause
        self.counters: list[tuple[str, int, dict[str, float]]] = []  # system samples: (name, ns, values)
        self.dropped = 0
        self.started = time.perf_counter_ns()
        # the same instant on both clocks: perf_counter (spans) and the wall clock (shared between hosts)
        self.anchor_perf, self.anchor_wall = time.perf_counter_ns(), time.time_ns()
        self.offset_ns = 0      # add to this rank's wall clock to get the reference clock (the driver's)
        self.offset_error_ns: int | None = None  # half the best ping's round trip: the offset's error bound
        # how this rank's collectives move data: small / large / broadcast, and the size where large begins
        self.paths: dict[str, str | int] = {}
        self.gpu_events: list[tuple[int, Any, Any]] = []  # (index into spans, start event, end event)

    def op(self, kind: str, seq: int, start: int, peers: int, end: int, nbytes: int) -> None:
        """A collective op ended (the communicator's hook)."""
        ops = self.ops
        if len(ops) < self.capacity:
            ops.append((kind, seq, start, peers, end, nbytes, get_ident()))
        else:
            self.dropped += 1

    def span(self, category: str, name: str, start: int, end: int, args: dict[str, Any] | None = None) -> None:
        """A span ended; input waits are also kept aside for the straggler's cause."""
        if len(self.spans) < self.capacity:
            self.spans.append((category, name, start, end, get_ident(), args))
            if category == INPUT:
                self.inputs.append((start, end))
        else:
            self.dropped += 1

    def counter(self, name: str, values: dict[str, float]) -> None:
        """A sample of counters (CPU %, RSS, bytes sent...) taken now."""
        if len(self.counters) < self.capacity:
            self.counters.append((name, time.perf_counter_ns(), values))

    def to_reference_ns(self, perf_ns: int) -> int:
        """A perf_counter_ns reading of this rank as nanoseconds of the reference (driver's) wall clock."""
        return self.anchor_wall + (perf_ns - self.anchor_perf) + self.offset_ns


_current: ContextVar[Recorder | None] = ContextVar("hopsml_timeline_recorder", default=None)


class _ProcessDefault:
    """The recorder installed for the whole process (threads the rank starts do not inherit context)."""

    def __init__(self) -> None:
        self.recorder: Recorder | None = None


_process = _ProcessDefault()


def current() -> Recorder | None:
    """This rank's recorder, or None when the timeline is off (or outside a run)."""
    return _current.get() or _process.recorder


@contextmanager
def recording(recorder: Recorder) -> Iterator[Recorder]:
    """Make `recorder` this rank's recorder for the block (also for threads started inside it)."""
    token = _current.set(recorder)
    previous, _process.recorder = _process.recorder, recorder
    try:
        yield recorder
    finally:
        _process.recorder = previous
        _current.reset(token)
