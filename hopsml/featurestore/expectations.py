"""Expectations on a feature group's batches, in Great Expectations' terms, checked before a batch is committed.

A suite is a Great Expectations `ExpectationSuite` (0.18's or 1.x's), a list of its expectations (1.x's
`gx.expectations.ExpectColumnValuesToBeBetween(...)` objects too), or its JSON form in either version:
`{"expectation_suite_name": ..., "expectations": [{"expectation_type": ..., "kwargs": {...}, "meta": {...}}]}`
(0.18, and what hopsworks stores) or `{"name": ..., "expectations": [{"type": ..., "kwargs": {...}}]}` (1.x).

hopsml checks `expect_column_values_to_be_between`, `..._to_not_be_null`, `..._to_be_unique`, `..._to_be_in_set`,
`..._to_match_regex` and `expect_column_min/max/mean_to_be_between` itself, on the Arrow batch, so these need no
Great Expectations. Any other expectation (or one of these with a kwarg hopsml does not read, such as
`row_condition`) is handed to Great Expectations, on the batch as a pandas DataFrame, where that package is
installed; where it is not, the suite is refused when given, naming the expectation.

`validation_ingestion_policy` decides what a failed batch does, as Hopsworks has it: "STRICT" refuses it (a
FeatureStoreError that names each failed rule, its column and the first failing rows), "ALWAYS" commits it and
warns. The report has Great Expectations' shape (`success`, `statistics`, and per expectation its `success`,
`expectation_config` and `result` with `partial_unexpected_list` and `partial_unexpected_index_list`: the
failing values and rows); every one is kept beside the group's table (`_validation/`).
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
import re
import types
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from hopsml.errors import FeatureStoreError

if TYPE_CHECKING:
    import pyarrow as pa

log = logging.getLogger(__name__)

POLICIES = ("STRICT", "ALWAYS")
SAMPLE = 20   # failing values and rows shown per rule
# How Great Expectations reports a rule, not what it checks: hopsml reports its own way.
_REPORTING = {"result_format", "catch_exceptions", "include_config", "batch_id"}
_OWN_KWARGS = {"column", "min_value", "max_value", "strict_min", "strict_max", "value_set", "regex", "mostly"}
_NOT_KWARGS = {"type", "expectation_type", "expectationType", "meta", "id", "severity", "notes", "description",
               "rendered_content"}


@dataclass
class Expectation:
    type: str
    kwargs: dict[str, Any]
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def expectation_type(self) -> str:
        """The name hopsworks' `GeExpectation` and Great Expectations 0.18 give the type."""
        return self.type

    @property
    def own(self) -> bool:
        """True where hopsml checks it itself: a type it knows, with only kwargs it reads (no parameters)."""
        return (self.type in _OWN_TYPES and set(self.kwargs) <= _OWN_KWARGS | _REPORTING
                and not any(isinstance(v, Mapping) for v in self.kwargs.values()))

    def to_dict(self) -> dict[str, Any]:
        return {"expectation_type": self.type, "kwargs": dict(self.kwargs), "meta": dict(self.meta)}

    def to_ge_type(self) -> Any:
        """Great Expectations' `ExpectationConfiguration` of the installed version."""
        ge = _great_expectations(self.type)
        if _major(ge) >= 1:
            from great_expectations.expectations.expectation_configuration import ExpectationConfiguration

            return ExpectationConfiguration(type=self.type, kwargs=dict(self.kwargs), meta=dict(self.meta))
        return ge.core.ExpectationConfiguration(expectation_type=self.type, kwargs=dict(self.kwargs),
                                                meta=dict(self.meta))


