"""Expectations on a feature group's batches, in Great Expectations' terms (an expectation suite of
`expect_column_values_to_be_between`, `..._to_not_be_null`, `..._to_be_unique`, `..._to_be_in_set`, ...),
checked by hopsml itself on the Arrow batch before it is committed, whether Great Expectations is installed or
not. A suite is a Great Expectations `ExpectationSuite` (0.18's or 1.x's), or its JSON form: a dict with
`expectations`, each `{"expectation_type": ..., "kwargs": {...}}` (1.x names it `type`).

`validation_ingestion_policy` decides what a failed batch does, as Hopsworks has it: "STRICT" refuses it (a
FeatureStoreError that names each failed rule, its column and the first failing rows), "ALWAYS" commits it and
warns. Every validation's report is kept beside the group's table (`_validation/`).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from hopsml.errors import FeatureStoreError

if TYPE_CHECKING:
    import pyarrow as pa

log = logging.getLogger(__name__)

POLICIES = ("STRICT", "ALWAYS")
SAMPLE = 20   # failing values and rows shown per rule


@dataclass
class Expectation:
    type: str
    kwargs: dict[str, Any]
    meta: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"expectation_type": self.type, "kwargs": dict(self.kwargs), "meta": dict(self.meta)}


@dataclass
class ExpectationSuite:
    """A named list of expectations and what a failure does."""

    name: str
    expectations: list[Expectation]
    validation_ingestion_policy: str = "STRICT"
    run_validation: bool = True   # False: kept with the group, not checked on insert

    def to_dict(self) -> dict[str, Any]:
        return {"expectation_suite_name": self.name, "validation_ingestion_policy": self.validation_ingestion_policy,
                "run_validation": self.run_validation, "expectations": [e.to_dict() for e in self.expectations]}


def suite_of(value: Any, policy: str | None = None) -> ExpectationSuite | None:
    """A suite from a Great Expectations suite, its JSON form (a dict), hopsml's own, or a list of expectations."""
    if value is None:
        return None
    if isinstance(value, ExpectationSuite):
        suite = value
    else:
        if hasattr(value, "to_json_dict"):        # Great Expectations 0.18 and 1.x
            value = value.to_json_dict()
        if isinstance(value, (list, tuple)):
            value = {"expectations": list(value)}
        if not isinstance(value, Mapping) or not isinstance(value.get("expectations"), list):
            raise FeatureStoreError(f"expectation_suite {value!r}: give a Great Expectations ExpectationSuite, or a "
                                    "dict with 'expectations': [{'expectation_type': ..., 'kwargs': {...}}, ...]")
        name = str(value.get("expectation_suite_name") or value.get("name") or "expectations")
        suite = ExpectationSuite(name, [_expectation(e) for e in value["expectations"]],
                                 str(value.get("validation_ingestion_policy") or "STRICT"),
                                 bool(value.get("run_validation", True)))
    if policy is not None:
        suite.validation_ingestion_policy = policy
    suite.validation_ingestion_policy = suite.validation_ingestion_policy.upper()
    if suite.validation_ingestion_policy not in POLICIES:
        raise FeatureStoreError(f"validation_ingestion_policy {suite.validation_ingestion_policy!r}: 'STRICT' "
                                "(refuse a failing batch) or 'ALWAYS' (commit it, and warn)")
    return suite


def _expectation(entry: Any) -> Expectation:
    if hasattr(entry, "to_json_dict"):
        entry = entry.to_json_dict()
    if not isinstance(entry, Mapping):
        raise FeatureStoreError(f"expectation {entry!r}: give {{'expectation_type': ..., 'kwargs': {{...}}}}")
    kind = str(entry.get("expectation_type") or entry.get("type") or "")
    kwargs = dict(entry.get("kwargs") or {k: v for k, v in entry.items() if k not in ("type", "meta", "id")})
    if kind not in _CHECKS:
        raise FeatureStoreError(f"expectation {kind!r} is not one hopsml checks; it checks "
                                f"{', '.join(sorted(_CHECKS))}")
    if "column" not in kwargs:
        raise FeatureStoreError(f"expectation {kind!r} needs kwargs={{'column': ...}}")
    return Expectation(kind, kwargs, dict(entry.get("meta") or {}))


