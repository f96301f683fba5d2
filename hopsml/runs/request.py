"""What a verb asks of the engine, as one frozen value each: a run request (the function and what its record
says of the call) and a search request (a run request with the space, the goal, the strategy with its scheduler,
how its jobs use the slots, and the rule that stops trials early). The verbs in `hopsml.experiment` build them;
the engine reads their fields."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from hopsml.layout import ExperimentDir
from hopsml.search.early_stopping import RULES, MedianStoppingRule
from hopsml.search.scheduler import Scheduler
from hopsml.search.space import Direction, SearchSpaceError


@dataclass(frozen=True)
class RunRequest:
    """One call of a verb: the function to run and what the experiment record keeps of the call."""

    train_fn: Callable[..., Any]
    name: str = "no-name"
    description: str | None = None
    metric_key: str | None = None
    versioned_resources: list[str] | None = None
    local_logdir: bool = False
    seed: int | None = None   # None: drawn (or, in a rerun, the recorded one)
    timeline: bool = True


@dataclass(frozen=True)
class SlotPlan:
    """How a search's jobs use the cluster: `total` jobs expected (the progress bar's), `num_workers` ranks each,
    the function's parameter that takes a rung's `budget`, and at most `max_parallel` at once."""

    total: int
    num_workers: int = 1
    budget: str | None = None
    max_parallel: int | None = None


@dataclass(frozen=True)
class SearchRequest:
    """One call of a search verb: its run, the space as the record keeps it, what to optimise and how, which
    strategy proposes the trials and the scheduler that hands them out, how they use the slots (`plan`), and
    `record_fields`, what the strategy adds to the record."""

    run: RunRequest
    space: dict[str, Any]
    direction: Direction
    optimization_key: str
    strategy: str
    scheduler: Scheduler
    plan: SlotPlan
    early_stopping: str | None = None
    early_stopping_min_steps: int = 3
    resume: ExperimentDir | None = None   # the search a resumed one takes up
    record_fields: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, run: RunRequest, space: dict[str, Any], direction: Direction | str, optimization_key: str,
           strategy: str, scheduler: Scheduler, plan: SlotPlan, **options: Any) -> SearchRequest:
        """A request with the direction parsed ('max', 'min' or a Direction)."""
        return cls(run, space, Direction.of(direction), optimization_key, strategy, scheduler, plan, **options)

    def __post_init__(self) -> None:
        if not isinstance(self.optimization_key, str) or not self.optimization_key:
            raise SearchSpaceError(f"optimization_key must name the metric to optimise, got {self.optimization_key!r}")
        if self.early_stopping not in (None, *RULES):
            raise SearchSpaceError(f"early_stopping must be one of {', '.join(RULES)} or None, "
                                   f"not {self.early_stopping!r}")

    def stopping_rule(self) -> MedianStoppingRule | None:
        """The rule that stops a trial early, when the request asks for one."""
        if not self.early_stopping:
            return None
        return MedianStoppingRule(self.direction, min_steps=self.early_stopping_min_steps)