@dataclass
class ExpectationSuite:
    """A named list of expectations and what a failure does."""

    name: str
    expectations: list[Expectation]
    validation_ingestion_policy: str = "STRICT"
    run_validation: bool = True   # False: kept with the group, not checked on insert

    @property
    def expectation_suite_name(self) -> str:
        return self.name

    def to_dict(self) -> dict[str, Any]:
        return {"expectation_suite_name": self.name, "validation_ingestion_policy": self.validation_ingestion_policy,
                "run_validation": self.run_validation, "expectations": [e.to_dict() for e in self.expectations]}

    def to_ge_type(self) -> Any:
        """Great Expectations' `ExpectationSuite` of the installed version, as hopsworks' suite converts."""
        ge = _great_expectations(self.name)
        configs = [e.to_ge_type() for e in self.expectations]
        if _major(ge) >= 1:
            return ge.ExpectationSuite(name=self.name, expectations=configs)
        return ge.core.ExpectationSuite(expectation_suite_name=self.name, expectations=configs)


def suite_of(value: object, policy: str | None = None) -> ExpectationSuite | None:
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
        name = str(value.get("expectation_suite_name") or value.get("name") or value.get("expectationSuiteName")
                   or "expectations")
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


def _expectation(entry: object) -> Expectation:
    """One expectation, refused now rather than at the first insert if nothing here can evaluate it."""
    if isinstance(entry, Expectation):
        entry = entry.to_dict()
    if hasattr(entry, "configuration"):           # a Great Expectations 1.x Expectation object
        entry = entry.configuration
    if hasattr(entry, "to_json_dict"):
        entry = entry.to_json_dict()
    if not isinstance(entry, Mapping):
        raise FeatureStoreError(f"expectation {entry!r}: give {{'expectation_type': ..., 'kwargs': {{...}}}}")
    kind = str(entry.get("expectation_type") or entry.get("type") or entry.get("expectationType") or "")
    kwargs = dict(entry["kwargs"] if "kwargs" in entry else {k: v for k, v in entry.items() if k not in _NOT_KWARGS})
    # feature names are lower case in the feature store, as the batch's columns are when checked
    kwargs = {k: (v.lower() if isinstance(v, str) else [c.lower() if isinstance(c, str) else c for c in v]
                  if isinstance(v, list) else v) if k.startswith("column") else v for k, v in kwargs.items()}
    expectation = Expectation(kind, kwargs, dict(entry.get("meta") or {}))
    if expectation.own:
        if "column" not in kwargs:
            raise FeatureStoreError(f"expectation {kind!r} needs kwargs={{'column': ...}}")
        return expectation
    ge = _great_expectations(kind, kwargs)
    try:
        if _major(ge) >= 1:
            expectation.to_ge_type().to_domain_obj()      # builds the Expectation, which checks its kwargs
        else:
            impl = importlib.import_module("great_expectations.expectations.registry").get_expectation_impl(kind)
            impl(expectation.to_ge_type())            # checks the kwargs' values; 1.x also refuses unknown ones:
            unread = set(kwargs) - {*impl.domain_keys, *impl.success_keys, *impl.runtime_keys}
            if unread:
                raise ValueError(f"{impl.__name__} reads no {', '.join(sorted(unread))}")
    except (ge.exceptions.GreatExpectationsError, ValueError, TypeError) as refused:
        raise FeatureStoreError(f"expectation {kind!r} is not one hopsml checks, and Great Expectations "
                                f"{ge.__version__} refuses it with kwargs {kwargs}: {refused}") from None
    return expectation


def _great_expectations(kind: str, kwargs: Mapping[str, Any] | None = None) -> Any:
    """The great_expectations module, imported only where a suite needs it (its import takes seconds)."""
    if importlib.util.find_spec("great_expectations") is None:
        unread = sorted(set(kwargs or {}) - _OWN_KWARGS - _REPORTING)
        what = f"with {', '.join(unread)}" if kind in _OWN_TYPES and unread else "is not one hopsml checks"
        raise FeatureStoreError(f"expectation {kind!r} {what}: Great Expectations would evaluate it, but it is not "
                                "installed (pip install 'great_expectations>=0.18,<2'); hopsml itself checks "
                                f"{', '.join(sorted(_OWN_TYPES))}")
    return importlib.import_module("great_expectations")


def _major(ge: types.ModuleType) -> int:
    return int(str(ge.__version__).split(".")[0])


