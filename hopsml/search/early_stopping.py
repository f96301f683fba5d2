"""Median stopping: end a trial whose best value so far is worse than the median of what completed
trials had reached by the same step (Google Vizier's rule)."""

from __future__ import annotations

import statistics
import threading
from collections.abc import Hashable

from hopsml.search.space import Direction, SearchSpaceError

RULES = ("median",)


class MedianStoppingRule:
    """Fed every intermediate value; answers whether that trial should stop now."""

    def __init__(self, direction: Direction, min_steps: int = 3, min_completed: int = 2) -> None:
        if min_steps < 1 or min_completed < 1:
            raise SearchSpaceError("early stopping needs min_steps >= 1 and min_completed >= 1")
        self.direction, self.min_steps, self.min_completed = direction, min_steps, min_completed
        self._history: dict[Hashable, list[tuple[int, float]]] = {}
        self._completed: list[Hashable] = []
        self._lock = threading.Lock()

    def _best(self, trial: Hashable, up_to_step: int) -> float | None:
        values = [v for s, v in self._history.get(trial, []) if s <= up_to_step]
        if not values:
            return None
        return max(values) if self.direction is Direction.MAX else min(values)

    def report(self, trial: Hashable, step: int, value: float) -> bool:
        """Record `value` at `step`; True when the trial should stop."""
        with self._lock:
            self._history.setdefault(trial, []).append((step, value))
            if step + 1 < self.min_steps:
                return False
            reference = [b for t in self._completed if (b := self._best(t, step)) is not None]
            if len(reference) < self.min_completed:
                return False
            mine = self._best(trial, step)
            return mine is not None and self.direction.better(statistics.median(reference), mine)

    def complete(self, trial: Hashable) -> None:
        """A trial ran to its end: its curve becomes part of the reference."""
        with self._lock:
            if trial in self._history and trial not in self._completed:
                self._completed.append(trial)
