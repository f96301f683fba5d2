"""Asynchronous successive halving (ASHA, Li et al. 2020) and asynchronous Hyperband (brackets of ASHA).

A configuration runs first with the smallest budget (rung 0); whenever a slot is free the scheduler
promotes a configuration that is in the top 1/eta of those completed at its rung and not yet promoted
(the highest rung first), else starts a new configuration at the lowest rung. No slot ever waits for a
rung to fill, which is what makes the search asynchronous. The scheduler is pure bookkeeping: the
driver's slot threads ask it for the next job and tell it each job's metric (a `Scheduler`).

>>> budgets(1, 27, 3)
[1, 3, 9, 27]
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from hopsml.search.scheduler import Job
from hopsml.search.space import Direction, SearchSpaceError


def budgets(min_budget: float, max_budget: float, eta: float) -> list[Any]:
    """The rungs' budgets, max_budget / eta^k down to the last one >= min_budget (ints stay ints)."""
    for label, value in (("min_budget", min_budget), ("max_budget", max_budget), ("eta", eta)):
        if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
            raise SearchSpaceError(f"{label} must be a number, got {value!r}")
    if min_budget <= 0 or max_budget < min_budget:
        raise SearchSpaceError(f"the budget must satisfy 0 < min_budget <= max_budget, got min_budget={min_budget}, "
                               f"max_budget={max_budget}")
    if eta < 2:
        raise SearchSpaceError(f"eta (the reduction factor: keep the top 1/eta at each rung) must be >= 2, got {eta}")
    count = int(math.floor(math.log(max_budget / min_budget) / math.log(eta) + 1e-9)) + 1
    values = [max_budget / eta ** (count - 1 - k) for k in range(count)]
    if isinstance(min_budget, numbers.Integral) and isinstance(max_budget, numbers.Integral):
        values = [max(int(min_budget), int(round(v))) for v in values]
    return values


@dataclass
class _Bracket:
    first_rung: int
    results: dict[int, dict[int, float]] = field(default_factory=dict)   # rung -> key -> metric, completion order
    promoted: dict[int, set[int]] = field(default_factory=dict)          # rung -> keys promoted from it


