"""Differential evolution (DE/rand/1/bin), as hops offers it: each generation is one parallel batch of
trials; a trial replaces its parent when it scores better."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

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
