"""The two engines that answer a query, with one answer: DuckDB for data one machine holds (no JVM; its ASOF
JOIN over the groups' Parquet files), Spark for what outgrows it (the join runs in Spark, its sort-merge as-of
join where it has one; nothing is collected on the driver). `read_options={"engine": "duckdb" | "spark"}`
chooses; by default DuckDB up to SPARK_ABOVE_ROWS rows in all the query's groups (REMOTE_SPARK_ABOVE_ROWS under an
S3 or HDFS root, where DuckDB joins the versions in memory), Spark above. DuckDB streams and spills, and on one
machine it was 24x faster than Spark at 11M rows (bench/feature_store.py, 1.7 GiB peak for the whole bench
process); Spark is for what outgrows one machine.

Point in time, both ways: a left row with event time t gets, from each joined group that has an event time,
the row of its key with the newest event time <= t (nulls when there is none; an inner join drops the row);
a group with a staleness window `ttl` gives only a row with event time >= t - ttl.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from hopsml.errors import FeatureStoreError

if TYPE_CHECKING:
    import duckdb
    import pyarrow as pa
    from pyspark.sql import Column, DataFrame, SparkSession

    from hopsml.featurestore.query import Query

SPARK_ABOVE_ROWS = 100_000_000
REMOTE_SPARK_ABOVE_ROWS = 10_000_000
ENGINES = ("duckdb", "spark")


def choose(query: Query, read_options: dict[str, Any] | None, dataframe_type: str) -> str:
    wanted = str((read_options or {}).get("engine") or "").lower()
    if wanted in ("python", "pandas"):
        wanted = "duckdb"
    if wanted and wanted not in ENGINES:
        raise FeatureStoreError(f"read_options engine {wanted!r}: choose 'duckdb' (or 'python') or 'spark'")
    if wanted:
        return wanted
    if dataframe_type == "spark":
        return "spark"
    rows = sum(group.table.row_count(versions(query)[group.key]) for group in query.groups())
    remote = any(group.table.remote for group in query.groups())
    return "spark" if rows > (REMOTE_SPARK_ABOVE_ROWS if remote else SPARK_ABOVE_ROWS) else "duckdb"


def versions(query: Query) -> dict[str, int]:
    """Each group's table version the query reads: the newest, or the one at the query's as_of time."""
    pinned = dict(query.pinned)
    out = {}
    for group in query.groups():
        if group.key in pinned:
            out[group.key] = pinned[group.key]
        elif query.wallclock is not None:
            out[group.key] = group.table.version_at(query.wallclock)
        else:
            out[group.key] = group.table.latest_version()
    return out


def run(query: Query, dataframe_type: str = "default", read_options: dict[str, Any] | None = None) -> Any:
    """The query's rows as `dataframe_type` asks: 'default'/'pandas', 'polars', 'pyarrow', 'spark'."""
    engine = choose(query, read_options, dataframe_type)
    if engine == "spark":
        frame = spark_frame(query)
        if dataframe_type == "spark":
            return frame
        table = frame.toArrow() if hasattr(frame, "toArrow") else None
        if table is None:
            return frame.toPandas()
        return _as(table, dataframe_type)
    return _as(duckdb_arrow(query), dataframe_type)


def _as(table: Any, dataframe_type: str) -> Any:
    kind = dataframe_type.lower()
    if kind in ("default", "pandas"):
        return table.to_pandas()
    if kind == "polars":
        import polars as pl

        return pl.from_arrow(table)
    if kind in ("pyarrow", "arrow"):
        return table
    if kind == "spark":
        from hopsml.cluster import session

        return session.get_or_create().createDataFrame(table.to_pandas())
    raise FeatureStoreError(f"dataframe_type {dataframe_type!r}: choose 'default', 'pandas', 'polars', 'pyarrow' "
                            "or 'spark'")


