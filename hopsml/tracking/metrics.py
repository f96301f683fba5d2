"""Per-step scalar metrics: one JSON line per value in metrics.jsonl, and TensorBoard event files."""

from __future__ import annotations

import json
import math
import numbers
import os
import time
from collections.abc import Mapping
from typing import Any

from hopsml.tracking.events import EventWriter


def _as_float(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        if hasattr(value, "item"):  # numpy / cupy scalars and 0-d arrays
            value = value.item()
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise TypeError(f"metric {name!r} must be a number, got {type(value).__name__} {value!r}")
    return float(value)


class MetricsLogger:
    """Appends metrics (never rewrites) and mirrors them to a TensorBoard event file."""

    def __init__(self, jsonl_path: str, tensorboard_dir: str) -> None:
        os.makedirs(os.path.dirname(jsonl_path), exist_ok=True)
        self._file = open(jsonl_path, "a", buffering=1, encoding="utf-8")
        self._tensorboard_dir = tensorboard_dir
        self._writer: EventWriter | None = None
        self._next_step = 0
        self.last: dict[str, float] = {}

    def log(self, metrics: Mapping[str, Any], step: int | None = None) -> int:
        """Record each name -> value at `step` (default: one past the last step); returns the step."""
        if step is None:
            step = self._next_step
        step = int(step)
        values = {str(name): _as_float(name, value) for name, value in metrics.items()}
        now = time.time()
        lines = "".join(json.dumps({"step": step, "timestamp": round(now, 6), "name": name,
                                    "value": value if math.isfinite(value) else str(value)}) + "\n"
                        for name, value in values.items())
        self._file.write(lines)
        if self._writer is None:   # the event file appears with the first metric
            self._writer = EventWriter(self._tensorboard_dir)
        self._writer.add_scalars(values, step, wall_time=now)
        self.last.update(values)
        self._next_step = max(self._next_step, step + 1)
        return step

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        self._file.close()


def read_metrics(text: str) -> list[dict[str, Any]]:
    """Parse metrics.jsonl text, skipping a torn last line (a run still writing)."""
    rows = []
    for line in text.splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return rows
