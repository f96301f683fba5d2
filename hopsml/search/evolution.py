"""Differential evolution (DE/rand/1/bin), as hops offers it: each generation's trials run in parallel; a
trial replaces its parent when it scores better. `Generations` runs it as a search scheduler."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from hopsml.search.scheduler import Job
from hopsml.search.space import Direction, SearchSpaceError, Space


@dataclass
class Member:
    params: dict[str, Any]
    metric: float | None  # None: the trial failed, worse than any score


class DifferentialEvolution:
    def __init__(self, space: Space, *, population: int, mutation: float, crossover: float,
                 direction: Direction, seed: int | None = None) -> None:
        if population < 4:
            raise SearchSpaceError(f"differential evolution needs a population of at least 4, got {population}")
        if not 0 <= crossover <= 1 or not 0 < mutation <= 2:
            raise SearchSpaceError(f"crossover must be in [0, 1] and mutation in (0, 2], got "
                                   f"crossover={crossover}, mutation={mutation}")
        self.space, self.population, self.mutation, self.crossover = space, population, mutation, crossover
        self.direction = direction
        self.rng = random.Random(seed)
        self.seed = seed

    def initial(self) -> list[dict[str, Any]]:
        return self.space.sample(self.population, self.seed)

    def _better(self, a: float | None, b: float | None) -> bool:
        return a is not None and (b is None or self.direction.better(a, b))

    def offspring(self, members: list[Member]) -> list[dict[str, Any]]:
        """One trial vector per member: mutate three others, cross over with the member."""
        trials = []
        for i, target in enumerate(members):
            a, b, c = self.rng.sample([m for j, m in enumerate(members) if j != i], 3)
            forced = self.rng.randrange(len(self.space.dimensions))
            child = {}
            for k, dim in enumerate(self.space.dimensions):
                if k != forced and self.rng.random() > self.crossover:
                    child[dim.name] = target.params[dim.name]
                elif dim.categories is not None:
                    child[dim.name] = self.rng.choice([a, b, c]).params[dim.name]
                else:
                    mutant = a.params[dim.name] + self.mutation * (b.params[dim.name] - c.params[dim.name])
                    child[dim.name] = dim.clip(mutant)
            trials.append(child)
        return trials

    def select(self, members: list[Member], trials: list[Member]) -> list[Member]:
        return [trial if self._better(trial.metric, member.metric) else member
                for member, trial in zip(members, trials)]


class Generations:
    """Differential evolution as a `Scheduler`: a generation's trials are handed out at once and run in
    parallel; the next generation is proposed when every trial of this one has ended (synchronous, as DE is).
    Keys count the trials in order, generation after generation. `best_per_generation` gets each
    generation's best metric as it ends."""

    budgets: tuple[Any, ...] = ()

    def __init__(self, evolution: DifferentialEvolution, generations: int,
                 best_per_generation: list[float | None]) -> None:
        self.evolution, self.generations, self.best_per_generation = evolution, generations, best_per_generation
        self._population: list[Member] | None = None
        self._points = evolution.initial()
        self._base = 0                                   # the key of this generation's first trial
        self._todo = list(range(len(self._points)))      # this generation's trials not handed out yet
        self._ended: dict[int, float | None] = {}        # this generation's ended trials: index -> metric

    def next_job(self) -> Job | None:
        if not self._todo:
            return None   # the rest of the generation runs; the next comes when it has ended
        index = self._todo.pop(0)
        return Job(self._base + index, self._points[index])

    def job_done(self, job: Job, metric: float | None) -> None:
        self._ended[job.key - self._base] = metric
        if len(self._ended) == len(self._points):
            self._next_generation()

    def _next_generation(self) -> None:
        members = [Member(params, self._ended[i]) for i, params in enumerate(self._points)]
        self._population = members if self._population is None else self.evolution.select(self._population, members)
        scored = [m.metric for m in self._population if m.metric is not None]
        self.best_per_generation.append(self.evolution.direction.best(scored) if scored else None)
        if len(self.best_per_generation) < self.generations:
            self._base += len(self._points)
            self._points = self.evolution.offspring(self._population)
            self._todo, self._ended = list(range(len(self._points))), {}
        else:
            self._points, self._todo, self._ended = [], [], {}

    def restore(self, trials: list[dict[str, Any]]) -> None:
        """Take up a search from its summary (trials in key order): generations are proposed again alike (the
        same seed, the same metrics); the trials that ended keep their metrics, the others run again."""
        while self._points:
            base = self._base
            recorded = trials[base:base + len(self._points)]
            rerun = [i for i, t in enumerate(recorded) if t.get("state") in ("RUNNING", "PENDING")]
            self._todo = rerun + list(range(len(recorded), len(self._points)))
            for i, trial in enumerate(recorded):
                if i not in rerun:
                    metric = trial.get("metric") if trial.get("state") == "FINISHED" else None
                    self.job_done(Job(base + i, self._points[i]), metric)
            if self._base == base:
                return   # this generation still has trials to run

    def describe(self) -> dict[str, Any]:
        return {}