# --- DuckDB ---------------------------------------------------------------------------------------------
def _q(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _aliases(query: Query) -> dict[str, str]:
    return {group.key: f"g{i}" for i, group in enumerate(query.groups())}


# --- filters: values bound, never SQL text (query.py says what each op means) --------------------------------
_SQL_OPS = {"==": "=", "!=": "<>", "<": "<", "<=": "<=", ">": ">", ">=": ">="}


def column_kind(arrow_type: str) -> str:
    """A column's kind from its Arrow type's name: string, float, number, bool, time, date, or '' (unchecked).

    >>> [column_kind(t) for t in ("large_string", "double", "int64", "timestamp[us, tz=UTC]", "date32[day]")]
    ['string', 'float', 'number', 'time', 'date']
    """
    kind = arrow_type.split("[")[0].split("(")[0]
    if kind in ("string", "large_string", "string_view", "utf8", "large_utf8"):
        return "string"
    if kind in ("float", "double", "halffloat", "float16", "float32", "float64"):
        return "float"
    if kind.startswith(("int", "uint", "decimal")):
        return "number"
    if kind in ("bool", "boolean"):
        return "bool"
    if kind.startswith("timestamp"):
        return "time"
    if kind.startswith("date"):
        return "date"
    return ""


def _fitted(condition: Any, kinds: dict[tuple[str, str], str]) -> Any:
    """The condition with each value checked against its column's kind (`kinds`: (group key, feature) -> kind)
    and made the value that column compares with; a value that does not fit is refused, naming the column."""
    from hopsml.featurestore.query import Filter, Logic

    if isinstance(condition, Logic):
        return Logic(condition.op, _fitted(condition.left, kinds), _fitted(condition.right, kinds))
    feature = condition.feature
    kind = kinds.get((feature.group, feature.name), "")
    if condition.op == "like" and kind not in ("string", ""):
        raise FeatureStoreError(f"filter on {feature.name!r}: like() compares strings, and {feature.name!r} is a "
                                f"{kind} column")
    values = condition.value if condition.op == "in" else [condition.value]
    fitted = [_fit(v, kind, feature.name) for v in values]
    return Filter(feature, condition.op, fitted if condition.op == "in" else fitted[0])


def _fit(value: Any, kind: str, name: str) -> Any:
    import datetime as dt
    import decimal

    if value is None or not kind:
        return value
    if kind == "time" and isinstance(value, dt.date) and not isinstance(value, dt.datetime):
        return dt.datetime(value.year, value.month, value.day, tzinfo=dt.timezone.utc)   # midnight UTC, both engines
    number = isinstance(value, (int, float, decimal.Decimal)) and not isinstance(value, bool)
    if kind in ("float", "number") and number or kind == "string" and isinstance(value, str) \
            or kind == "bool" and isinstance(value, bool) or kind in ("time", "date") and isinstance(value, dt.date):
        return value
    if kind in ("time", "date") and isinstance(value, str):
        try:
            parsed = dt.datetime.fromisoformat(value.strip())
        except ValueError:
            raise FeatureStoreError(f"filter on {name!r}: {value[:80]!r} is not a time; give a datetime, a date or an "
                                    "ISO string such as '2024-05-01 12:00:00'") from None
        parsed = parsed if parsed.tzinfo else parsed.replace(tzinfo=dt.timezone.utc)
        return parsed.astimezone(dt.timezone.utc) if kind == "time" or parsed.time() != dt.time(0) else parsed.date()
    shown = repr(value) if not isinstance(value, str) else repr(value[:80])
    raise FeatureStoreError(f"filter on {name!r}: {shown} ({type(value).__name__}) cannot be compared with a {kind} "
                            f"column; give a {'number' if kind == 'float' else kind} value")


def column_kinds(query: Query) -> dict[tuple[str, str], str]:
    """(group key, feature) -> its column's kind, for every group the query reads."""
    return {(group.key, feature.name): column_kind(feature.type) for group in query.groups()
            for feature in group.features}


def duckdb_condition(condition: Any, column: Any, params: list[Any], kinds: dict[tuple[str, str], str]) -> str:
    """A filter (or an AND/OR of them) as DuckDB SQL: `column(feature)` is the SQL expression of a feature's
    column; each value is a `?` whose value is appended to `params`, in the text's order."""
    from hopsml.featurestore.query import Filter, is_nan

    if not isinstance(condition, Filter):
        left = duckdb_condition(condition.left, column, params, kinds)
        return f"({left} {condition.op} {duckdb_condition(condition.right, column, params, kinds)})"
    condition = _fitted(condition, kinds)
    c, op, value = column(condition.feature), condition.op, condition.value
    if op == "in":
        values = [v for v in value if v is not None and not is_nan(v)]
        params.extend(values)
        parts = ([f"{c} IN ({', '.join('?' * len(values))})"] if values else []) + \
            ([f"{c} IS NULL"] if any(v is None for v in value) else [])
        return f"({' OR '.join(parts)})" if parts else "FALSE"
    if op == "like":   # DuckDB's LIKE has no escape character unless one is given
        params.append(value)
        return f"{c} LIKE ?"
    if value is None:
        return f"{c} IS {'NOT ' if op == '!=' else ''}NULL"
    if is_nan(value):
        return f"{c} IS NOT NULL" if op == "!=" else "FALSE"
    params.append(value)
    if op in (">", ">=") and _floating(condition, kinds, value):   # SQL puts NaN above every number
        return f"({c} {_SQL_OPS[op]} ? AND NOT isnan({c}))"
    return f"{c} {_SQL_OPS[op]} ?"


def spark_condition(condition: Any, column: Any, kinds: dict[tuple[str, str], str]) -> Any:
    """A filter (or an AND/OR of them) as a Spark Column: `column(feature)` is the feature's Column; each value
    is a literal Column, never parsed as SQL."""
    from pyspark.sql import functions as F

    from hopsml.featurestore.query import Filter, is_nan

    if not isinstance(condition, Filter):
        left, right = (spark_condition(c, column, kinds) for c in (condition.left, condition.right))
        return left & right if condition.op == "AND" else left | right
    condition = _fitted(condition, kinds)
    c, op, value = column(condition.feature), condition.op, condition.value
    if op == "in":
        values = [v for v in value if v is not None and not is_nan(v)]
        found = c.isin(*[F.lit(v) for v in values]) if values else F.lit(False)
        return found | c.isNull() if any(v is None for v in value) else found
    if op == "like":   # Spark's LIKE escapes with a backslash: one in the pattern stands for itself
        return c.like(value.replace("\\", "\\\\"))
    if value is None:
        return c.isNotNull() if op == "!=" else c.isNull()
    if is_nan(value):
        return c.isNotNull() if op == "!=" else F.lit(False)
    literal = F.lit(value)
    compared = {"==": c == literal, "!=": c != literal, "<": c < literal, "<=": c <= literal, ">": c > literal,
                ">=": c >= literal}[op]
    if op in (">", ">=") and _floating(condition, kinds, value):   # Spark puts NaN above every number
        return compared & ~F.isnan(c)
    return compared


def _floating(condition: Any, kinds: dict[tuple[str, str], str], value: Any) -> bool:
    """Whether the filter's column may hold NaN: a float column, or one of unknown kind given a float."""
    kind = kinds.get((condition.feature.group, condition.feature.name), "")
    return kind == "float" or not kind and isinstance(value, float)


def _checked_aliases(query: Query, aliases: dict[str, str]) -> None:
    for condition in query.filters:
        for feature in condition.features():
            if feature.group not in aliases:
                raise FeatureStoreError(f"the filter on {feature.name!r} reads group {feature.group!r}, which the "
                                        "query does not select from")


def duckdb_sql(query: Query) -> str:
    """The query as DuckDB SQL over one view per group (g0 the left group, g1... the joined ones); each filter
    value is a `?` (`duckdb_statement` gives the values)."""
    return duckdb_statement(query)[0]


def duckdb_statement(query: Query) -> tuple[str, list[Any]]:
    """The query's DuckDB SQL and the values of its `?` parameters, in order."""
    aliases = _aliases(query)
    _checked_aliases(query, aliases)
    left = query.left
    columns = [f"g0.{_q(name)}" for name in query.features]
    taken = list(query.features)
    joins = []
    from hopsml.featurestore.query import _joined_name, repeats_left_key

    where: list[str] = []
    windowed: dict[str, str] = {}   # alias -> the condition under which its row is fresh enough
    for join in query.joins:
        right = join.query.left
        alias = aliases[right.key]
        point_in_time = left.event_time is not None and right.event_time is not None
        # the ASOF match is the newest row at or before the label's time; older than the window, it counts as none
        fresh = (f"epoch_us({alias}.{_q(right.event_time)}) >= epoch_us(g0.{_q(left.event_time)}) - "
                 f"{_ttl_us(right)}" if point_in_time and right.ttl else None)
        if fresh:
            windowed[alias] = fresh
        for name in join.query.features:
            if not repeats_left_key(join, name, query.features):
                out = _joined_name(name, taken, join)
                taken.append(out)
                columns.append(f"{_windowed(alias, name, windowed)} AS {_q(out)}")
        on = [f"g0.{_q(lk)} = {alias}.{_q(rk)}" for lk, rk in zip(join.left_on, join.right_on)]
        if point_in_time:
            on.append(f"g0.{_q(left.event_time)} >= {alias}.{_q(right.event_time)}")
        kind = ("ASOF " if point_in_time else "") + ("LEFT JOIN" if join.join_type == "left" else "JOIN")
        joins.append(f"{kind} {alias} ON {' AND '.join(on)}")
        if fresh and join.join_type == "inner":
            where.append(fresh)
    sql = f"SELECT {', '.join(columns)} FROM g0 " + " ".join(joins)
    params: list[Any] = []
    kinds = column_kinds(query)
    where += [duckdb_condition(c, lambda f: _windowed(aliases[f.group], f.name, windowed), params, kinds)
              for c in query.filters]
    if where:
        sql += " WHERE " + " AND ".join(where)
    return sql, params


_DUCKDB_TYPES = {"string": "VARCHAR", "large_string": "VARCHAR", "string_view": "VARCHAR", "int8": "TINYINT",
                 "int16": "SMALLINT", "int32": "INTEGER", "int64": "BIGINT", "uint8": "UTINYINT",
                 "uint16": "USMALLINT", "uint32": "UINTEGER", "uint64": "UBIGINT", "date32[day]": "DATE",
                 "bool": "BOOLEAN"}


def hive_options(partitions: list[Any]) -> str:
    """read_parquet's options for a partitioned group: values from the folder names, in the table's types."""
    if not partitions:
        return ""
    types = ", ".join("'" + f.name.replace("'", "''") + f"': {_DUCKDB_TYPES[str(f.type)]}" for f in partitions)
    return f", hive_partitioning = true, hive_types = {{{types}}}"


def _windowed(alias: str, name: str, windowed: dict[str, str]) -> str:
    """A joined column as the query sees it: null where its row is older than the group's staleness window."""
    if alias in windowed:
        return f"CASE WHEN {windowed[alias]} THEN {alias}.{_q(name)} END"
    return f"{alias}.{_q(name)}"


def _ttl_us(group: Any) -> int:
    """The group's staleness window in microseconds (event times are stored in microseconds)."""
    return int(round(group.ttl * 1_000_000))


def duckdb_arrow(query: Query) -> Any:
    """The query's rows as an Arrow table, by DuckDB over the groups' Parquet files: the one statement of
    `duckdb_statement`, or `_as_of_arrow` where more than ONE_STATEMENT_UP_TO joins are all point in time (up to
    that many, its narrower joins cost more than they save: 1M x 3 groups, 3.6 s against 2.8 s)."""
    import duckdb

    read = versions(query)
    connection = duckdb.connect()
    try:
        connection.execute("SET TimeZone = 'UTC'")
        for group, alias in zip(query.groups(), _aliases(query).values()):
            files = [] if group.table.remote else group.table.files(read[group.key])
            if files:   # DuckDB's own Parquet reader: a scan of an Arrow dataset was 300x slower at 1M rows
                listed = ", ".join("'" + f.replace("'", "''") + "'" for f in files)
                connection.execute(f"CREATE VIEW {alias} AS SELECT * FROM read_parquet([{listed}], "
                                   f"union_by_name = true{hive_options(group.table.partitioning(read[group.key]))})")
            else:   # remote (this DuckDB has no S3 or HDFS reader): the version read by Arrow, into memory
                connection.register(alias, group.table.dataset(read[group.key]).to_table())
        if len(query.joins) > ONE_STATEMENT_UP_TO and \
                all(query.left.event_time and j.query.left.event_time for j in query.joins):
            return _as_of_arrow(query, connection)
        sql, params = duckdb_statement(query)
        return _fetched(connection.sql(sql, params=params or None))
    finally:
        connection.close()


def _fetched(relation: duckdb.DuckDBPyRelation) -> pa.Table:
    # DuckDB 2.x calls it to_arrow_table, 1.x arrow
    fetch: Callable[[], pa.Table] = getattr(relation, "to_arrow_table", None) or relation.arrow
    return fetch()


_ROW_NUMBER = "__hopsml_r"
ONE_STATEMENT_UP_TO = 4         # point-in-time joins chained in one statement: DuckDB runs them on both cores
AS_OF_JOINS_PER_STATEMENT = 1   # above: 25 groups of 10 features, CPU 22 s one a statement, 35 s four a statement


def _as_of_arrow(query: Query, connection: duckdb.DuckDBPyConnection) -> pa.Table:
    """`duckdb_statement`'s answer where every join is point in time, a group or a few at a time: each statement
    chains the ASOF JOINs of AS_OF_JOINS_PER_STATEMENT groups onto only the left rows' number, keys and event time,
    and its rows are put back in the left rows' order by that number (an ASOF LEFT JOIN gives one row per left row).
    One statement of all the joins sorted every column built so far again in each join (25 groups of 10 features:
    1021 s, 21 GiB). Filters and inner joins drop rows last."""
    import itertools

    import numpy as np
    import pyarrow as pa

    from hopsml.featurestore.query import _joined_name, repeats_left_key

    aliases = _aliases(query)
    _checked_aliases(query, aliases)
    left = query.left
    referenced = {(aliases[f.group], f.name) for c in query.filters for f in c.features()}
    hidden: dict[tuple[str, str], str] = {}   # (alias, feature) a filter reads -> its column while joining

    def hide(alias: str, name: str) -> str:
        return hidden.setdefault((alias, name), f"__hopsml_c{len(hidden)}")

    keys = sorted({k for join in query.joins for k in join.left_on} | {left.event_time})
    key_names = {k: f"__hopsml_k{i}" for i, k in enumerate(keys)}
    wanted = [f"g0.{_q(name)} AS {_q(name)}" for name in query.features]
    wanted += [f"g0.{_q(k)} AS {key_names[k]}" for k in keys]
    wanted += [f"g0.{_q(name)} AS {hide(a, name)}" for a, name in sorted(referenced) if a == "g0"]
    base = _fetched(connection.sql(f"SELECT {', '.join(wanted)} FROM g0"))
    rows = base.num_rows
    base = base.append_column(_ROW_NUMBER, pa.array(np.arange(rows, dtype=np.int64)))
    connection.register("__hopsml_left", base.select([*key_names.values(), _ROW_NUMBER]))
    columns = {name: base.column(name) for name in query.features}
    columns.update({hidden[r]: base.column(hidden[r]) for r in hidden})
    taken = list(query.features)
    where: list[str] = []
    numbered = itertools.count()
    for first in range(0, len(query.joins), AS_OF_JOINS_PER_STATEMENT):
        selected = [f"l.{_ROW_NUMBER}"]
        outputs: dict[str, str] = {}   # output column -> its column in this statement's rows
        clauses: list[str] = []
        inner: list[str] = []
        for join in query.joins[first:first + AS_OF_JOINS_PER_STATEMENT]:
            right = join.query.left
            alias = aliases[right.key]
            fresh = (f"epoch_us({alias}.{_q(right.event_time)}) >= epoch_us(l.{key_names[left.event_time]}) - "
                     f"{_ttl_us(right)}" if right.ttl else None)
            windowed = {alias: fresh} if fresh else {}
            for name in join.query.features:
                if not repeats_left_key(join, name, query.features):
                    out = _joined_name(name, taken, join)
                    taken.append(out)
                    outputs[out] = f"__hopsml_o{next(numbered)}"
                    selected.append(f"{_windowed(alias, name, windowed)} AS {outputs[out]}")
            for a, name in sorted(referenced):
                if a == alias:
                    outputs[hide(a, name)] = hide(a, name)
                    selected.append(f"{_windowed(alias, name, windowed)} AS {hide(a, name)}")
            if join.join_type == "inner":
                inner.append(f"__hopsml_m{len(where) + len(inner)}")
                outputs[inner[-1]] = inner[-1]
                selected.append(f"({alias}.{_q(join.right_on[0])} IS NOT NULL{' AND ' + fresh if fresh else ''})"
                                f" AS {inner[-1]}")
            on = [f"l.{key_names[lk]} = {alias}.{_q(rk)}" for lk, rk in zip(join.left_on, join.right_on)]
            on.append(f"l.{key_names[left.event_time]} >= {alias}.{_q(right.event_time)}")
            clauses.append(f"ASOF LEFT JOIN {alias} ON {' AND '.join(on)}")
        where += inner
        joined = _fetched(connection.sql(f"SELECT {', '.join(selected)} FROM __hopsml_left l {' '.join(clauses)}"))
        order = np.empty(rows, dtype=np.int64)   # the left rows' order: their numbers scattered back
        order[joined.column(_ROW_NUMBER).to_numpy()] = np.arange(rows, dtype=np.int64)
        joined = joined.take(pa.array(order))
        columns.update({out: joined.column(inner_name) for out, inner_name in outputs.items()})
    table = pa.table(columns)
    connection.unregister("__hopsml_left")
    if not where and not query.filters:
        return table.select(taken)
    params: list[Any] = []
    kinds = column_kinds(query)
    where += [duckdb_condition(c, lambda f: hidden[(aliases[f.group], f.name)], params, kinds)
              for c in query.filters]
    connection.register("__hopsml_joined", table)
    return _fetched(connection.sql(f"SELECT {', '.join(_q(c) for c in taken)} FROM __hopsml_joined WHERE "
                                   + " AND ".join(where), params=params or None))


# --- Spark ---------------------------------------------------------------------------------------------
SORT_MERGE_AS_OF = "spark.sql.join.sortMergeAsOfJoin.enabled"
_AS_OF_TIME = "__hopsml_as_of_us"


def native_as_of(spark: SparkSession) -> bool:
    """Whether this Spark plans an as-of join as one sort-merge pass (SortMergeAsOfJoinExec, the setting
    SORT_MERGE_AS_OF, Spark 4.3 here); it is switched on for the session when it exists. Without it Spark rewrites
    `_joinAsOf` into a cartesian product, so older Spark keeps the join on the key and time plus a window."""
    if not hasattr(spark.conf, "isModifiable") or not spark.conf.isModifiable(SORT_MERGE_AS_OF):
        return False
    if str(spark.conf.get(SORT_MERGE_AS_OF, "false")).lower() != "true":
        spark.conf.set(SORT_MERGE_AS_OF, "true")
    return True


def spark_frame(query: Query) -> Any:
    """The query as a Spark DataFrame: each group read from its Parquet files at the query's version, each
    point-in-time join Spark's sort-merge as-of join on the key and the event time in microseconds (where Spark has
    one, `native_as_of`), else a join on the key and event time <= the left row's, keeping the newest match."""
    from pyspark.sql import functions as F

    from hopsml.cluster import session
    from hopsml.featurestore.query import _joined_name, repeats_left_key

    spark = session.get_or_create(query.left.store.settings)
    read = versions(query)
    aliases = _aliases(query)
    left = query.left
    frame = left.table.spark(spark, read[left.key])
    any_point_in_time = any(left.event_time and j.query.left.event_time for j in query.joins)
    native = any_point_in_time and native_as_of(spark)
    if native:
        frame = frame.withColumn(_AS_OF_TIME, _micros(_spark_col("", left.event_time)))
    elif any_point_in_time:
        frame = frame.withColumn(_ROW, F.monotonically_increasing_id())
    frame = frame.alias("g0")
    columns = [_spark_col("g0", name).alias(name) for name in query.features]
    taken = list(query.features)
    for join in query.joins:
        right = join.query.left
        alias = aliases[right.key]
        filtered = {f.name for condition in query.filters for f in condition.features() if f.group == right.key}
        wanted = {*join.query.features, *join.right_on, *([right.event_time] if right.event_time else []), *filtered}
        other = right.table.spark(spark, read[right.key]).select(*[_spark_col("", n) for n in wanted])
        terms = [_spark_col("g0", lk) == _spark_col(alias, rk) for lk, rk in zip(join.left_on, join.right_on)]
        condition = terms[0]
        for term in terms[1:]:
            condition = condition & term
        point_in_time = bool(left.event_time and right.event_time)
        if point_in_time and native:
            other = other.withColumn(_AS_OF_TIME, _micros(_spark_col("", right.event_time))).alias(alias)
            frame = frame._joinAsOf(other, leftAsOfColumn=_spark_col("g0", _AS_OF_TIME),
                                    rightAsOfColumn=_spark_col(alias, _AS_OF_TIME), on=condition, how="left",
                                    tolerance=F.lit(_ttl_us(right)) if right.ttl else None)
        elif point_in_time:
            frame = _newest_at_or_before(frame, other.alias(alias), condition, left, right, alias)
        else:
            frame = frame.join(other.alias(alias), condition, "left")
        if join.join_type == "inner":
            frame = frame.where(_spark_col(alias, join.right_on[0]).isNotNull())
        for name in join.query.features:
            if not repeats_left_key(join, name, query.features):
                out = _joined_name(name, taken, join)
                taken.append(out)
                columns.append(_spark_col(alias, name).alias(out))
    _checked_aliases(query, aliases)
    kinds = column_kinds(query)
    for condition in query.filters:
        frame = frame.where(spark_condition(condition, lambda f: _spark_col(aliases[f.group], f.name), kinds))
    return frame.select(*columns)


_ROW = "__hopsml_row"


def _micros(column: Column) -> Column:
    """An event time as microseconds since the epoch: the as-of key Spark's sort-merge as-of join orders by."""
    from pyspark.sql import functions as F

    return F.unix_micros(column.cast("timestamp"))


def _newest_at_or_before(frame: DataFrame, other: DataFrame, condition: Column, left: Any, right: Any,
                         alias: str) -> DataFrame:
    """The point-in-time join where Spark has no as-of join: every row of the key at or before (and within the
    group's ttl), then the newest per left row (`_ROW`) by a window."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    condition = condition & (_spark_col("g0", left.event_time) >= _spark_col(alias, right.event_time))
    if right.ttl:
        condition = condition & (F.unix_micros(_spark_col(alias, right.event_time))
                                 >= F.unix_micros(_spark_col("g0", left.event_time)) - _ttl_us(right))
    frame = frame.join(other, condition, "left")
    newest = Window.partitionBy(F.col(_ROW)).orderBy(_spark_col(alias, right.event_time).desc_nulls_last())
    return frame.withColumn("__hopsml_rank", F.row_number().over(newest)).where("__hopsml_rank = 1") \
        .drop("__hopsml_rank")


def _spark_col(alias: str, name: str) -> Any:
    """A column (of a group's alias), named as Spark's col() parses it: a backtick in the name doubled."""
    from pyspark.sql import functions as F

    quoted = "`" + name.replace("`", "``") + "`"
    return F.col(f"{alias}.{quoted}" if alias else quoted)
