"""What an insert is given (a pandas, Polars or PySpark DataFrame, an Arrow table, a CSV or Parquet file) made
into one Arrow table with the group's names and types, and refused, naming the column and a sample value,
when it cannot be a batch of the group: a missing or null key or event time, an event time that is not a time, a
column whose type differs from the group's. A key the batch repeats keeps its last row, as Hopsworks' upsert does
(or refuses the batch with the write option duplicate_keys='refuse').

Feature names are lower case, as Hopsworks stores them: `primary_key=["Customer_ID"]` names the DataFrame's
column as it is spelt there, and the group's feature is `customer_id`. Event times are stored as UTC
timestamps (microseconds, Delta Lake's timestamp): a timestamp column (naive ones are taken as UTC), a date,
or int64 epoch milliseconds, which Hopsworks accepts too.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from hopsml.errors import FeatureStoreError

if TYPE_CHECKING:
    import pyarrow as pa

log = logging.getLogger(__name__)

EVENT_TIME_TYPE = "timestamp[us, tz=UTC]"


def to_arrow(data: object) -> pa.Table:
    """An Arrow table of `data`: pandas, Polars, PySpark (classic or Connect), Arrow, a dict of columns."""
    import pyarrow as pa

    if isinstance(data, pa.Table):
        return data
    if isinstance(data, pa.RecordBatch):
        return pa.Table.from_batches([data])
    module = type(data).__module__
    if module.startswith("pandas"):
        return pa.Table.from_pandas(data, preserve_index=False)
    if module.startswith("polars") and hasattr(data, "to_arrow"):
        return data.to_arrow()
    if module.startswith("pyspark"):
        if hasattr(data, "toArrow"):  # Spark 4 (classic and Connect)
            return data.toArrow()
        if hasattr(data, "toPandas"):
            return pa.Table.from_pandas(data.toPandas(), preserve_index=False)
    if isinstance(data, dict):
        return pa.table(data)
    raise FeatureStoreError(f"cannot insert a {type(data).__module__}.{type(data).__name__}: give a pandas, Polars or "
                            "PySpark DataFrame, or a pyarrow Table")


def read_file(path: str, delimiter: str = ",", skip_rows: int = 0, columns: Sequence[str] | None = None
              ) -> pa.Table:
    """A CSV or Parquet file (by its suffix) as an Arrow table, for `hopsml fs insert`; a CSV file's
    `delimiter`, `skip_rows` lines before its header (scikit-learn's CSV files start with one), and the
    `columns` of a file without a header."""
    import pyarrow.csv as pcsv
    import pyarrow.parquet as pq

    lower = path.lower()
    if lower.endswith((".parquet", ".pq")):
        return pq.read_table(path)
    if lower.endswith((".csv", ".csv.gz", ".txt")):
        import pyarrow as pa

        try:
            return pcsv.read_csv(path, read_options=pcsv.ReadOptions(skip_rows=skip_rows, column_names=list(columns)
                                                                     if columns else None),
                                 parse_options=pcsv.ParseOptions(delimiter=delimiter))
        except pa.ArrowInvalid as error:
            raise FeatureStoreError(f"cannot read {path} as CSV: {error} (check --delimiter, --skip-rows and "
                                    "--columns)") from None
    raise FeatureStoreError(f"cannot tell the format of {path!r}: name a .csv or .parquet file")


def lower_names(table: pa.Table) -> pa.Table:
    """The table with lower-case column names; two columns that differ only in case are refused."""
    seen: dict[str, str] = {}
    for name in table.column_names:
        if name.lower() in seen:
            raise FeatureStoreError(f"columns {seen[name.lower()]!r} and {name!r} differ only in case, and feature "
                                    "names are lower case: rename one")
        seen[name.lower()] = name
    return table.rename_columns([name.lower() for name in table.column_names])


def _sample(table: pa.Table, column: str, mask: pa.Array) -> str:
    import pyarrow.compute as pc

    rows = pc.indices_nonzero(mask).to_pylist()[:3]
    shown = ", ".join(f"row {r}: {table.column(column)[r].as_py()!r}" for r in rows)
    return f"{len(pc.indices_nonzero(mask))} rows, e.g. {shown}"


def event_times(table: pa.Table, column: str) -> pa.Table:
    """The table with `column` as UTC timestamps (see the module docstring), else a clear error."""
    import pyarrow as pa
    import pyarrow.compute as pc

    values = table.column(column)
    kind = values.type
    if pa.types.is_timestamp(kind):
        converted = values if kind.tz else pc.assume_timezone(values, "UTC")
    elif pa.types.is_date(kind):
        converted = values.cast(pa.timestamp("s")).cast(pa.timestamp("s", tz="UTC"))
    elif pa.types.is_integer(kind):
        converted = values.cast(pa.int64()).cast(pa.timestamp("ms", tz="UTC"))
    else:
        sample = next((v for v in values.to_pylist() if v is not None), None)
        raise FeatureStoreError(f"event_time column {column!r} is {type_name(kind)}, not a time (e.g. {sample!r}): "
                                "give a timestamp, a date, or int64 epoch milliseconds")
    converted = converted.cast(pa.timestamp("us", tz="UTC"))
    return table.set_column(table.column_names.index(column), column, converted)


KEEP_LAST, REFUSE = "last", "refuse"   # what an insert does with a key its batch repeats (write option duplicate_keys)


def duplicates_policy(write_options: Mapping[str, Any] | None, group: str) -> str:
    """The `duplicate_keys` write option: 'last' (the default: one row per key, the batch's last, as Hopsworks'
    upsert keeps) or 'refuse' (the batch is refused, naming a repeated key)."""
    chosen = str((write_options or {}).get("duplicate_keys", KEEP_LAST)).lower()
    if chosen not in (KEEP_LAST, REFUSE):
        raise FeatureStoreError(f"feature group {group!r}: write option duplicate_keys={chosen!r}: give 'last' (keep "
                                "the batch's last row per key) or 'refuse' (refuse a batch that repeats a key)")
    return chosen


def check_batch(table: pa.Table, primary_key: Sequence[str], event_time: str | None, group: str,
                duplicates: str = KEEP_LAST) -> pa.Table:
    """The batch as it can be inserted: refused for a missing key or time column or a null in one; a (primary key,
    event time) it holds more than once keeps its last row (logged with the count), or is refused with
    `duplicates='refuse'`."""
    import pyarrow as pa
    import pyarrow.compute as pc

    needed = list(dict.fromkeys([*primary_key, *([event_time] if event_time else [])]))   # the time may be a key
    missing = [c for c in needed if c not in table.column_names]
    if missing:
        raise FeatureStoreError(f"feature group {group!r}: the batch has no column {missing[0]!r} (its columns: "
                                f"{', '.join(table.column_names)})")
    for column in needed:
        nulls = pc.is_null(table.column(column))
        if pc.any(nulls).as_py():
            what = "event time" if column == event_time else "primary key"
            raise FeatureStoreError(f"feature group {group!r}: {what} column {column!r} is missing in "
                                    f"{pc.sum(nulls).as_py()} rows (e.g. row {pc.indices_nonzero(nulls)[0].as_py()}); "
                                    "every row needs one")
    if table.num_rows == 0:
        return table
    row = "__hopsml_row"
    numbered = table.select(needed).append_column(row, pa.array(range(table.num_rows), pa.int64()))
    counts = numbered.group_by(needed, use_threads=False).aggregate([([], "count_all"), (row, "max")])
    repeated = counts.filter(pc.greater(counts.column("count_all"), 1))
    if not repeated.num_rows:
        return table
    first = {c: repeated.column(c)[0].as_py() for c in needed}
    what = "(primary key, event time)" if event_time else "primary key"
    if duplicates == REFUSE:
        raise FeatureStoreError(f"feature group {group!r}: {repeated.num_rows} keys appear more than once in the "
                                f"batch, e.g. {first} ({repeated.column('count_all')[0].as_py()} rows); the write "
                                f"option duplicate_keys='refuse' allows each {what} once (leave it out to keep "
                                "the last row of each)")
    extra = pc.sum(repeated.column("count_all")).as_py() - repeated.num_rows
    log.warning("feature group %s: %d keys appear more than once in the batch (e.g. %s): kept the last row of "
                "each, %d rows left out, as Hopsworks' upsert does (write_options={'duplicate_keys': 'refuse'} "
                "refuses such a batch)", group, repeated.num_rows, first, extra)
    kept = pc.sort_indices(counts.column(f"{row}_max"))
    return table.take(pc.take(counts.column(f"{row}_max"), kept))


def check_partition_key(table: pa.Table, partition_key: Sequence[str], group: str) -> None:
    """Refuse partition columns a first batch lacks, or whose type makes no folder name: strings, integers,
    dates and booleans partition (a float or a time would make a folder per value; partition by a day or
    bucket column derived from it instead)."""
    import pyarrow as pa

    for column in partition_key:
        if column not in table.column_names:
            raise FeatureStoreError(f"feature group {group!r}: partition_key column {column!r} is not in the batch "
                                    f"(its columns: {', '.join(table.column_names)})")
        kind = table.column(column).type
        if not (pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_integer(kind)
                or pa.types.is_date32(kind) or pa.types.is_boolean(kind)):
            raise FeatureStoreError(f"feature group {group!r}: partition_key column {column!r} is "
                                    f"{type_name(kind)}; partition by a string, integer, date or boolean column "
                                    "(e.g. the day of the event time)")


def conform(table: pa.Table, schema: pa.Schema | None, group: str) -> tuple[pa.Table, list[str]]:
    """The batch in the group's schema (`schema`, None before the first insert): columns in its order, a
    missing nullable column as nulls, a new column allowed (nullable; returned as added), a type that
    differs refused with the column and both types. Integer widths and float widths widen safely."""
    import pyarrow as pa

    if schema is None:
        return table, []
    columns, added = [], []
    for field in schema:
        if field.name not in table.column_names:
            columns.append(pa.nulls(table.num_rows, field.type))
            continue
        given = table.column(field.name)
        if given.type != field.type:
            if not _widens(given.type, field.type):
                sample = next((v for v in given.to_pylist() if v is not None), None)
                raise FeatureStoreError(f"feature group {group!r}: column {field.name!r} is {type_name(field.type)} "
                                        f"in the group but {type_name(given.type)} in this batch (e.g. {sample!r}); "
                                        "cast it, or create a new version of the group for the new type")
            given = given.cast(field.type)
        columns.append(given)
    fields = list(schema)
    for name in table.column_names:
        if name not in schema.names:
            added.append(name)
            columns.append(table.column(name))
            fields.append(pa.field(name, table.column(name).type, nullable=True))
    return pa.Table.from_arrays(columns, schema=pa.schema(fields)), added


def type_name(kind: object) -> str:
    """A type (Arrow's, or its name) as users know it: Arrow's string variants are all 'string'."""
    text = str(kind)
    return {"large_string": "string", "string_view": "string", "large_binary": "binary",
            "binary_view": "binary"}.get(text, text)


def _widens(given: pa.DataType, wanted: pa.DataType) -> bool:
    import pyarrow as pa

    if pa.types.is_null(given):
        return True
    if pa.types.is_integer(given) and (pa.types.is_integer(wanted) or pa.types.is_floating(wanted)):
        return not pa.types.is_integer(wanted) or wanted.bit_width >= given.bit_width
    if pa.types.is_floating(given) and pa.types.is_floating(wanted):
        return wanted.bit_width >= given.bit_width
    if (pa.types.is_string(given) or pa.types.is_large_string(given)) and (
            pa.types.is_string(wanted) or pa.types.is_large_string(wanted)):
        return True
    return pa.types.is_timestamp(given) and pa.types.is_timestamp(wanted)
