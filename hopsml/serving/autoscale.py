"""Scaling a serving's instances with its load, as Knative scales a KServe predictor on concurrency.

The load is each instance's number of requests in flight (from a request's arrival, whole, to its answer),
integrated over time: an instance keeps, in its slot of a memory file that its supervisor made (a memfd,
inherited), that integral, the time of the last change, the count now and the requests answered. Two writes of a
few floats per request (under a microsecond); the supervisor reads the slots twice a second, without asking the
instances anything. The average concurrency over a window is then the integral's growth divided by the window
(Little's law, exact rather than sampled).

The policy is Knative's: the wanted number of instances is the average concurrency over the stable window divided
by the target per instance, rounded up, within [min, max]; over the panic window (a tenth of it) a burst scales out
at once, while scaling in waits for the stable window. With `min_instances=0` a serving with no request for a whole
window goes to zero instances; the supervisor then watches the port and starts an instance on the first connection,
which waits in the listen backlog until the instance has loaded the model (the cold start, recorded).
"""

from __future__ import annotations

import math
import mmap
import os
import time
from collections import deque
from dataclasses import dataclass

SLOT_FLOATS = 4          # in-flight integral (request-seconds), last change (monotonic s), in flight, answered
TICK_S = 0.5             # how often the supervisor reads the load and decides
PANIC_SHARE = 0.1        # the panic window's share of the stable window (Knative's 6 s of 60 s)


def make_load_file(slots: int) -> int:
    """The memory file the instances write their load into: an fd for the supervisor to pass them."""
    fd = os.memfd_create("hopsml-serving-load", 0)
    os.ftruncate(fd, slots * SLOT_FLOATS * 8)
    return fd


class LoadMeter:
    """An instance's side: its HTTP server tells it when each request arrives and is answered."""

    def __init__(self, fd: int, index: int) -> None:
        self._map = mmap.mmap(fd, 0)
        self.slot = memoryview(self._map).cast("d")
        self.base = index * SLOT_FLOATS
        now = time.monotonic()
        self.slot[self.base:self.base + SLOT_FLOATS] = memoryview(bytes(8 * SLOT_FLOATS)).cast("d")
        self.slot[self.base + 1] = now

    def begin(self) -> None:
        """A request arrived whole (it may wait behind others: it counts from now)."""
        slot, i, now = self.slot, self.base, time.monotonic()
        slot[i] += slot[i + 2] * (now - slot[i + 1])
        slot[i + 1] = now
        slot[i + 2] += 1.0

    def end(self) -> None:
        """Its answer is ready (or its connection was lost before it began)."""
        slot, i, now = self.slot, self.base, time.monotonic()
        slot[i] += slot[i + 2] * (now - slot[i + 1])
        slot[i + 1] = now
        slot[i + 2] -= 1.0
        slot[i + 3] += 1.0


class LoadReader:
    """The supervisor's side: the serving's total integral and requests, steady across instances that end and start
    again in a slot (a slot that went back to zero was restarted: its new count is all growth)."""

    def __init__(self, fd: int, slots: int) -> None:
        self._map = mmap.mmap(fd, slots * SLOT_FLOATS * 8)
        self.slot = memoryview(self._map).cast("d")
        self.slots = slots
        self.last = [(0.0, 0.0)] * slots
        self.integral = 0.0
        self.requests = 0.0

    def read(self, now: float) -> tuple[float, float]:
        """The integral of in-flight requests (request-seconds) and the requests answered, since the start."""
        for index in range(self.slots):
            base = index * SLOT_FLOATS
            integral, changed, in_flight, answered = self.slot[base:base + SLOT_FLOATS]
            integral += in_flight * max(0.0, now - changed) if changed else 0.0
            last_integral, last_answered = self.last[index]
            if integral < last_integral or answered < last_answered:   # a new instance in this slot
                last_integral, last_answered = 0.0, 0.0
            self.integral += integral - last_integral
            self.requests += answered - last_answered
            self.last[index] = (integral, answered)
        return self.integral, self.requests

    def clear(self, index: int) -> None:
        """Zero a slot before an instance starts in it."""
        base = index * SLOT_FLOATS
        self.slot[base:base + SLOT_FLOATS] = memoryview(bytes(8 * SLOT_FLOATS)).cast("d")
        self.last[index] = (0.0, 0.0)

    def close(self) -> None:
        self.slot.release()
        self._map.close()


@dataclass(frozen=True)
class Policy:
    """A serving's scaling bounds and target (KServe's minReplicas, maxReplicas, scaleTarget on concurrency)."""

    min_instances: int
    max_instances: int
    target: float          # concurrent requests per instance
    window_s: float        # the stable window; scale-to-zero waits this long without a request

    @property
    def enabled(self) -> bool:
        return self.max_instances > self.min_instances


class Autoscaler:
    """Decides, from the load read every TICK_S, how many instances a serving wants."""

    def __init__(self, policy: Policy, now: float) -> None:
        self.policy = policy
        self.samples: deque[tuple[float, float, float]] = deque()   # (time, integral, requests)
        self.started = now

    def observe(self, now: float, integral: float, requests: float) -> None:
        self.samples.append((now, integral, requests))
        while len(self.samples) > 2 and self.samples[1][0] <= now - self.policy.window_s:
            self.samples.popleft()

    def concurrency(self, window_s: float) -> tuple[float, float, float]:
        """Average concurrency and requests over the last `window_s` (or what has been seen of it), and its span."""
        if len(self.samples) < 2:
            return 0.0, 0.0, 0.0
        t1, integral1, requests1 = self.samples[-1]
        first = self.samples[0]
        for sample in self.samples:
            if sample[0] >= t1 - window_s:
                first = sample
                break
        span = t1 - first[0]
        if span <= 0:
            return 0.0, 0.0, 0.0
        return (integral1 - first[1]) / span, requests1 - first[2], span

    def wanted(self, current: int, now: float) -> tuple[int, str]:
        """How many instances to run now, and why (for the scaling record)."""
        p = self.policy
        stable, requests, span = self.concurrency(p.window_s)
        panic_s = max(TICK_S * 2, p.window_s * PANIC_SHARE)
        panic, _, _ = self.concurrency(panic_s)
        if current == 0 and p.min_instances == 0 and panic == 0:
            return 0, ""   # scaled to zero and idle: the next connection wakes it (the supervisor's wake)
        floor = max(p.min_instances, 1)
        by_panic = min(p.max_instances, max(floor, math.ceil(panic / p.target - 1e-9)))
        if by_panic > current:
            return by_panic, f"concurrency {panic:.1f} over the last {panic_s:g} s " \
                             f"(target {p.target:g} per instance)"
        full_window = span >= p.window_s - TICK_S and now - self.started >= p.window_s
        if not full_window:
            return current, ""
        if p.min_instances == 0 and requests == 0 and stable == 0 and current > 0:
            return 0, f"no request for {p.window_s:g} s"
        by_stable = min(p.max_instances, max(floor, math.ceil(stable / p.target - 1e-9)))
        if current and by_stable < current:
            return by_stable, f"concurrency {stable:.1f} over the last {p.window_s:g} s (target {p.target:g} " \
                              "per instance)"
        return current, ""

    def changed(self, now: float) -> None:
        """A scaling step was taken: scaling in waits for a whole window of the new count's load."""
        self.started = now
