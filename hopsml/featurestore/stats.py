"""Statistics of a feature group at a commit, in the form the prepared datasets' stats.json uses (count,
missing, min/max/mean/std, distinct, histogram for numbers; top values for the rest), so one page renders
both. Computed on the table as it is after the commit, as Hopsworks does."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from hopsml.data import stats as dataset_stats
from hopsml.errors import FeatureStoreError

if TYPE_CHECKING:
    import pyarrow as pa

DEFAULT = {"enabled": True, "histograms": True, "correlations": False, "exact_uniqueness": False, "columns": []}


def config_of(value: object) -> dict[str, Any]:
    """A statistics_config as Hopsworks takes it: None (the default), a bool, or a dict of its keys."""
    if value is None:
        return dict(DEFAULT)
    if isinstance(value, bool):
        return {**DEFAULT, "enabled": value}
    if isinstance(value, Mapping):
        unknown = set(value) - set(DEFAULT)
        if unknown:
            raise FeatureStoreError(f"statistics_config keys {sorted(unknown)}: the keys are {', '.join(DEFAULT)}")
        return {**DEFAULT, **value, "columns": list(value.get("columns") or [])}
    if hasattr(value, "to_dict"):
        return config_of(value.to_dict())
    raise FeatureStoreError(f"statistics_config {value!r}: give True/False or a dict such as {DEFAULT}")


def of_table(table: pa.Table, config: Mapping[str, Any]) -> dict[str, Any]:
    """Per-column statistics of `table` (the config's columns, or all)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    columns = config.get("columns") or table.column_names
    out: dict[str, Any] = {}
    for name in columns:
        if name not in table.column_names:
            continue
        column = table.column(name)
        missing = column.null_count
        kind = column.type
        if pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_fixed_size_list(kind):
            continue   # a vector (a training dataset's `features`): its columns have statistics of their own
        if pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_boolean(kind):
            values = pc.drop_null(column).to_numpy(zero_copy_only=False).astype(np.float64)
            summary = dataset_stats.numeric_summary(values, missing)
            if not config.get("histograms", True):
                summary.pop("histogram", None)
            summary["kind"] = "numeric"
        elif pa.types.is_timestamp(kind) or pa.types.is_date(kind):
            present = pc.drop_null(column)
            summary = {"count": len(present), "missing": missing, "kind": "time"}
            if len(present):
                summary.update(min=str(pc.min(present).as_py()), max=str(pc.max(present).as_py()))
        else:
            counts = pc.value_counts(pc.drop_null(column.cast(pa.string())))
            summary = dataset_stats.categorical_summary(
                {item["values"]: item["counts"] for item in counts.to_pylist()}, missing)
            summary["kind"] = "categorical"
        out[name] = summary
    return {"rows": table.num_rows, "columns": out}