def validate(suite: ExpectationSuite, batch: pa.Table) -> dict[str, Any]:
    """Check every expectation on `batch`: a report in Great Expectations' shape, with the failing rows."""
    by_ge = [e for e in suite.expectations if not e.own]
    ge_results = iter(_ge_results(suite.name, by_ge, batch) if by_ge else [])
    results = [_own_result(e, batch) if e.own else next(ge_results) for e in suite.expectations]
    passed = sum(r["success"] for r in results)
    return {"success": passed == len(results), "expectation_suite_name": suite.name, "results": results,
            "statistics": {"evaluated_expectations": len(results), "successful_expectations": passed,
                           "unsuccessful_expectations": len(results) - passed,
                           "success_percent": 100.0 * passed / len(results) if results else None},
            "meta": {"expectation_suite_name": suite.name,
                     **({"great_expectations_version": _great_expectations("").__version__} if by_ge else {})}}


def _result(expectation: Expectation, success: bool, found: dict[str, Any], error: str | None = None
            ) -> dict[str, Any]:
    """One expectation's result as Great Expectations reports it; `expectation_type` and `kwargs` stay on top
    too, where hopsml's earlier reports had them."""
    return {"success": success, "expectation_config": expectation.to_dict(), "result": found, "meta": {},
            "exception_info": {"raised_exception": error is not None, "exception_message": error,
                               "exception_traceback": None},
            "expectation_type": expectation.type, "kwargs": dict(expectation.kwargs)}


def _own_result(expectation: Expectation, batch: pa.Table) -> dict[str, Any]:
    column_name = str(expectation.kwargs["column"])
    if column_name not in batch.column_names:
        return _result(expectation, False, {}, f"the batch has no column {column_name!r}")
    column, kwargs = batch.column(column_name), expectation.kwargs
    if expectation.type in _AGGREGATES:
        observed = _AGGREGATES[expectation.type](column)
        return _result(expectation, observed is not None and not _outside(observed, kwargs),
                       {"observed_value": observed})
    rows = [i for i, bad in enumerate(_CHECKS[expectation.type](column, kwargs)) if bad]
    missing = 0 if expectation.type == "expect_column_values_to_not_be_null" else column.null_count
    counted = len(column) - missing
    mostly = kwargs.get("mostly")
    success = not rows if mostly is None else counted == 0 or (counted - len(rows)) / counted >= mostly
    return _result(expectation, success, {
        "element_count": len(column), "missing_count": missing, "unexpected_count": len(rows),
        "unexpected_percent": 100.0 * len(rows) / counted if counted else None,
        "partial_unexpected_list": column.take(rows[:SAMPLE]).to_pylist() if rows else [],
        "partial_unexpected_index_list": rows[:SAMPLE]})


def _ge_results(name: str, expectations: list[Expectation], batch: pa.Table) -> list[dict[str, Any]]:
    """Great Expectations' results for `expectations` on the batch as pandas, one validation each so the
    results keep the suite's order (1.x reorders a suite's), in the 0.18 shape hopsworks keeps."""
    ge = _great_expectations(expectations[0].type)
    frame = batch.to_pandas()
    form = {"result_format": "SUMMARY", "partial_unexpected_count": SAMPLE}
    if _major(ge) >= 1:
        from great_expectations.data_context.types.base import ProgressBarsConfig

        context = ge.get_context(mode="ephemeral")
        context.variables.progress_bars = ProgressBarsConfig(globally=False)
        ge_batch = (context.data_sources.add_pandas("hopsml").add_dataframe_asset("batch")
                    .add_batch_definition_whole_dataframe("batch").get_batch(batch_parameters={"dataframe": frame}))

        def one(e: Expectation) -> Any:
            return ge_batch.validate(e.to_ge_type().to_domain_obj(), result_format=form)
    else:
        dataset = ge.from_pandas(frame)

        def one(e: Expectation) -> Any:
            suite = ge.core.ExpectationSuite(expectation_suite_name=name, expectations=[e.to_ge_type()])
            return dataset.validate(expectation_suite=suite, result_format=form).results[0]
    results = []
    for expectation in expectations:
        found = one(expectation).to_json_dict()
        info = found.get("exception_info") or {}
        results.append({**_result(expectation, bool(found["success"]), found.get("result") or {},
                                  info.get("exception_message") if info.get("raised_exception") else None),
                        "meta": found.get("meta") or {}})
    return results


