"""The older, documented name of :mod:`hopsml.run_catalog` (``hopsml.experiments.list(...)``);
new code imports ``hopsml.run_catalog``, whose name says that it reads run records."""

from hopsml.run_catalog import SORT_KEYS, STATES, TYPES, list, sort_records  # noqa: A004

__all__ = ["SORT_KEYS", "STATES", "TYPES", "list", "sort_records"]
