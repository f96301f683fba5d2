"""GPU time of device collectives through CUDA events: an event pair recorded on the current stream around the
op, read only when the trace is written (reading it earlier would synchronize the stream on the hot path).
Runs only where cupy and a GPU are there: the caller passes a cupy array, so cupy is already imported."""

from __future__ import annotations

import sys
from typing import Any

from hopsml.timeline.recorder import GPU, Recorder


def start_events() -> tuple[Any, Any] | None:
    """A started (start, end) event pair on the current stream, or None without cupy."""
    cupy = sys.modules.get("cupy")
    if cupy is None:
        return None
    try:
        start, end = cupy.cuda.Event(), cupy.cuda.Event()
        start.record()
        return start, end
    except Exception:  # noqa: BLE001 - no device: no GPU span
        return None


def end_events(recorder: Recorder, events: tuple[Any, Any] | None, name: str, cpu_start: int, cpu_end: int) -> None:
    """Record the end event and keep the pair with a GPU span (its duration is filled in by `resolve`)."""
    if events is None:
        return
    try:
        events[1].record()
    except Exception:  # noqa: BLE001
        return
    recorder.span(GPU, name, cpu_start, cpu_end, {"gpu_ms": None})
    recorder.gpu_events.append((len(recorder.spans) - 1, events[0], events[1]))


def resolve(recorder: Recorder) -> None:
    """Fill the GPU spans' durations from their events (synchronizes each end event once)."""
    cupy = sys.modules.get("cupy")
    if cupy is None:
        return
    for index, start, end in recorder.gpu_events:
        try:
            end.synchronize()
            ms = float(cupy.cuda.get_elapsed_time(start, end))
        except Exception:  # noqa: BLE001
            continue
        category, name, begin, _, tid, _ = recorder.spans[index]
        recorder.spans[index] = (category, name, begin, begin + int(ms * 1e6), tid, {"gpu_ms": round(ms, 4)})
    recorder.gpu_events.clear()
