"""The rank's side of the live timeline: aligns its clock to the driver's once at start, then every
`interval_s` sends the ops recorded since the last batch (never one message per op; thinned to about a thousand
when ops are fast) with how the time before each op went, and a system sample at the start, every `system_every_s`
and at the end. Runs in a thread of its own; the hot path never waits for it."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from hopsml.timeline import clock
from hopsml.timeline.recorder import Recorder
from hopsml.timeline.system import Sampler

logger = logging.getLogger(__name__)

INTERVAL_S = 0.5
SYSTEM_EVERY_S = 2.0
MAX_BATCH_OPS = 1000  # more ops in a batch: every 2**k-th seq only (the same seqs on every rank, see `thin`)


def stride_for(count: int, limit: int = MAX_BATCH_OPS) -> int:
    """The smallest power of two that thins `count` ops to at most about `limit`."""
    stride = 1
    while count // stride > limit:
        stride *= 2
    return stride


def thin(ops: list[list[int]], limit: int = MAX_BATCH_OPS) -> list[list[int]]:
    """At most about `limit` ops: those whose seq is a multiple of the smallest power of two that gets there.

    Ranks thin independently, but power-of-two strides nest (a multiple of 8 is one of 4), so the driver still
    gets every rank's arrival for the ops of the coarsest stride in use.
    """
    stride = stride_for(len(ops), limit)
    return ops if stride == 1 else [op for op in ops if op[0] % stride == 0]


class Reporter:
    """Sends a recorder's ops to the driver in batches; `send(payload)` takes {"ops": [...], "system": {...}}."""

    def __init__(self, recorder: Recorder, send: Callable[[dict[str, Any]], None] | None,
                 ask_clock: Callable[[int], int | None] | None = None, *, interval_s: float = INTERVAL_S,
                 system_every_s: float = SYSTEM_EVERY_S) -> None:
        self.recorder, self._send, self._ask_clock = recorder, send, ask_clock
        self.interval_s, self.system_every_s = interval_s, system_every_s
        self.sampler = Sampler()
        self._sent = 0          # ops already sent
        self._input_index = 0   # input spans already attributed
        self._prev_end: int | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._next_sample = 0.0

    def align_clock(self) -> None:
        """Measure this rank's offset to the driver's clock (before the function runs)."""
        if self._ask_clock is None:
            return
        offset = clock.measure(self._ask_clock)
        if offset is None:
            logger.warning("rank %d: the driver did not answer the clock pings; the timeline uses this host's "
                           "clock unaligned", self.recorder.rank)
            return
        self.recorder.offset_ns, self.recorder.offset_error_ns = offset.ns, offset.error_ns

    def start(self) -> Reporter:
        """Align the clock, take the first system sample (so every run's samples span it from its start), then
        report from a thread of its own."""
        self.align_clock()
        try:
            self.flush()
        except Exception:
            logger.debug("first timeline batch failed", exc_info=True)
        self._thread = threading.Thread(target=self._loop, name=f"hopsml-timeline-{self.recorder.rank}",
                                        daemon=True)
        self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.flush()
            except Exception:
                logger.debug("timeline batch failed", exc_info=True)

    def pending_ops(self) -> list[list[int]]:
        """The ops since the last call, thinned as `thin` does, as [seq, arrive, wait, move, input, compute] (ns;
        arrive on the driver's clock). Only the ops kept are worked out: a loop of small all-reduces records
        hundreds of thousands a second, and this thread holds the rank's interpreter while it works."""
        rec = self.recorder
        ops, inputs = rec.ops, rec.inputs
        first, last = self._sent, len(ops)
        stride = stride_for(last - first)
        out = []
        prev_end = self._prev_end
        for i in range(first, last):
            op = ops[i]
            if op[1] % stride == 0:
                _, seq, start, peers, end, _, _ = op
                prev = prev_end if prev_end is not None else start
                waited = 0   # input waits that ended before this op, within the gap since the op before
                while self._input_index < len(inputs) and inputs[self._input_index][1] <= start:
                    a, b = inputs[self._input_index]
                    waited += max(0, min(b, start) - max(a, prev))
                    self._input_index += 1
                gap = max(0, start - prev)
                waited = min(waited, gap)
                peers = min(max(peers, start), end)
                out.append([seq, rec.to_reference_ns(start), peers - start, end - peers, waited, gap - waited])
            prev_end = op[4]
        self._prev_end = prev_end
        self._sent = last
        return out

    def flush(self) -> None:
        """Send what is new (ops, and a system sample when one is due)."""
        payload: dict[str, Any] = {"ops": self.pending_ops()}
        now = time.monotonic()
        if now >= self._next_sample:
            self._next_sample = now + self.system_every_s
            values = self.sampler.sample()
            self.recorder.counter("system", values)
            payload["system"] = values
        if self._send is not None and (payload["ops"] or "system" in payload):
            self._send(payload)

    def close(self) -> None:
        """Stop the thread and send the last batch."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
        try:
            self._next_sample = 0.0
            self.flush()
        except Exception:
            logger.debug("last timeline batch failed", exc_info=True)