def validate(suite: ExpectationSuite, batch: pa.Table) -> dict[str, Any]:
    """Check every expectation on `batch`: a report in Great Expectations' shape, with the failing rows."""
    results = []
    for expectation in suite.expectations:
        column = str(expectation.kwargs["column"]).lower()
        if column not in batch.column_names:
            results.append({**expectation.to_dict(), "success": False,
                            "exception_info": {"exception_message": f"the batch has no column {column!r}"}})
            continue
        failing = _CHECKS[expectation.type](batch.column(column), expectation.kwargs)
        rows = [i for i, bad in enumerate(failing) if bad]
        values = batch.column(column).take(rows[:SAMPLE]).to_pylist() if rows else []
        results.append({**expectation.to_dict(), "success": not rows,
                        "result": {"element_count": batch.num_rows, "unexpected_count": len(rows),
                                   "unexpected_percent": 100.0 * len(rows) / max(1, batch.num_rows),
                                   "partial_unexpected_list": values, "unexpected_rows": rows[:SAMPLE]}})
    return {"success": all(r["success"] for r in results), "expectation_suite_name": suite.name,
            "statistics": {"evaluated_expectations": len(results),
                           "successful_expectations": sum(r["success"] for r in results)},
            "results": results}


def failures(report: Mapping[str, Any]) -> str:
    """The failed rules of a report, one line each, for an error or a warning."""
    lines = []
    for result in report["results"]:
        if result["success"]:
            continue
        kwargs = ", ".join(f"{k}={v!r}" for k, v in result["kwargs"].items() if k != "column")
        where = result.get("exception_info", {}).get("exception_message")
        if where is None:
            found = result["result"]
            where = (f"{found['unexpected_count']} of {found['element_count']} rows, e.g. rows "
                     f"{found['unexpected_rows'][:5]} with {found['partial_unexpected_list'][:5]}")
        lines.append(f"{result['expectation_type']}(column={result['kwargs']['column']!r}{', ' if kwargs else ''}"
                     f"{kwargs}): {where}")
    return "; ".join(lines)


# --- the checks: each gives one bool per row, True where the row fails -----------------------------------------
def _between(column: Any, kwargs: Mapping[str, Any]) -> list[bool]:
    import pyarrow.compute as pc

    low, high = kwargs.get("min_value"), kwargs.get("max_value")
    fails = pc.is_null(column)
    if low is not None:
        fails = pc.or_(fails, pc.less_equal(column, low) if kwargs.get("strict_min") else pc.less(column, low))
    if high is not None:
        fails = pc.or_(fails, pc.greater_equal(column, high) if kwargs.get("strict_max") else pc.greater(column, high))
    # Great Expectations counts missing values as neither expected nor unexpected here
    return [bool(f) and v is not None for f, v in zip(fails.to_pylist(), column.to_pylist())]


def _not_null(column: Any, kwargs: Mapping[str, Any]) -> list[bool]:
    return [v is None for v in column.to_pylist()]


def _unique(column: Any, kwargs: Mapping[str, Any]) -> list[bool]:
    values = column.to_pylist()
    seen: dict[Any, int] = {}
    for v in values:
        if v is not None:
            seen[v] = seen.get(v, 0) + 1
    return [v is not None and seen[v] > 1 for v in values]


def _in_set(column: Any, kwargs: Mapping[str, Any]) -> list[bool]:
    allowed = set(kwargs.get("value_set") or [])
    return [v is not None and v not in allowed for v in column.to_pylist()]


def _regex(column: Any, kwargs: Mapping[str, Any]) -> list[bool]:
    pattern = re.compile(str(kwargs.get("regex", "")))
    return [v is not None and not pattern.search(str(v)) for v in column.to_pylist()]


def _aggregate(statistic: str) -> Callable[[Any, Mapping[str, Any]], list[bool]]:
    def check(column: Any, kwargs: Mapping[str, Any]) -> list[bool]:
        import pyarrow.compute as pc

        present = pc.drop_null(column)
        value = {"min": pc.min, "max": pc.max, "mean": pc.mean}[statistic](present).as_py() if len(present) else None
        low, high = kwargs.get("min_value"), kwargs.get("max_value")
        bad = value is None or (low is not None and value < low) or (high is not None and value > high)
        return [bool(bad)] * len(column) if bad else [False] * len(column)
    return check


_CHECKS: dict[str, Callable[[Any, Mapping[str, Any]], list[bool]]] = {
    "expect_column_values_to_be_between": _between,
    "expect_column_values_to_not_be_null": _not_null,
    "expect_column_values_to_be_unique": _unique,
    "expect_column_values_to_be_in_set": _in_set,
    "expect_column_values_to_match_regex": _regex,
    "expect_column_min_to_be_between": _aggregate("min"),
    "expect_column_max_to_be_between": _aggregate("max"),
    "expect_column_mean_to_be_between": _aggregate("mean"),
}
