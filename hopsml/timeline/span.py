"""Spans users and hopsml's own code open: `span("name")` around any block, `input_waits` around an iterable
of batches (the time spent blocked in its `next()` is input time)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from time import perf_counter_ns
from typing import TypeVar

from hopsml.timeline import gpu as timeline_gpu
from hopsml.timeline.recorder import COMPUTE, INPUT, current

T = TypeVar("T")


@contextmanager
def span(name: str, category: str = COMPUTE, gpu: bool = False, **args: object) -> Iterator[None]:
    """Record the block as a span of this rank's timeline (a no-op when the timeline is off).

    `category` says what the time is: 'compute' (default), 'input' (waiting for data: counted as input by the
    straggler report), 'checkpoint', or any name of your own; `args` are shown with the span in the trace.
    With `gpu=True` (and cupy imported, a GPU there) the kernels the block queued on the current CUDA stream are
    timed too, by a CUDA event pair: a second span "<name> on the GPU" with the device's own duration, read
    when the trace is written, so the block does not wait for the GPU.
    """
    recorder = current()
    if recorder is None:
        yield
        return
    events = timeline_gpu.start_events() if gpu else None
    start = perf_counter_ns()
    try:
        yield
    finally:
        end = perf_counter_ns()
        recorder.span(category, name, start, end, args or None)
        timeline_gpu.end_events(recorder, events, f"{name} on the GPU", start, end)


def input_waits(batches: Iterable[T], name: str = "waiting for input") -> Iterator[T]:
    """Yield from `batches`, recording each wait for the next one as an input span."""
    recorder = current()
    if recorder is None:
        yield from batches
        return
    iterator = iter(batches)
    while True:
        start = perf_counter_ns()
        try:
            item = next(iterator)
        except StopIteration:
            return
        recorder.span(INPUT, name, start, perf_counter_ns(), None)
        yield item
