"""The run catalog: a project's experiment records, for notebooks and the CLI: list, filter, sort.

    from hopsml import run_catalog
    runs = run_catalog.list(name="mnist", state="finished", sort="metric")
    best = runs[0]; best.metric, best.hyperparameters, best.logdir

The verbs that start experiments live in :mod:`hopsml.experiment`; ``hopsml.experiments`` is
this module's older, documented name.
"""

from __future__ import annotations

import builtins
import dataclasses
import math
import numbers
from collections.abc import Iterable, Sequence

from hopsml import config
from hopsml.errors import SettingsError
from hopsml.fs import Storage
from hopsml.tracking import record as records
from hopsml.tracking.record import ExperimentRecord

SORT_KEYS = ("start", "metric", "name", "duration")
TYPES = tuple(t.value for t in records.ExperimentType)
STATES = tuple(s.value for s in records.State)


def _number(value: object) -> float | None:
    if isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


def _choice(value: str | None, choices: Sequence[str], what: str) -> str | None:
    if value is None:
        return None
    upper = value.upper().replace("-", "_")
    if upper not in choices:
        raise SettingsError(f"{what}={value!r}: use one of {', '.join(c.lower() for c in choices)}")
    return upper


def sort_records(recs: Iterable[ExperimentRecord], sort: str = "start", direction: str = "max"
                 ) -> builtins.list[ExperimentRecord]:
    """Records in the order ``sort`` names: 'start' newest first, 'metric' best first (highest for
    direction 'max', lowest for 'min'; runs without a number last), 'name' A to Z, 'duration'
    longest first."""
    if sort not in SORT_KEYS:
        raise SettingsError(f"sort={sort!r}: use one of {', '.join(SORT_KEYS)}")
    if direction not in ("max", "min"):
        raise SettingsError(f"direction={direction!r}: use 'max' or 'min'")
    items = [*recs]
    if sort == "start":
        return sorted(items, key=lambda r: (r.start or "", r.run_id if isinstance(r.run_id, int) else 0),
                      reverse=True)
    if sort == "name":
        return sorted(items, key=lambda r: ((r.name or "").lower(), r.start or ""))
    if sort == "duration":
        return sorted(items, key=lambda r: (_number(r.duration) is None, -(_number(r.duration) or 0.0)))
    sign = -1.0 if direction == "max" else 1.0
    return sorted(items, key=lambda r: (_number(r.metric) is None, sign * (_number(r.metric) or 0.0)))


def list(name: str | None = None, state: str | None = None, type: str | None = None, *,  # noqa: A001,A002
         sort: str = "start", direction: str = "max", limit: int | None = None,
         settings: config.Settings | None = None) -> builtins.list[ExperimentRecord]:
    """The readable experiments of the project, as records (``ExperimentRecord``: id, name, state,
    metric, hyperparameters, logdir, ...), filtered and sorted.

    ``name``: runs whose name contains this text; ``state``: 'finished', 'failed', 'running',
    'lost', ... (a RUNNING run whose driver stopped beating is LOST); ``type``: 'experiment',
    'distributed_training' or 'parallel_experiments' (searches); ``sort``: 'start' (newest first,
    the default), 'metric' (best first, see ``direction``), 'name' or 'duration'. Records that
    cannot be read are left out: ``hopsml experiments list`` shows them.
    """
    wanted_state = _choice(state, STATES, "state")
    wanted_type = _choice(type, TYPES, "type")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
        raise SettingsError(f"limit={limit!r} must be a whole number, 0 or more")
    settings = settings or config.load()
    storage = Storage(settings.root)
    found = []
    for rec in records.list_records(storage, settings.project):
        if name and name not in (rec.name or ""):
            continue
        if wanted_type and rec.type != wanted_type:
            continue
        shown, _ = records.shown_state(storage, settings.project, rec, settings.lost_after_s)
        if wanted_state and shown != wanted_state:
            continue
        found.append(dataclasses.replace(rec, state=shown) if shown != rec.state else rec)
    ordered = sort_records(found, sort, direction)
    return ordered[:limit] if limit is not None else ordered
