"""Hostile filter values and a small group holding them, shared by the filter tests of both engines
(tests/unit/test_featurestore_filters.py for DuckDB, tests/spark/test_featurestore_safety.py for Spark): each
value is tried with every filter operator and the rows an engine returns are compared with `Filter.holds`,
Python's own comparison over the same rows.

The hundreds of cases are evaluated in one statement per engine (`duckdb_answers`, `spark_answers`: each case a
column, rendered by the very functions the engines filter with); a sample of them, and the probe's payloads,
also run end to end as queries."""

from __future__ import annotations

import datetime as dt
import math
from typing import Any

import pyarrow as pa

# The probe's payloads: a backslash before the quote ends Spark SQL's string early, the rest tries the JVM.
PROBES = [
    "x\\' OR 1=1 --",
    'x\\\' OR java_method("java.lang.System","getProperty","user.name") = "root" --',
    'x\\\' OR reflect("java.lang.Thread","sleep",cast(200 as bigint)) IS NULL --',
    "x\\' OR 1=1 UNION SELECT 1 --",
]

STRINGS = [
    *PROBES, "x' OR 1=1 --", "' OR '1'='1", "\\", "\\'", "''", "'", '"', "`", '"; DROP TABLE g0; --', "/* c */ 'a'",
    "-- comment", "a%b", "%", "_", "a_c", "a\\%", "", " ", "\n", "a\nb", "\t", "\x00", "ümlaut-名前", "😀",
    "Ω" * 3, "x" * 10_000, "NULL", "nan", "${jndi:ldap://h/x}", "a", "b", "B", "z",
    'java_method("java.lang.System","getProperty","user.name")',
]

NUMBERS: list[Any] = [math.nan, math.inf, -math.inf, -0.0, 0.0, 0, 1, 1.5, -2.0, 1e308, 5e-324, 2 ** 62, -(2 ** 63)]

OPS = ("==", "!=", "<", "<=", ">", ">=")


def rows() -> pa.Table:
    """Rows whose strings are the hostile values themselves (so equality must match exactly) and whose numbers
    are NaN, infinities, signed zeros, extremes and nulls."""
    names: list[Any] = [*STRINGS, None, None]
    numbers: list[Any] = [*NUMBERS, None]
    count = len(names)
    start = dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)
    return pa.table({
        "id": pa.array(range(count), pa.int64()),
        "ts": pa.array([start + dt.timedelta(hours=i) for i in range(count)], pa.timestamp("us", tz="UTC")),
        "name": pa.array(names, pa.string()),
        "x": pa.array([float(numbers[i % len(numbers)]) if numbers[i % len(numbers)] is not None else None
                       for i in range(count)], pa.float64()),
        "n": pa.array([None if i % 7 == 3 else (i * 37) % 11 - 5 for i in range(count)], pa.int64()),
        "flag": pa.array([None if i % 5 == 4 else i % 2 == 0 for i in range(count)], pa.bool_()),
    })


def cases(fg: Any) -> list[Any]:
    """Every filter operator with every hostile value of its column's kind (and None where it is allowed)."""
    out = []
    for value in STRINGS:
        out += [fg["name"]._filter(op, value) for op in OPS]
        out += [fg["name"].isin([value]), fg["name"].isin([value, "a", None]), fg["name"].like(value)]
    for value in NUMBERS:
        out += [fg["x"]._filter(op, value) for op in OPS]
        out += [fg["n"]._filter(op, value) for op in OPS]
        out += [fg["x"].isin([value]), fg["x"].isin([value, 1.5, None]), fg["n"].isin([value])]
    for value in (True, False):
        out += [fg["flag"] == value, fg["flag"] != value]
    at = dt.datetime(2024, 1, 2, 3, tzinfo=dt.timezone(dt.timedelta(hours=2)))
    out += [fg["ts"]._filter(op, at) for op in OPS]
    out += [fg["ts"] >= dt.datetime(2024, 1, 1, 20), fg["ts"] < dt.datetime(2024, 1, 2), fg["ts"] < dt.date(2024, 1, 2)]
    out += [fg[c] == None for c in ("name", "x", "n", "flag")]  # noqa: E711 (the SDK's way to say "is null")
    out += [fg[c] != None for c in ("name", "x", "n", "flag")]  # noqa: E711
    out += [fg["name"].isin([]), fg["x"].isin([None]), (fg["name"] == "a") | (fg["x"] > 0),
            (fg["name"] != "a") & (fg["x"] != math.nan), (fg["name"] == "a") | (fg["x"] == math.nan)]
    return out


def expected(condition: Any, table: pa.Table) -> list[int]:
    """The ids of the rows for which Python's own comparison says the condition holds."""
    return sorted(row["id"] for row in table.to_pylist() if condition.holds(row))


def duckdb_answers(fg: Any, conditions: list[Any]) -> list[list[int]]:
    """For each condition, the ids of the rows DuckDB keeps, as its engine renders the condition (bound values)."""
    import duckdb

    from hopsml.featurestore import engine

    kinds = engine.column_kinds(fg.select_all())
    params: list[Any] = []
    columns = [engine.duckdb_condition(c, lambda f: '"' + f.name + '"', params, kinds) for c in conditions]
    connection = duckdb.connect()
    try:
        connection.execute("SET TimeZone = 'UTC'")
        connection.register("g0", fg.table.read())
        selected = ", ".join(f"coalesce({c}, false)" for c in columns)
        found = connection.execute(f"SELECT id, {selected} FROM g0", params).fetchall()
    finally:
        connection.close()
    return [sorted(row[0] for row in found if row[i + 1]) for i in range(len(conditions))]


def spark_answers(spark: Any, fg: Any, conditions: list[Any], chunk: int = 150) -> list[list[int]]:
    """For each condition, the ids of the rows Spark keeps, as its engine renders the condition (literals)."""
    from pyspark.sql import functions as F

    from hopsml.featurestore import engine

    kinds = engine.column_kinds(fg.select_all())
    frame = fg.table.spark(spark).cache()
    out: list[list[int]] = []
    for start in range(0, len(conditions), chunk):
        part = conditions[start:start + chunk]
        columns = [F.coalesce(engine.spark_condition(c, lambda f: F.col(f"`{f.name}`"), kinds), F.lit(False))
                   .alias(f"c{i}") for i, c in enumerate(part)]
        found = frame.select("id", *columns).collect()
        out += [sorted(row["id"] for row in found if row[f"c{i}"]) for i in range(len(part))]
    frame.unpersist()
    return out
