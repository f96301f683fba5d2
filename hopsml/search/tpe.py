"""Model-based search: Optuna's TPE sampler (or its GP sampler) proposes the next trial from the finished
ones, through its ask/tell interface, over hopsml's own search space (space.Space).

Optuna is imported only when such a search runs. With a seed and the same results told in the same
order, the sampler proposes the same trials.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Sequence
from typing import Any

from hopsml.search.scheduler import Job
from hopsml.search.space import Dimension, Direction, SearchSpaceError, Space

log = logging.getLogger(__name__)

SAMPLERS = ("tpe", "gp")
_IDLE_S = 30.0   # a ConfigModel's background thread ends after this long without a draw


def _optuna() -> Any:
    try:
        import optuna
    except ImportError:
        raise SearchSpaceError("model-based search needs the optuna package: pip install 'optuna>=4'") from None
    optuna.logging.set_verbosity(optuna.logging.WARNING)   # one line per trial otherwise
    return optuna


def distribution(dim: Dimension) -> Any:
    """The Optuna distribution of one dimension of hopsml's space. Categories go to Optuna by their index,
    so that any category works (a tuple of layer widths, a dict); `to_optuna` and `from_optuna` translate."""
    distributions = _optuna().distributions
    if dim.categories is not None:
        return distributions.CategoricalDistribution(list(range(len(dim.categories))))
    low, high = dim.low, dim.high
    assert low is not None and high is not None
    if dim.integer:
        return distributions.IntDistribution(int(low), int(high), log=dim.log)
    return distributions.FloatDistribution(low, high, log=dim.log)


def _as_recorded(value: object) -> Any:
    """A value as a JSON record gives it back (tuples as lists)."""
    return json.loads(json.dumps(value, default=str))


def to_optuna(dimensions: dict[str, Dimension], params: dict[str, Any]) -> dict[str, Any]:
    """A trial's parameters as Optuna holds them: each category by its index (also when the parameters
    were read back from a record, where a tuple became a list)."""
    out = {}
    for name, dim in dimensions.items():
        value = params[name]
        if dim.categories is not None:
            found = [i for i, c in enumerate(dim.categories) if c == value]
            found = found or [i for i, c in enumerate(dim.categories) if _as_recorded(c) == _as_recorded(value)]
            if not found:
                raise SearchSpaceError(f"{value!r} is not one of the categories of {name!r}: {list(dim.categories)}")
            value = found[0]
        out[name] = value
    return out


def from_optuna(dimensions: dict[str, Dimension], params: dict[str, Any]) -> dict[str, Any]:
    """Optuna's parameters as the trial function takes them."""
    return {name: dim.categories[params[name]] if dim.categories is not None else params[name]
            for name, dim in dimensions.items()}


