"""Search spaces: the parameter combinations of a grid, and bounds to sample from.

Everything is checked before any Spark job starts, with messages that name the parameter.

>>> grid({"lr": [0.1, 0.01], "dropout": [0.5]})
[{'lr': 0.1, 'dropout': 0.5}, {'lr': 0.01, 'dropout': 0.5}]
>>> space = Space.from_bounds({"layers": [1, 4], "lr": [1e-4, 1e-1], "opt": ["adam", "sgd"]}, log_scale=["lr"])
>>> sorted(space.sample(3, seed=0)[0])
['layers', 'lr', 'opt']
"""

from __future__ import annotations

import itertools
import math
import numbers
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any

from hopsml.errors import HopsmlError


class SearchSpaceError(HopsmlError, ValueError):
    """A grid or a set of bounds that cannot be searched; the message names the parameter."""


class Direction(str, Enum):
    """Whether a search maximises or minimises its metric.

    Equal to its name in either case, since hops spelled it "MAX"/"MIN" and hopsml records "max"/"min":
    ``Direction.MAX == "MAX" == "max"``. It hashes as its value ("max"), so it finds dict entries keyed
    by the lower-case strings.
    """

    MAX = "max"
    MIN = "min"

    def __eq__(self, other: object) -> bool:
        if isinstance(other, str):
            return str.lower(other) == self.value
        return NotImplemented

    def __ne__(self, other: object) -> bool:
        equal = self.__eq__(other)
        return equal if equal is NotImplemented else not equal

    def __hash__(self) -> int:
        return hash(self.value)

    @classmethod
    def _missing_(cls, value: object) -> Direction | None:  # Direction("MAX")
        if isinstance(value, str) and value.strip().lower() != value:
            return cls(value.strip().lower())
        return None

    @classmethod
    def of(cls, value: Direction | str) -> Direction:
        """The Direction for 'max'/'min' in any case, or a Direction itself."""
        if isinstance(value, Direction):
            return value
        try:
            return cls(str(value).strip().lower())
        except ValueError:
            raise SearchSpaceError(f"direction must be 'max' or 'min' (or a Direction), not {value!r}") from None

    def better(self, a: float, b: float) -> bool:
        """True when `a` is strictly better than `b`."""
        return a > b if self is Direction.MAX else a < b

    def best(self, items: Sequence[Any], key: Callable[[Any], float] = lambda x: x) -> Any:
        """The best of `items` by `key` (the first of equals), or None when there are none."""
        if not items:
            return None
        return (max if self is Direction.MAX else min)(items, key=key)


def _check_name(name: object) -> str:
    if not isinstance(name, str) or not name.isidentifier():
        raise SearchSpaceError(f"parameter name {name!r} must be a valid Python identifier "
                               "(it is passed to the training function as a keyword argument)")
    return name


def grid(grid_dict: Mapping[str, Sequence[Any]]) -> list[dict[str, Any]]:
    """Every combination of the listed values, in the order given (first key varies slowest)."""
    if not isinstance(grid_dict, Mapping) or not grid_dict:
        raise SearchSpaceError("the grid is empty: give a dict like {'lr': [0.1, 0.01], 'dropout': [0.5]}")
    for name, values in grid_dict.items():
        _check_name(name)
        if isinstance(values, (str, bytes)) or not isinstance(values, Sequence) or len(values) == 0:
            raise SearchSpaceError(f"grid values of {name!r} must be a non-empty list, got {values!r}")
    names = list(grid_dict)
    return [dict(zip(names, combo)) for combo in itertools.product(*(grid_dict[n] for n in names))]


@dataclass(frozen=True)
class Dimension:
    """One parameter: a numeric range [low, high] (ints stay ints; either order) or a list of categories."""

    name: str
    low: float | None = None
    high: float | None = None
    integer: bool = False
    log: bool = False
    categories: tuple[Any, ...] | None = None

    @classmethod
    def parse(cls, name: str, bound: object, log: bool) -> Dimension:
        _check_name(name)
        if isinstance(bound, (list, tuple)) and len(bound) == 2 and all(
                isinstance(b, numbers.Real) and not isinstance(b, bool) for b in bound):
            low, high = sorted(bound)  # hops took [high, low] too, e.g. a learning rate as [0.1, 0.001]
            integer = all(isinstance(b, numbers.Integral) for b in bound)
            if log and low <= 0:
                raise SearchSpaceError(f"{name!r} is sampled on a log scale, so its bounds must be > 0: {list(bound)}")
            return cls(name, float(low), float(high), integer, log)
        if isinstance(bound, (list, tuple)) and len(bound) > 0:
            if log:
                raise SearchSpaceError(f"{name!r} is a list of categories and cannot use a log scale")
            return cls(name, categories=tuple(bound))
        raise SearchSpaceError(f"bound of {name!r} must be [low, high] numbers or a non-empty list of "
                               f"categories, got {bound!r}")

    def _bounds(self) -> tuple[float, float]:
        if self.low is None or self.high is None:
            raise SearchSpaceError(f"{self.name!r} is a list of categories: it has no numeric bounds")
        return self.low, self.high

    def sample(self, rng: random.Random) -> Any:
        if self.categories is not None:
            return rng.choice(self.categories)
        low, high = self._bounds()
        return self.clip(math.exp(rng.uniform(math.log(low), math.log(high))) if self.log else rng.uniform(low, high))

    def clip(self, value: float) -> Any:
        """A numeric value brought inside the bounds and to the right type."""
        low, high = self._bounds()
        value = min(max(value, low), high)
        return int(round(value)) if self.integer else float(value)


@dataclass(frozen=True)
class Space:
    dimensions: tuple[Dimension, ...]

    @classmethod
    def from_bounds(cls, boundary_dict: Mapping[str, Any], log_scale: Sequence[str] = ()) -> Space:
        if not isinstance(boundary_dict, Mapping) or not boundary_dict:
            raise SearchSpaceError("the search space is empty: give a dict like {'lr': [1e-4, 1e-1]}")
        unknown = set(log_scale) - set(boundary_dict)
        if unknown:
            raise SearchSpaceError(f"log_scale names unknown parameter(s): {', '.join(sorted(unknown))}")
        return cls(tuple(Dimension.parse(name, bound, name in log_scale) for name, bound in boundary_dict.items()))

    def sample(self, samples: int, seed: int | None = None) -> list[dict[str, Any]]:
        """`samples` random points; the same seed gives the same points."""
        if not isinstance(samples, int) or samples < 1:
            raise SearchSpaceError(f"samples must be a positive integer, got {samples!r}")
        rng = random.Random(seed)
        return [{d.name: d.sample(rng) for d in self.dimensions} for _ in range(samples)]
