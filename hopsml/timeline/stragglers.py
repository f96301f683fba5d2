"""Stragglers, named while the run goes: the driver's view of when each rank arrived at each collective.

Ranks send their ops in batches (`OpTiming`: arrival on the driver's clock, and how the time before and in the
op went). Once every rank's arrival at an op is in, the op is resolved: the rank that arrived last, and by
how much it was late (its arrival minus the next latest: what the others lost waiting for it alone). Over a
rolling window of resolved ops, a rank that was last into at least `fraction` of them, late by at least
`min_late_s` (median, and a tenth of the ops' median interval) is a straggler. Its cause is where its time
exceeds the other ranks' (medians per op over the window): input (blocked on the next batch), compute (the
time between ops that is not input), or collective (moving data, after every peer was in).

A DDP-style all-reduce evens out every rank's step time, so step times cannot show a straggler; arrivals can.
"""

from __future__ import annotations

import logging
import statistics
import threading
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from hopsml.clock import utc_now

logger = logging.getLogger(__name__)

INPUT, COMPUTE, COLLECTIVE = "input", "compute", "collective"
CAUSE_TEXT = {INPUT: "waiting for input", COMPUTE: "compute", COLLECTIVE: "moving data in collectives"}


class OpTiming(NamedTuple):
    """One rank's op, as the rank sends it: times in ns (arrival on the driver's clock)."""

    seq: int
    arrive_ns: int
    wait_ns: int      # arrival until every peer was in
    move_ns: int      # then until done
    input_ns: int     # since the previous op: blocked on the next batch
    compute_ns: int   # since the previous op: the rest


@dataclass(frozen=True)
class StragglerSettings:
    """When a rank is named: last into `fraction` of the last `window` ops, `min_late_s` late (median)."""

    window: int = 200
    fraction: float = 0.75
    min_late_s: float = 0.005
    min_ops: int = 10

    def __post_init__(self) -> None:
        if self.window < 1 or self.min_ops < 1 or not 0 < self.fraction <= 1 or self.min_late_s < 0:
            raise ValueError(f"straggler settings {self}: window and min_ops must be >= 1, fraction in (0, 1], "
                             "min_late_s >= 0")


@dataclass
class Straggler:
    """A rank named a straggler, with the numbers behind it."""

    rank: int
    fraction: float
    ops: int
    late_s: float
    cause: str
    shares: dict[str, float]

    @property
    def message(self) -> str:
        return (f"rank {self.rank} is a straggler: last into {self.fraction:.0%} of the last {self.ops} "
                f"collectives, {self.late_s * 1000:.0f} ms late (median); its extra time goes to "
                f"{CAUSE_TEXT[self.cause]} ({self.shares[self.cause]:.0%})")

    def to_json(self) -> dict[str, Any]:
        return {"rank": self.rank, "fraction": round(self.fraction, 3), "ops": self.ops,
                "late_ms": round(self.late_s * 1000, 3), "cause": self.cause,
                "shares": {k: round(v, 3) for k, v in self.shares.items()}, "message": self.message}


