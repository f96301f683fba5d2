"""The older, documented name of :mod:`hopsml.run_catalog` (``hopsml.experiments.list(...)``);
new code imports ``hopsml.run_catalog``, whose name says that it reads run records. ``rerun(id)`` runs
a recorded experiment again (:mod:`hopsml.runs.rerun`)."""

from hopsml.run_catalog import SORT_KEYS, STATES, TYPES, list, sort_records  # noqa: A004
from hopsml.runs.rerun import RerunRefusedError, RerunResult, rerun

__all__ = ["SORT_KEYS", "STATES", "TYPES", "RerunRefusedError", "RerunResult", "list", "rerun", "sort_records"]
