"""Clock alignment: the offset between a rank's wall clock and the reference clock (the driver's), measured as
NTP does, from pings: the rank notes t0 and sends; the reference answers with its time t1; the rank notes t2
when the answer is back. With the round trip r = t2 - t0, the reference's time at t0 + r/2 was t1, so

    offset = t1 - (t0 + t2) / 2,   error <= r / 2 (whatever way the round trip splits)

The ping with the smallest round trip gives the tightest bound; that one is kept."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import NamedTuple

PINGS = 8


class Offset(NamedTuple):
    """Add `ns` to this host's wall clock to read the reference's; `error_ns` bounds how wrong that is."""

    ns: int
    error_ns: int


def estimate(samples: Sequence[tuple[int, int, int]]) -> Offset | None:
    """The offset from (t0, t1, t2) samples: the one with the shortest round trip; None without samples."""
    valid = [s for s in samples if s[2] >= s[0]]
    if not valid:
        return None
    t0, t1, t2 = min(valid, key=lambda s: s[2] - s[0])
    return Offset(t1 - (t0 + t2) // 2, (t2 - t0 + 1) // 2)


def measure(ask: Callable[[int], int | None], pings: int = PINGS) -> Offset | None:
    """Ping `pings` times: `ask(t0)` sends t0 to the reference and returns its time t1 (None: no answer, and
    no more pings)."""
    samples = []
    for _ in range(pings):
        t0 = time.time_ns()
        t1 = ask(t0)
        t2 = time.time_ns()
        if t1 is None:
            break  # a reference that does not answer will not start to: do not wait for it again
        samples.append((t0, t1, t2))
    return estimate(samples)