@dataclass
class StragglerWatch:
    """The driver's side: takes the ranks' batches (`add`), names stragglers through `announce` once per
    rank and cause, and sums up for the record (`summary`)."""

    settings: StragglerSettings = field(default_factory=StragglerSettings)
    announce: Callable[[str], None] | None = None
    _pending: dict[int, dict[int, OpTiming]] = field(default_factory=dict)
    _window: deque[tuple[int, int, dict[int, OpTiming]]] = field(default_factory=deque)  # (seq, last, timings)
    _named: dict[tuple[int, str], Straggler] = field(default_factory=dict)
    _resolved: int = 0
    _size: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, rank: int, size: int, ops: Sequence[Sequence[int]]) -> list[Straggler]:
        """A rank's batch of ops; returns the stragglers newly named by it."""
        with self._lock:
            self._size = max(self._size, size)
            for raw in ops:
                timing = OpTiming(*(int(v) for v in raw[:6]))
                arrivals = self._pending.setdefault(timing.seq, {})
                arrivals[rank] = timing
                if len(arrivals) >= self._size:
                    del self._pending[timing.seq]
                    self._resolve(timing.seq, arrivals)
            if len(self._pending) > 4 * self.settings.window:  # ops a rank never sent (it failed): forget them
                for seq in sorted(self._pending)[:len(self._pending) - 4 * self.settings.window]:
                    del self._pending[seq]
            fresh = []
            for straggler in self._check():
                key = (straggler.rank, straggler.cause)
                if key not in self._named:
                    fresh.append(straggler)
                self._named[key] = straggler
        for straggler in fresh:
            if self.announce is not None:
                logger.info("%s", straggler.message)  # the output shows it already
                self.announce(straggler.message)
            else:
                logger.warning("%s", straggler.message)
        return fresh

    def _resolve(self, seq: int, arrivals: dict[int, OpTiming]) -> None:
        order = sorted(arrivals, key=lambda r: arrivals[r].arrive_ns)
        self._window.append((seq, order[-1], arrivals))
        self._resolved += 1
        while len(self._window) > self.settings.window:
            self._window.popleft()

    def _check(self) -> list[Straggler]:
        window = list(self._window)
        if len(window) < self.settings.min_ops or self._size < 2:
            return []
        counts: dict[int, int] = {}
        for _, last, _ in window:
            counts[last] = counts.get(last, 0) + 1
        rank, count = max(counts.items(), key=lambda item: item[1])
        fraction = count / len(window)
        if fraction < self.settings.fraction:
            return []
        lates = []
        for _, last, arrivals in window:
            if last == rank:
                times = sorted(t.arrive_ns for t in arrivals.values())
                lates.append(times[-1] - times[-2])
        late_s = statistics.median(lates) / 1e9
        ordered = sorted(seq for seq, _, _ in window)
        starts = {seq: min(t.arrive_ns for t in arrivals.values()) for seq, _, arrivals in window}
        gaps = [starts[b] - starts[a] for a, b in zip(ordered, ordered[1:]) if b == a + 1]
        interval_s = statistics.median(gaps) / 1e9 if gaps else 0.0
        if late_s < max(self.settings.min_late_s, 0.1 * interval_s):
            return []
        cause, shares = self._cause(rank, window)
        return [Straggler(rank, fraction, len(window), late_s, cause, shares)]

    @staticmethod
    def _cause(rank: int, window: list[tuple[int, int, dict[int, OpTiming]]]) -> tuple[str, dict[str, float]]:
        """Where the rank's time exceeds the others' (per op medians over the window), as shares."""
        def median(values: list[int]) -> float:
            return float(statistics.median(values)) if values else 0.0

        mine: dict[str, list[int]] = {INPUT: [], COMPUTE: [], COLLECTIVE: []}
        others: dict[str, list[int]] = {INPUT: [], COMPUTE: [], COLLECTIVE: []}
        for _, _, arrivals in window:
            for r, t in arrivals.items():
                target = mine if r == rank else others
                target[INPUT].append(t.input_ns)
                target[COMPUTE].append(t.compute_ns)
                target[COLLECTIVE].append(t.move_ns)
        excess = {k: max(0.0, median(mine[k]) - median(others[k])) for k in mine}
        total = sum(excess.values())
        if total <= 0:
            return COMPUTE, {k: 1.0 / 3 for k in excess}
        shares = {k: v / total for k, v in excess.items()}
        return max(shares, key=lambda k: shares[k]), shares

    def named(self) -> list[Straggler]:
        with self._lock:
            return list(self._named.values())

    def summary(self) -> dict[str, Any]:
        """For the record: the stragglers named (latest numbers each) and how many ops were compared."""
        with self._lock:
            counts: dict[int, int] = {}
            for _, last, _ in self._window:
                counts[last] = counts.get(last, 0) + 1
            return {"named": [s.to_json() for s in self._named.values()], "ops_compared": self._resolved,
                    "last_in_window": {str(r): c for r, c in sorted(counts.items())},
                    "settings": {"window": self.settings.window, "fraction": self.settings.fraction,
                                 "min_late_s": self.settings.min_late_s},
                    "at": utc_now()}