class SuccessiveHalving:
    """ASHA over `budgets` (one bracket), or asynchronous Hyperband (`brackets` > 1: bracket s starts its
    configurations at rung s; new configurations go to the brackets in turn).

    `configs(i)` is the i-th new configuration; at most `num_trials` are started.
    """

    def __init__(self, configs: Callable[[int], dict[str, Any]], budgets: list[Any], *, eta: float,
                 direction: Direction, num_trials: int, brackets: int = 1, model: Any = None) -> None:
        if isinstance(num_trials, bool) or not isinstance(num_trials, int) or num_trials < 1:
            raise SearchSpaceError(f"num_trials must be a positive integer, got {num_trials!r}")
        if not 1 <= brackets <= len(budgets):
            raise SearchSpaceError(f"brackets must be between 1 and the number of rungs ({len(budgets)}), "
                                   f"got {brackets}")
        self.configs, self.budgets, self.eta, self.direction = configs, list(budgets), eta, direction
        self.num_trials = num_trials
        self.model = model   # draws new configurations from the results so far (tpe.ConfigModel); else `configs`
        self.brackets = [_Bracket(s) for s in range(brackets)]
        self.params: list[dict[str, Any]] = []
        self.bracket_of: list[int] = []
        self.events: list[dict[str, Any]] = []   # every start and promotion, in order (the record keeps them)
        self._pending: list[Job] = []   # jobs a resumed search runs again first

    def restore(self, trials: list[dict[str, Any]]) -> None:
        """Take up a search from its summary (trials in key order, each with the rungs it completed): their
        results and promotions count as if run here; a trial whose rung did not end (its driver was killed)
        runs that rung again before anything else."""
        for key, trial in enumerate(trials):
            bracket = self.brackets[key % len(self.brackets)]
            self.params.append(dict(trial["params"]))
            self.bracket_of.append(bracket.first_rung)
            entries = [e for e in trial.get("rungs") or [] if isinstance(e, dict)]
            for entry in entries:
                rung = int(entry["rung"])
                self.events.append({"event": "promote" if rung > bracket.first_rung else "start", "trial": key,
                                    "rung": rung, "resumed": True})
                if rung > bracket.first_rung:
                    bracket.promoted.setdefault(rung - 1, set()).add(key)
                if entry.get("metric") is not None:
                    bracket.results.setdefault(rung, {})[key] = float(entry["metric"])
            if trial.get("state") in ("RUNNING", "PENDING"):
                rung = int(entries[-1]["rung"]) + 1 if entries else bracket.first_rung
                if rung > bracket.first_rung:
                    bracket.promoted.setdefault(rung - 1, set()).add(key)
                self._pending.append(Job(key, self.params[key], self.budgets[rung], rung,
                                         promoted=rung > bracket.first_rung))

    @property
    def top(self) -> int:
        return len(self.budgets) - 1

    def _promotable(self, bracket: _Bracket) -> tuple[int, int] | None:
        """(key, rung) of a configuration in the top 1/eta of its rung, not yet promoted; highest rung first."""
        for rung in range(self.top - 1, bracket.first_rung - 1, -1):
            done = bracket.results.get(rung, {})
            keep = int(len(done) // self.eta)
            if keep == 0:
                continue
            sign = -1.0 if self.direction is Direction.MAX else 1.0
            ranked = sorted(done, key=lambda key: sign * done[key])   # stable: ties go to the earlier result
            promoted = bracket.promoted.setdefault(rung, set())
            for key in ranked[:keep]:
                if key not in promoted:
                    return key, rung
        return None

    def next_job(self) -> Job | None:
        """The job for a free slot: a promotion if one is due, else a new configuration; None when
        neither exists now (a job still running may make a promotion due)."""
        if self._pending:
            job = self._pending.pop(0)
            self.events.append({"event": "restart", "trial": job.key, "rung": job.rung})
            return job
        for bracket in self.brackets:
            found = self._promotable(bracket)
            if found is not None:
                key, rung = found
                bracket.promoted[rung].add(key)
                self.events.append({"event": "promote", "trial": key, "rung": rung + 1})
                return Job(key, self.params[key], self.budgets[rung + 1], rung + 1, promoted=True)
        if len(self.params) >= self.num_trials:
            return None
        key = len(self.params)
        bracket = self.brackets[key % len(self.brackets)]
        self.params.append(dict(self.model.draw(key, self._reached()) if self.model else self.configs(key)))
        self.bracket_of.append(bracket.first_rung)
        self.events.append({"event": "start", "trial": key, "rung": bracket.first_rung})
        return Job(key, self.params[key], self.budgets[bracket.first_rung], bracket.first_rung)

    def _reached(self) -> list[tuple[dict[str, Any], int, float]]:
        """Every configuration with a result: its params, the highest rung it completed, its metric there."""
        best: dict[int, tuple[int, float]] = {}
        for bracket in self.brackets:
            for rung, done in bracket.results.items():
                for key, metric in done.items():
                    if key not in best or rung > best[key][0]:
                        best[key] = (rung, metric)
        return [(self.params[key], rung, metric) for key, (rung, metric) in sorted(best.items())]

    def job_done(self, job: Job, metric: float | None) -> None:
        """A job ended: its metric joins its rung (a failed job, None, is never promoted)."""
        if metric is None or job.rung is None:
            return
        bracket = self.brackets[self.bracket_of[job.key]]
        bracket.results.setdefault(job.rung, {})[job.key] = metric

    def describe(self) -> dict[str, Any]:
        """What the experiment record keeps: the rungs, the brackets and how many promotions each rung made."""
        drawn = {"sampler": "tpe", "modelled_configs": self.model.modelled} if self.model else {"sampler": "random"}
        return {**drawn, "budgets": self.budgets, "eta": self.eta, "brackets": len(self.brackets),
                "promotions": sum(e["event"] == "promote" for e in self.events), "schedule": self.events}
