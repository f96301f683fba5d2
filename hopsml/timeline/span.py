"""Spans users and hopsml's own code open: `span("name")` around any block, `input_waits` around an iterable
of batches (the time spent blocked in its `next()` is input time)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from time import perf_counter_ns
from typing import Any, TypeVar

from hopsml.timeline.recorder import COMPUTE, INPUT, current

T = TypeVar("T")


@contextmanager
def span(name: str, category: str = COMPUTE, **args: Any) -> Iterator[None]:
    """Record the block as a span of this rank's timeline (a no-op when the timeline is off).

    `category` says what the time is: 'compute' (default), 'input' (waiting for data: counted as input by the
    straggler report), 'checkpoint', or any name of your own; `args` are shown with the span in the trace.
    """
    recorder = current()
    if recorder is None:
        yield
        return
    start = perf_counter_ns()
    try:
        yield
    finally:
        recorder.span(category, name, start, perf_counter_ns(), args or None)


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
