"""Model-based search: Optuna's TPE sampler (or its GP sampler) proposes the next trial from the finished
ones, through its ask/tell interface, over hopsml's own search space (space.Space).

Optuna is imported only when such a search runs. With a seed and the same results told in the same
order, the sampler proposes the same trials.
"""

from __future__ import annotations

import logging
from typing import Any

from hopsml.search.asha import Job
from hopsml.search.space import Dimension, Direction, SearchSpaceError, Space

log = logging.getLogger(__name__)

SAMPLERS = ("tpe", "gp")
_CATEGORY_TYPES = (type(None), bool, int, float, str)


def _optuna() -> Any:
    try:
        import optuna
    except ImportError:
        raise SearchSpaceError("model-based search needs the optuna package: pip install 'optuna>=4'") from None
    optuna.logging.set_verbosity(optuna.logging.WARNING)   # one line per trial otherwise
    return optuna


def distribution(dim: Dimension) -> Any:
    """The Optuna distribution of one dimension of hopsml's space."""
    distributions = _optuna().distributions
    if dim.categories is not None:
        bad = [c for c in dim.categories if not isinstance(c, _CATEGORY_TYPES)]
        if bad:
            raise SearchSpaceError(f"the categories of {dim.name!r} must be None, bool, int, float or str for a "
                                   f"model-based search, got {bad[0]!r}; name them by strings and map them in the "
                                   "function")
        return distributions.CategoricalDistribution(list(dim.categories))
    low, high = dim.low, dim.high
    assert low is not None and high is not None
    if dim.integer:
        return distributions.IntDistribution(int(low), int(high), log=dim.log)
    return distributions.FloatDistribution(low, high, log=dim.log)


class ModelBased:
    """A scheduler proposing `samples` trials, each from an Optuna sampler told every finished one."""

    def __init__(self, space: Space, *, direction: Direction, samples: int, seed: int | None,
                 sampler: str = "tpe", startup_trials: int | None = None) -> None:
        if isinstance(samples, bool) or not isinstance(samples, int) or samples < 1:
            raise SearchSpaceError(f"samples must be a positive integer, got {samples!r}")
        if sampler not in SAMPLERS:
            raise SearchSpaceError(f"sampler must be one of {', '.join(SAMPLERS)}, not {sampler!r}")
        optuna = _optuna()
        self.distributions = {d.name: distribution(d) for d in space.dimensions}
        self.startup_trials = startup_trials if startup_trials is not None else min(10, max(2, samples // 3))
        if sampler == "tpe":
            chosen = optuna.samplers.TPESampler(seed=seed, n_startup_trials=self.startup_trials)
        else:
            chosen = optuna.samplers.GPSampler(seed=seed, n_startup_trials=self.startup_trials)
        self.study = optuna.create_study(direction="maximize" if direction is Direction.MAX else "minimize",
                                         sampler=chosen)
        self.samples, self.sampler = samples, sampler
        self._asked: dict[int, Any] = {}
        self._pending: list[tuple[int, dict[str, Any]]] = []   # trials a resumed search runs again first

    def restore(self, trials: list[dict[str, Any]]) -> None:
        """Take up a search from its summary: finished and failed trials are told to the sampler; a trial
        that was running when its driver was killed runs again, with the same parameters, first."""
        optuna = _optuna()
        for key, trial in enumerate(trials):
            params = {name: trial["params"][name] for name in self.distributions}
            state = trial.get("state")
            if state in ("RUNNING", "PENDING"):
                self._pending.append((key, params))
                self._asked[key] = None
                continue
            value = trial.get("metric")
            done = optuna.trial.create_trial(
                params=params, distributions=self.distributions,
                value=float(value) if value is not None else None,
                state=optuna.trial.TrialState.COMPLETE if value is not None else optuna.trial.TrialState.FAIL)
            self.study.add_trial(done)
            self._asked[key] = done

    def next_job(self) -> Job | None:
        if self._pending:
            key, params = self._pending.pop(0)
            self.study.enqueue_trial(params)
            self._asked[key] = self.study.ask(self.distributions)
            return Job(key, params)
        if len(self._asked) >= self.samples:
            return None
        trial = self.study.ask(self.distributions)
        key = len(self._asked)
        self._asked[key] = trial
        return Job(key, {name: trial.params[name] for name in self.distributions})

    def job_done(self, job: Job, metric: float | None) -> None:
        """Tell the sampler the trial's metric; a failed trial is told as failed (it is not modelled)."""
        trial = self._asked[job.key]
        if metric is None:
            self.study.tell(trial, state=_optuna().trial.TrialState.FAIL)
        else:
            self.study.tell(trial, metric)

    def describe(self) -> dict[str, Any]:
        return {"sampler": self.sampler, "startup_trials": self.startup_trials}


class ConfigModel:
    """How a successive-halving search draws its new configurations, as BOHB does (Falkner et al. 2018) but
    with Optuna's TPE: fitted on every configuration that has a result, ranked by the highest rung it
    reached, then by its metric there (a rung holds only the configurations promoted to it, so modelling
    one rung alone would learn to avoid the best region); random configurations until `min_points` have one."""

    def __init__(self, space: Space, *, direction: Direction, seed: int | None,
                 random_configs: Any, min_points: int | None = None) -> None:
        self.distributions = {d.name: distribution(d) for d in space.dimensions}
        self.direction, self.seed, self.random_configs = direction, seed, random_configs
        self.min_points = min_points if min_points is not None else len(space.dimensions) + 2
        self.modelled = 0   # configurations the model proposed (the others were random)

    def draw(self, key: int, reached: list[tuple[dict[str, Any], int, float]]) -> dict[str, Any]:
        """The `key`-th new configuration, given each configuration's (params, highest rung, metric there)."""
        if len(reached) < self.min_points:
            return dict(self.random_configs(key))
        optuna = _optuna()
        sign = 1.0 if self.direction is Direction.MAX else -1.0
        ranked = sorted(reached, key=lambda r: (r[1], sign * r[2]))   # worst first
        sampler = optuna.samplers.TPESampler(seed=None if self.seed is None else self.seed + key,
                                             n_startup_trials=0)
        study = optuna.create_study(direction="maximize", sampler=sampler)
        for rank, (params, _, _) in enumerate(ranked):
            study.add_trial(optuna.trial.create_trial(
                params={name: params[name] for name in self.distributions}, distributions=self.distributions,
                value=float(rank)))
        trial = study.ask(self.distributions)
        self.modelled += 1
        return {name: trial.params[name] for name in self.distributions}