class ModelBased:
    """A scheduler proposing `samples` trials, each from an Optuna sampler told every finished one."""

    budgets: Sequence[Any] = ()

    def __init__(self, space: Space, *, direction: Direction, samples: int, seed: int | None,
                 sampler: str = "tpe", startup_trials: int | None = None) -> None:
        if isinstance(samples, bool) or not isinstance(samples, int) or samples < 1:
            raise SearchSpaceError(f"samples must be a positive integer, got {samples!r}")
        if sampler not in SAMPLERS:
            raise SearchSpaceError(f"sampler must be one of {', '.join(SAMPLERS)}, not {sampler!r}")
        optuna = _optuna()
        self.dimensions = {d.name: d for d in space.dimensions}
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
            params = trial["params"]
            state = trial.get("state")
            if state in ("RUNNING", "PENDING"):
                self._pending.append((key, params))
                self._asked[key] = None
                continue
            value = trial.get("metric")
            done = optuna.trial.create_trial(
                params=to_optuna(self.dimensions, params), distributions=self.distributions,
                value=float(value) if value is not None else None,
                state=optuna.trial.TrialState.COMPLETE if value is not None else optuna.trial.TrialState.FAIL)
            self.study.add_trial(done)
            self._asked[key] = done

    def next_job(self) -> Job | None:
        if self._pending:
            key, params = self._pending.pop(0)
            indexed = to_optuna(self.dimensions, params)
            self.study.enqueue_trial(indexed)
            self._asked[key] = self.study.ask(self.distributions)
            return Job(key, from_optuna(self.dimensions, indexed))   # the categories as given, not as recorded
        if len(self._asked) >= self.samples:
            return None
        trial = self.study.ask(self.distributions)
        key = len(self._asked)
        self._asked[key] = trial
        return Job(key, from_optuna(self.dimensions, trial.params))

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
    one rung alone would learn to avoid the best region); random configurations until `min_points` have one.

    With `ahead`, each draw also asks a background thread to fit the next configuration from the results
    known then, and the next draw takes it when it is ready: the search's driver draws while it holds the
    lock every free slot waits on, and a fit takes milliseconds, as long as a short trial. The thread lives
    while draws come and ends after `_IDLE_S` without one."""

    def __init__(self, space: Space, *, direction: Direction, seed: int | None,
                 random_configs: Any, min_points: int | None = None, ahead: bool = False) -> None:
        self.dimensions = {d.name: d for d in space.dimensions}
        self.distributions = {d.name: distribution(d) for d in space.dimensions}
        self.direction, self.seed, self.random_configs = direction, seed, random_configs
        self.min_points = min_points if min_points is not None else len(space.dimensions) + 2
        self.modelled = 0   # configurations the model proposed (the others were random)
        self.ahead = ahead
        self._changed = threading.Condition()
        self._wanted: tuple[int, list[tuple[dict[str, Any], int, float]]] | None = None   # for the thread
        self._ready: tuple[int, dict[str, Any]] | None = None                               # from the thread
        self._thread: threading.Thread | None = None

    def draw(self, key: int, reached: list[tuple[dict[str, Any], int, float]]) -> dict[str, Any]:
        """The `key`-th new configuration, given each configuration's (params, highest rung, metric there)."""
        if len(reached) < self.min_points:
            return dict(self.random_configs(key))
        with self._changed:
            ready, self._ready = self._ready, None
            if self.ahead:
                self._wanted = (key + 1, list(reached))
                if self._thread is None or not self._thread.is_alive():
                    self._thread = threading.Thread(target=self._fit_ahead, name="hopsml-tpe-ahead", daemon=True)
                    self._thread.start()
                self._changed.notify()
        self.modelled += 1
        if ready is not None and ready[0] == key:
            return ready[1]   # fitted on the results known at the last draw: a few fewer
        return self._fit(key, reached)

    def _fit_ahead(self) -> None:
        while True:
            with self._changed:
                if self._wanted is None and not self._changed.wait_for(lambda: self._wanted is not None, _IDLE_S):
                    self._thread = None
                    return
                assert self._wanted is not None
                (key, reached), self._wanted = self._wanted, None
            try:
                params = self._fit(key, reached)
            except Exception:   # the draw then fits in its own thread and raises there
                log.debug("fitting configuration %d ahead failed", key, exc_info=True)
                continue
            with self._changed:
                self._ready = (key, params)

    def _fit(self, key: int, reached: list[tuple[dict[str, Any], int, float]]) -> dict[str, Any]:
        optuna = _optuna()
        sign = 1.0 if self.direction is Direction.MAX else -1.0
        ranked = sorted(reached, key=lambda r: (r[1], sign * r[2]))   # worst first
        sampler = optuna.samplers.TPESampler(seed=None if self.seed is None else self.seed + key,
                                             n_startup_trials=0)
        study = optuna.create_study(direction="maximize", sampler=sampler)
        for rank, (params, _, _) in enumerate(ranked):
            study.add_trial(optuna.trial.create_trial(
                params=to_optuna(self.dimensions, params), distributions=self.distributions,
                value=float(rank)))
        trial = study.ask(self.distributions)
        return from_optuna(self.dimensions, trial.params)
