"""The two engines that answer a query, with one answer: DuckDB for data one machine holds (no JVM; its ASOF
JOIN over the groups' Parquet files), Spark for what outgrows it (the join runs in Spark, nothing is collected
on the driver). `read_options={"engine": "duckdb" | "spark"}` chooses; by default DuckDB up to
SPARK_ABOVE_ROWS rows in all the query's groups (REMOTE_SPARK_ABOVE_ROWS under an S3 or HDFS root, where DuckDB
joins the versions in memory), Spark above. DuckDB streams and spills, and on one machine it was 24x faster than
Spark at 11M rows (bench/feature_store.py, 1.7 GiB peak for the whole bench process); Spark is for what outgrows
one machine.

Point in time, both ways: a left row with event time t gets, from each joined group that has an event time,
the row of its key with the newest event time <= t (nulls when there is none; an inner join drops the row);
a group with a staleness window `ttl` gives only a row with event time >= t - ttl.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from hopsml.errors import FeatureStoreError

if TYPE_CHECKING:
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


def _filters_sql(query: Query, aliases: dict[str, str], column: Any, timestamp: str) -> list[str]:
    """The query's filters in SQL; `column(alias, name)` is the expression of a group's column."""
    from hopsml.featurestore.query import Filter

    def render(condition: Any) -> str:
        if isinstance(condition, Filter):
            feature = condition.feature
            alias = aliases.get(feature.group)
            if alias is None:
                raise FeatureStoreError(f"the filter on {feature.name!r} reads group {feature.group!r}, which the "
                                        "query does not select from")
            return condition.sql(column(alias, feature.name), timestamp)
        return f"({render(condition.left)} {condition.op} {render(condition.right)})"

    return [render(f) for f in query.filters]


def duckdb_sql(query: Query) -> str:
    """The query as DuckDB SQL over one view per group (g0 the left group, g1... the joined ones)."""
    aliases = _aliases(query)
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
    where += _filters_sql(query, aliases, lambda alias, name: _windowed(alias, name, windowed), "TIMESTAMPTZ")
    if where:
        sql += " WHERE " + " AND ".join(where)
    return sql


_DUCKDB_TYPES = {"string": "VARCHAR", "large_string": "VARCHAR", "string_view": "VARCHAR", "int8": "TINYINT",
                 "int16": "SMALLINT", "int32": "INTEGER", "int64": "BIGINT", "uint8": "UTINYINT",
                 "uint16": "USMALLINT", "uint32": "UINTEGER", "uint64": "UBIGINT", "date32[day]": "DATE",
                 "bool": "BOOLEAN"}


def _hive(partitions: list[Any]) -> str:
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
    """The query's rows as an Arrow table, by DuckDB over the groups' Arrow datasets."""
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
                                   f"union_by_name = true{_hive(group.table.partitioning(read[group.key]))})")
            else:   # remote (this DuckDB has no S3 or HDFS reader): the version read by Arrow, into memory
                connection.register(alias, group.table.dataset(read[group.key]).to_table())
        relation = connection.sql(duckdb_sql(query))
        # DuckDB 2.x calls it to_arrow_table, 1.x arrow
        fetch: Any = getattr(relation, "to_arrow_table", None) or relation.arrow
        return fetch()
    finally:
        connection.close()


# --- Spark ----------------------------------------------------------------------------------------------
def spark_frame(query: Query) -> Any:
    """The query as a Spark DataFrame: each group read from its Parquet files at the query's version, each
    point-in-time join done as one sort per key: the label rows and the group's rows in one frame, ordered by time
    within each key (a group row before a label row of the same time), each label row taking the newest group row
    before it. No range join and no row-number window over its matches: one shuffle and one pass a join."""
    from pyspark.sql import functions as F

    from hopsml.cluster import session
    from hopsml.featurestore.query import _joined_name, repeats_left_key

    spark = session.get_or_create(query.left.store.settings)
    read = versions(query)
    aliases = _aliases(query)
    left = query.left
    frame = left.table.spark(spark, read[left.key])
    names = {("g0", name): name for name in frame.columns}   # (alias, feature) -> its column in `frame`
    columns = [F.col(f"`{name}`").alias(name) for name in query.features]
    taken = list(query.features)
    filtered = {(c.feature.group, c.feature.name) for c in _conditions(query)}
    for join in query.joins:
        right = join.query.left
        alias = aliases[right.key]
        emitted = [n for n in join.query.features if not repeats_left_key(join, n, query.features)]
        wanted = list(dict.fromkeys([*emitted, *(name for group, name in filtered if group == right.key)]))
        inside = {name: f"__{alias}__{name}" for name in wanted}
        other = right.table.spark(spark, read[right.key])
        point_in_time = bool(left.event_time and right.event_time)
        if point_in_time:
            frame = _as_of_join(frame, other, join, left.event_time, right, inside, alias)
        else:
            keys = [F.col(f"`{rk}`").alias(f"__{alias}__key{i}") for i, rk in enumerate(join.right_on)]
            other = other.select(*keys, *[F.col(f"`{n}`").alias(inside[n]) for n in wanted],
                                 F.lit(True).alias(f"__{alias}__matched"))
            condition = [F.col(f"`{lk}`") == F.col(f"`__{alias}__key{i}`") for i, lk in enumerate(join.left_on)]
            frame = frame.join(other, _all(condition), "left").drop(*[f"__{alias}__key{i}"
                                                                      for i in range(len(join.right_on))])
        if join.join_type == "inner":
            frame = frame.where(F.col(f"`__{alias}__matched`").isNotNull())
        frame = frame.drop(f"__{alias}__matched")
        names.update({(alias, rk): lk for lk, rk in zip(join.left_on, join.right_on)})
        names.update({(alias, name): column for name, column in inside.items()})
        for name in emitted:
            out = _joined_name(name, taken, join)
            taken.append(out)
            columns.append(F.col(f"`{inside[name]}`").alias(out))

    def column(alias: str, name: str) -> str:
        if (alias, name) not in names:
            raise FeatureStoreError(f"the filter on {name!r} reads a column the query does not have")
        return f"`{names[(alias, name)]}`"

    for where in _filters_sql(query, aliases, column, "TIMESTAMP"):
        frame = frame.where(F.expr(where))
    return frame.select(*columns)


def _conditions(query: Query) -> list[Any]:
    """Every single-feature filter of the query, out of its and/or trees."""
    from hopsml.featurestore.query import Filter

    found: list[Any] = []

    def walk(condition: Any) -> None:
        if isinstance(condition, Filter):
            found.append(condition)
        else:
            walk(condition.left)
            walk(condition.right)

    for condition in query.filters:
        walk(condition)
    return found


def _all(terms: list[Any]) -> Any:
    condition = terms[0]
    for term in terms[1:]:
        condition = condition & term
    return condition


def _as_of_join(frame: Any, other: Any, join: Any, left_time: str, right: Any, inside: dict[str, str],
                alias: str) -> Any:
    """`frame` with each row given, as columns `inside`, the newest row of `other` of its key at or before its
    time (nulls where there is none, or where it is older than the group's staleness window); the column
    `__<alias>__matched` is null where there was none."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    side, when, carried = f"__{alias}__side", f"__{alias}__t", f"__{alias}__row"
    keys = [f"__{alias}__key{i}" for i in range(len(join.left_on))]
    fields = [F.col(f"`{name}`").alias(column) for name, column in inside.items()]
    rows = other.select(*[F.col(f"`{rk}`").alias(k) for rk, k in zip(join.right_on, keys)],
                        F.col(f"`{right.event_time}`").alias(when), F.lit(0).alias(side),
                        F.struct(*fields, F.col(f"`{right.event_time}`").alias(when)).alias(carried))
    labels = frame.select("*", *[F.col(f"`{lk}`").alias(k) for lk, k in zip(join.left_on, keys)],
                          F.col(f"`{left_time}`").alias(when), F.lit(1).alias(side))
    both = labels.unionByName(rows, allowMissingColumns=True)
    newest = (Window.partitionBy(*[F.col(k) for k in keys]).orderBy(F.col(when), F.col(side))
              .rowsBetween(Window.unboundedPreceding, Window.currentRow))
    both = both.withColumn(carried, F.last(F.col(carried), ignorenulls=True).over(newest))
    found = F.when(_all([F.col(k).isNotNull() for k in keys]), F.col(carried))   # a null key matches nothing
    if right.ttl:   # older than the window counts as none
        fresh = F.unix_micros(F.col(f"{carried}.{when}")) >= F.unix_micros(F.col(when)) - _ttl_us(right)
        found = F.when(fresh, found)
    both = both.where(F.col(side) == 1).withColumn(carried, found)
    out = both.select(*[F.col(f"`{c}`") for c in frame.columns],
                      *[F.col(f"{carried}.`{column}`").alias(column) for column in inside.values()],
                      F.when(F.col(carried).isNotNull(), F.lit(True)).alias(f"__{alias}__matched"))
    return out
