"""Reading CSV text with Spark: every field as text, the header's names, preamble lines skipped, a missing
source named early."""

from __future__ import annotations

from typing import TYPE_CHECKING, Union

from hopsml.cluster.handle import is_connect
from hopsml.data import dataset as ds
from hopsml.data.tables.options import CORRUPT, TableOptions
from hopsml.redact import redact_uri

if TYPE_CHECKING:
    from pyspark import RDD
    from pyspark.sql import DataFrame, SparkSession

# What the CSV reader reads (csv_source): the path, or the lines after a preamble, as a DataFrame of lines (Spark 4,
# Spark Connect) or an RDD of them (Spark 3.5).
CsvSource = Union[str, "DataFrame", "RDD[str]"]


def csv_source(spark: SparkSession, src: str, options: TableOptions) -> CsvSource:
    """What the CSV reader reads: the path, or with ``skip_rows`` the lines of every file after its
    first ``skip_rows`` (preamble lines before the header, as in scikit-learn's CSV files)."""
    if not options.skip_rows:
        return src
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    lines = spark.read.text(src).select(F.input_file_name().alias("file"),
                                        F.monotonically_increasing_id().alias("at"), "value")
    number = F.row_number().over(Window.partitionBy("file").orderBy("at"))
    kept = lines.withColumn("line", number).where(F.col("line") > F.lit(options.skip_rows))
    lines_after = kept.sortWithinPartitions("file", "at").select("value")
    # Spark 4 and Spark Connect read CSV from a DataFrame of lines; Spark 3.5 only from an RDD of them
    return lines_after if is_connect(spark) else lines_after.rdd.map(lambda row: row[0])


def column_names(spark: SparkSession, src: CsvSource, options: TableOptions, multiline: bool = False,
                  escape: str = '"') -> list[str]:
    if options.columns:
        return list(options.columns)
    local = _local_file(src)
    if local is not None and options.header:
        return _header_of(local, options.delimiter, escape)
    probe = spark.read.csv(src, header=options.header, sep=options.delimiter, quote='"', escape=escape,
                           multiLine=multiline)
    return [name.strip().lstrip("\ufeff").strip() for name in probe.columns]


def _local_file(src: object) -> str | None:
    """The path of ``src`` when it is one plain local file (not a folder, glob or URI), else None."""
    import os
    from urllib.parse import urlparse

    if not isinstance(src, str) or any(ch in src for ch in "*?[{"):
        return None
    scheme = urlparse(src).scheme
    path = urlparse(src).path if scheme == "file" else src if scheme == "" or len(scheme) == 1 else None
    return path if path is not None and os.path.isfile(os.path.expanduser(path)) else None


def _header_of(path: str, delimiter: str, escape: str) -> list[str]:
    """The column names of a local CSV file's header line, named as Spark's CSV reader names them (an empty
    name is ``_c<i>``, names that repeat, ignoring case, get their position appended), without a Spark job:
    at 500 rows that job was a tenth of the prepare.

    >>> import tempfile, os
    >>> path = os.path.join(tempfile.mkdtemp(), "t.csv")
    >>> _ = open(path, "w", encoding="utf-8-sig").write('"",a,"b, c",A\\n1,2,3,4\\n')
    >>> _header_of(path, ",", '"')
    ['_c0', 'a1', 'b, c', 'A3']
    """
    import csv
    import os

    with open(os.path.expanduser(path), encoding="utf-8-sig", newline="") as lines:
        if escape == '"':
            reader = csv.reader(lines, delimiter=delimiter, quotechar='"', doublequote=True)
        else:
            reader = csv.reader(lines, delimiter=delimiter, quotechar='"', doublequote=False, escapechar=escape)
        header = next(reader, [])
    return header_names(header)


def header_names(header: list[str]) -> list[str]:
    """The column names of a header's fields, as Spark's CSV reader names them: an empty name is ``_c<i>``,
    names that repeat (ignoring case) get their position appended.

    >>> header_names(["", "a", "b", "B"])
    ['_c0', 'a', 'b2', 'B3']
    """
    names = [field.strip() or f"_c{i}" for i, field in enumerate(header)]
    seen: dict[str, int] = {}
    for name in names:
        seen[name.lower()] = seen.get(name.lower(), 0) + 1
    return [f"{name}{i}" if seen[name.lower()] > 1 and not name.startswith("_c") else name
            for i, name in enumerate(names)]


def read_text(spark: SparkSession, src: CsvSource, names: list[str], options: TableOptions,
               multiline: bool = False, escape: str = '"') -> DataFrame:
    """Every field as text. Quotes are doubled inside quoted fields (RFC 4180: pandas, Excel, R), or
    with ``escape='\\'`` escaped by a backslash (Spark's own CSV writer); ``multiline`` reads quoted
    fields that hold line breaks (each file then in one task)."""
    from pyspark.sql.types import StringType, StructField, StructType

    schema = StructType([StructField(n, StringType()) for n in names] + [StructField(CORRUPT, StringType())])
    return spark.read.csv(src, schema=schema, header=options.header, sep=options.delimiter, quote='"',
                          escape=escape, multiLine=multiline, mode="PERMISSIVE", columnNameOfCorruptRecord=CORRUPT,
                          ignoreLeadingWhiteSpace=True, ignoreTrailingWhiteSpace=True, nullValue=None,
                          enforceSchema=True)


def is_number(text: str) -> bool:
    """Whether a header name is a number (a preamble line's count, not a column's name).

    >>> is_number("150"), is_number("4.0"), is_number("Weight"), is_number("")
    (True, True, False, False)
    """
    try:
        float(text)
    except ValueError:
        return False
    return True


def check_source(src: str) -> None:
    """A local path that does not exist fails here, before Spark starts (a URI is left to Spark)."""
    import os
    from urllib.parse import urlparse

    scheme = urlparse(src).scheme
    if scheme in ("", "file") and len(scheme) != 1:  # not a Windows drive letter
        path = urlparse(src).path if scheme == "file" else src
        if not any(ch in path for ch in "*?[{") and not os.path.exists(os.path.expanduser(path)):
            raise ds.DatasetError(f"{redact_uri(src)!r} does not exist; give a CSV file or a folder of CSV files")


HINT = ("if the file has no header line, pass --no-header --columns name1,name2,... (header=False, "
         "columns=[...]); if lines come before the header (scikit-learn's CSV files start with one), pass "
         "--skip-rows N (skip_rows=N); check --delimiter (delimiter=) too")