def failures(report: Mapping[str, Any]) -> str:
    """The failed rules of a report, one line each, for an error or a warning."""
    lines = []
    for result in report["results"]:
        if result["success"]:
            continue
        config, found = result.get("expectation_config") or result, result.get("result") or {}
        kwargs = dict(config["kwargs"])
        args = ", ".join(f"{k}={v!r}" for k, v in sorted(kwargs.items(), key=lambda kv: kv[0] != "column"))
        where = (result.get("exception_info") or {}).get("exception_message")
        if where is None and "unexpected_count" in found:
            rows = found.get("partial_unexpected_index_list")   # Great Expectations 0.18 leaves it out at times
            where = (f"{found['unexpected_count']} of {found['element_count']} rows, e.g. "
                     f"{f'rows {rows[:5]} with ' if rows is not None else ''}"
                     f"{found.get('partial_unexpected_list', [])[:5]}")
        elif where is None:
            where = f"observed {found.get('observed_value')!r}"
        lines.append(f"{config['expectation_type']}({args}): {where}")
    return "; ".join(lines)


# --- the checks: each gives one bool per row, True where the row fails -----------------------------------------
def _outside(value: Any, kwargs: Mapping[str, Any]) -> bool:
    low, high = kwargs.get("min_value"), kwargs.get("max_value")
    return bool((low is not None and (value <= low if kwargs.get("strict_min") else value < low))
                or (high is not None and (value >= high if kwargs.get("strict_max") else value > high)))


def _between(column: pa.ChunkedArray, kwargs: Mapping[str, Any]) -> list[bool]:
    # Great Expectations counts missing values as neither expected nor unexpected here
    return [v is not None and _outside(v, kwargs) for v in column.to_pylist()]


def _not_null(column: pa.ChunkedArray, kwargs: Mapping[str, Any]) -> list[bool]:
    return [v is None for v in column.to_pylist()]


def _unique(column: pa.ChunkedArray, kwargs: Mapping[str, Any]) -> list[bool]:
    values = column.to_pylist()
    seen: dict[Any, int] = {}
    for v in values:
        if v is not None:
            seen[v] = seen.get(v, 0) + 1
    return [v is not None and seen[v] > 1 for v in values]


def _in_set(column: pa.ChunkedArray, kwargs: Mapping[str, Any]) -> list[bool]:
    allowed = set(kwargs.get("value_set") or [])
    return [v is not None and v not in allowed for v in column.to_pylist()]


def _regex(column: pa.ChunkedArray, kwargs: Mapping[str, Any]) -> list[bool]:
    pattern = re.compile(str(kwargs.get("regex", "")))
    return [v is not None and not pattern.search(str(v)) for v in column.to_pylist()]


def _statistic(name: str) -> Callable[[Any], Any]:
    def observed(column: pa.ChunkedArray) -> Any:
        import pyarrow.compute as pc

        present = pc.drop_null(column)
        return getattr(pc, name)(present).as_py() if len(present) else None
    return observed


_AGGREGATES: dict[str, Callable[[Any], Any]] = {
    "expect_column_min_to_be_between": _statistic("min"),
    "expect_column_max_to_be_between": _statistic("max"),
    "expect_column_mean_to_be_between": _statistic("mean"),
}
_CHECKS: dict[str, Callable[[Any, Mapping[str, Any]], list[bool]]] = {
    "expect_column_values_to_be_between": _between,
    "expect_column_values_to_not_be_null": _not_null,
    "expect_column_values_to_be_unique": _unique,
    "expect_column_values_to_be_in_set": _in_set,
    "expect_column_values_to_match_regex": _regex,
}
_OWN_TYPES = {*_CHECKS, *_AGGREGATES}
