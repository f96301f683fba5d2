"""`prepare_table`: a CSV table into a dataset, by the Spark job, or in this process for a small table."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING

from hopsml import config
from hopsml.data import dataset as ds
from hopsml.data.manifest import Manifest
from hopsml.data.sources import resolve_source
from hopsml.data.tables.csv import check_source
from hopsml.data.tables.job import _TableJob
from hopsml.data.tables.local import LocalTableJob
from hopsml.data.tables.options import DEFAULT_NA_VALUES, TableOptions
from hopsml.fs import Storage
from hopsml.progress import spark_progress

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)


def prepare_table(src: str, dataset: str, *, label: str, header: bool = True,
                  columns: Sequence[str] | None = None, schema: Mapping[str, str] | None = None,
                  na_values: Sequence[str] = DEFAULT_NA_VALUES, missing: str = "drop",
                  categorical: Sequence[str] | None = None, exclude: Sequence[str] | None = None,
                  one_hot: bool = False, standardize: bool = False, test_fraction: float = 0.2, seed: int = 0,
                  shards: int | None = None, delimiter: str = ",", skip_rows: int = 0,
                  strict: bool = False, overwrite: bool = False,
                  compression: str | None = None, spark: SparkSession | None = None,
                  settings: config.Settings | None = None) -> ds.DatasetSummary:
    """Turn the CSV file(s) ``src`` into the dataset ``dataset`` with train and test splits.

    Writes parquet/<split>/ (plain Parquet: one column per feature, a ``features`` float32 vector
    and ``label``), tfrecord/<split>/part-*.tfrecord (tf.train.Example with the same names),
    transform.json (the fitted transform, for serving), labels.json (a categorical label's
    classes), _rejected/ (malformed rows with their reason), stats.json and stats.html (of the
    rows as written, before the transform). ``skip_rows`` drops lines before the header of each
    file; ``strict`` fails instead of rejecting rows. A table whose every row is rejected fails.
    ``exclude`` names columns that are not features (ids, free text); a column without a name in the
    header (R's row names, a pandas index written with the frame) is left out too, unless it is the label.

    A table of at most ``small_table_rows`` rows (a setting) in one plain local file is prepared in this
    process without Spark (:mod:`hopsml.data.tables.local`), into the same files; the summary's ``engine``
    says which ran.
    """
    from hopsml.cluster import session

    options = TableOptions(label=label, header=header, columns=tuple(columns) if columns else None,
                           schema=dict(schema) if schema else None, na_values=tuple(na_values),
                           missing=missing, categorical=tuple(categorical) if categorical else None,
                           exclude=tuple(exclude) if exclude else None, one_hot=one_hot, standardize=standardize,
                           test_fraction=float(test_fraction),
                           seed=int(seed), shards=shards, delimiter=delimiter, skip_rows=skip_rows,
                           strict=strict, overwrite=overwrite, compression=compression)
    settings = settings or config.load()
    storage = Storage(settings.root)
    ds.check_writable(storage, settings.project, dataset, options.overwrite)  # before Spark starts
    src = resolve_source(src, settings)
    check_source(src)
    started = time.perf_counter()
    small = LocalTableJob.of(src, storage, settings, dataset, options, spark)
    if small is not None:   # no Spark job (and no Spark start): the same files, statistics and fingerprints
        with ds.staged(storage, settings.project, dataset, options.overwrite) as stage:
            summary = small.run(stage)
            _finish(storage, stage, summary, settings.project, dataset, started)
        log.info("%s", summary)
        return summary
    spark = spark or session.get_or_create(settings)
    session.check_session(settings, spark)  # also for a session passed in
    job = _TableJob(spark, storage, settings, src, dataset, options)
    with _collected(), ds.staged(storage, settings.project, dataset, options.overwrite) as stage, \
            spark_progress(job.handle, f"prepare table '{dataset}'", steps=_TableJob.STEPS) as progress:
        job.progress = progress
        with _prepare_conf(spark):
            summary = job.run(stage)
        del job   # its DataFrames go before the collection
        _finish(storage, stage, summary, settings.project, dataset, started)
    log.info("%s", summary)
    return summary


def _finish(storage: Storage, stage: ds.DatasetDir, summary: ds.DatasetSummary, project: str, dataset: str,
            started: float) -> None:
    """The summary's time and place, and the time in the manifest, before the stage is committed."""
    summary.seconds = time.perf_counter() - started
    summary.uri = storage.uri(ds.DatasetDir.of(project, dataset).path)
    manifest = Manifest.read(storage, stage.manifest)
    manifest.seconds = round(summary.seconds, 3)
    manifest.write(storage, stage.manifest)


# Session settings for the duration of a prepare, restored after it: Spark's cache of the typed rows
# without its compression, which made filling it take half again as long (the numbers of a table hardly
# compress); Arrow batches of 100,000 rows to the shard writers, not 10,000 (a batch's fixed costs in the
# writer, and one Parquet row group per batch)
_PREPARE_CONF = {"spark.sql.inMemoryColumnarStorage.compressed": "false",
                 "spark.sql.execution.arrow.maxRecordsPerBatch": "100000",
                 # whole-stage code of a method over HotSpot's 8000 bytes is never JIT-compiled, and the check
                 # pass of a few dozen columns made one that Janino compiled into a class the JVM refused
                 # (VerifyError, 34 float and 2 whole-number columns): such plans run as separate operators
                 "spark.sql.codegen.hugeMethodLimit": "8000"}


@contextmanager
def _collected() -> Iterator[None]:
    """A full garbage collection of Python's objects after the prepare: py4j's handles of the JVM's
    DataFrames sit in reference cycles, which only the cyclic collector frees, and until it does the JVM
    keeps each DataFrame's plans (a 31-column prepare's were 20 MiB). A driver that prepared tables in a
    row held them for a dozen prepares, until Python happened to collect."""
    import gc

    try:
        yield
    finally:
        gc.collect()


@contextmanager
def _prepare_conf(spark: SparkSession) -> Iterator[None]:
    before = {key: spark.conf.get(key, None) for key in _PREPARE_CONF}
    for key, value in _PREPARE_CONF.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key, old in before.items():
            if old is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, old)
