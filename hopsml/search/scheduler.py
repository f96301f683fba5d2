"""What the search loop (hopsml.runs.search_run) asks of a search strategy: a `Scheduler` hands out jobs and
learns their metrics. Schedulers are pure bookkeeping (no Spark, no files): a fixed list of points (`PointList`:
grid and random search, launch's list form, ablation), differential evolution's generations
(`evolution.Generations`), asynchronous successive halving and Hyperband (`asha.SuccessiveHalving`) and
model-based search (`tpe.ModelBased`) implement it, so the loop runs any of them the same way."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable


@dataclass(frozen=True)
class Job:
    """One run of a configuration: `key` names the configuration (its trial), `rung` the budget index."""

    key: int
    params: dict[str, Any]
    budget: float | None = None
    rung: int | None = None
    promoted: bool = False  # the configuration ran at the rung below and was promoted


@runtime_checkable
class Scheduler(Protocol):
    """A search strategy as the search loop drives it, one job per free slot.

    `budgets` are the rungs' budgets of a successive-halving search (empty for others): a trial that
    finished below the top rung counts as stopped there."""

    @property
    def budgets(self) -> Sequence[Any]:
        """The rungs' budgets, lowest first; empty where trials have no budget."""

    def restore(self, trials: list[dict[str, Any]]) -> None:
        """Take up a search from its summary (`resume=`): the ended trials are told, the running ones run again."""

    def next_job(self) -> Job | None:
        """The next job to start, or None when nothing can start now (the loop waits while jobs run, and ends
        when none runs)."""

    def job_done(self, job: Job, metric: float | None) -> None:
        """How a job ended: its metric, None when it failed."""

    def describe(self) -> dict[str, Any]:
        """What the experiment record keeps of the strategy."""


class PointList:
    """A fixed list of configurations as a scheduler (a grid, random points, an ablation study's, launch's list)."""

    budgets: Sequence[Any] = ()

    def __init__(self, points: list[dict[str, Any]]) -> None:
        self.points = points
        self._order = list(range(len(points)))   # keys still to run, in order

    def restore(self, trials: list[dict[str, Any]]) -> None:
        """Take up a search from its summary (trials in key order): the ended ones are kept, the ones that
        were running run again first, then the points never started."""
        self._order = [key for key, trial in enumerate(trials) if trial.get("state") in ("RUNNING", "PENDING")]
        self._order += list(range(len(trials), len(self.points)))

    def next_job(self) -> Job | None:
        if not self._order:
            return None
        key = self._order.pop(0)
        return Job(key, self.points[key])

    def job_done(self, job: Job, metric: float | None) -> None:
        """Nothing to learn: the points are fixed."""

    def describe(self) -> dict[str, Any]:
        return {}
