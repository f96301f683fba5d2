"""Batch inference on Spark: a user's predict function mapped over a prepared dataset's shards.

Each Spark task downloads the model version once, reads its share of a split's Parquet row groups
with the rank reader (``rank=task, world_size=tasks``: disjoint shares, every row once, in file
order), calls ``fn(model_path, batch)`` on Arrow-sized batches of numpy columns and writes the
predictions, with the columns kept from the input (label, path), as one Parquet file. The result
is a dataset like the data jobs write: staged, a manifest, ``_SUCCESS`` last, readable with
``hopsml.data.reader(output)`` and listed by ``hopsml datasets list``.
"""

from __future__ import annotations

import functools
import logging
import math
import posixpath
import shutil
import tempfile
import time
import traceback
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from hopsml import config, layout
from hopsml.cluster.handle import SparkHandle
from hopsml.data import dataset as ds
from hopsml.data import shards as shard_io
from hopsml.data.manifest import PREDICTIONS, Manifest, open_manifest
from hopsml.fs import Storage
from hopsml.model.registry import ModelVersion, download_model, resolve

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

PREDICTION = "prediction"
PredictFn = Callable[[str, dict[str, np.ndarray]], Any]


class PredictionError(ds.DatasetError):
    """The predict function failed or returned something that is not one prediction per row."""


@dataclass
class PredictionSummary:
    """What a prediction job wrote: rows per split, where, with which model."""

    name: str
    uri: str
    model: str
    source: str
    splits: dict[str, int] = field(default_factory=dict)
    shards: dict[str, int] = field(default_factory=dict)
    columns: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        """The summary as a plain dict, for a record or JSON."""
        return asdict(self)

    def __str__(self) -> str:
        splits = ", ".join(f"{k} {v}" for k, v in self.splits.items())
        return (f"predictions {self.name!r} of model {self.model} on dataset {self.source!r} at {self.uri}: "
                f"{splits} rows, columns {', '.join(self.columns)}, {self.seconds:.1f}s")


@dataclass(frozen=True)
class _Job:
    """Everything a task needs; pickled into the Spark closure."""

    settings: config.Settings
    model: ModelVersion
    dataset: str
    fn: PredictFn
    fields: tuple[str, ...]
    keep: tuple[str, ...]
    batch_size: int
    stage: str


def _as_numpy(value: object) -> np.ndarray:
    if hasattr(value, "get") and type(value).__module__.startswith("cupy"):
        value = value.get()
    return np.asarray(value)


def prediction_columns(output: object, rows: int, where: str) -> dict[str, np.ndarray]:
    """The predict function's output for a batch of `rows` rows as named columns, one value per row.

    >>> sorted(prediction_columns({"label": [1, 2], "score": [[.1, .9], [.8, .2]]}, 2, "shard 0"))
    ['label', 'score']
    >>> prediction_columns([1, 2, 3], 2, "shard part-00001.parquet")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    hopsml.model.inference.PredictionError: the predict function returned 3 values for 'prediction' for a batch ...
    """
    items = output.items() if isinstance(output, Mapping) else [(PREDICTION, output)]
    columns = {}
    for name, value in items:
        array = _as_numpy(value)
        count = len(array) if array.ndim else None
        if count != rows:
            got = "a scalar" if count is None else f"{count} values"
            raise PredictionError(f"the predict function returned {got} for {str(name)!r} for a batch of {rows} "
                                  f"rows in {where}; return one prediction per row (an array of length {rows}, "
                                  "or a dict of such arrays)")
        if array.dtype == object and not all(isinstance(v, str) for v in array.ravel()):
            raise PredictionError(f"the predict function returned {str(name)!r} with Python objects in {where}; "
                                  "return numbers, booleans or strings")
        columns[str(name)] = array
    if not columns:
        raise PredictionError(f"the predict function returned an empty dict in {where}; return predictions")
    return columns


def _arrow(array: np.ndarray) -> pa.Array:
    """A numpy column as Arrow: scalars as they are, per-row arrays as fixed-size lists (flattened)."""
    import pyarrow as pa

    if array.dtype.kind in "USO":
        return pa.array([str(v) for v in array.tolist()], type=pa.string())
    if array.ndim == 1:
        return pa.array(array)
    width = int(math.prod(array.shape[1:]))
    return pa.FixedSizeListArray.from_arrays(pa.array(np.ascontiguousarray(array).reshape(-1)), width)


def _spec(array: np.ndarray) -> dict[str, Any]:
    dtype = "str" if array.dtype.kind in "USO" else array.dtype.name
    return {"dtype": dtype, "shape": [int(d) for d in array.shape[1:]]}


def _predict_shard(job: _Job, model_path: str, split: str, index: int, count: int) -> dict[str, Any]:
    """Predict one task's share of a split and write it as `parquet/<split>/part-<index>.parquet`."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from hopsml.data.readers import reader

    storage = Storage(job.settings.root)
    columns = list(dict.fromkeys(job.fields + job.keep))
    source = reader(job.dataset, rank=index, world_size=count, split=split, shuffle=False, epochs=1,
                    batch_size=job.batch_size, fields=columns, settings=job.settings)
    where = (f"shard {', '.join(f'{posixpath.basename(p.path)} (row group {p.row_group})' for p in source.pieces)}"
             f" of split {split!r}")
    rel = layout.join(ds.DatasetDir(job.stage).parquet(split), shard_io.part_name(index))
    rows, specs, writer = 0, {}, None
    with shard_io.atomic_output(storage, rel) as target:
        try:
            for batch in source:
                size = len(batch[columns[0]])
                predicted = prediction_columns(job.fn(model_path, {k: batch[k] for k in job.fields}), size, where)
                clash = sorted(set(predicted) & set(job.keep))
                if clash:
                    raise PredictionError(f"the predict function returned column(s) {', '.join(clash)}, which are "
                                          f"also kept from the input; rename them or pass keep=[...] without them")
                out = {**{k: np.asarray(batch[k]) for k in job.keep}, **predicted}
                table = pa.table({k: _arrow(v) for k, v in out.items()})
                if writer is None:
                    specs = {k: _spec(v) for k, v in out.items()}
                    writer = pq.ParquetWriter(target, table.schema, compression="snappy")
                elif table.schema != writer.schema:
                    raise PredictionError(f"the predict function returned {table.schema} in {where}, but "
                                          f"{writer.schema} for an earlier batch; return the same types every time")
                writer.write_table(table)
                rows += size
        finally:
            if writer is not None:
                writer.close()
    return {"ok": True, "split": split, "index": index, "rows": rows, "specs": specs, "where": where}


def _run_tasks(job: _Job, partition: Iterable[tuple[str, int, int]]) -> Iterator[dict[str, Any]]:
    """A Spark partition: download the model once, then predict each (split, index, count) it holds.
    Failures are reported, not raised, so that Spark does not run the predictions again."""
    items = list(partition)
    local = tempfile.mkdtemp(prefix="hopsml-predict-")
    try:
        started = time.perf_counter()
        try:
            model_path = download_model(job.model.name, job.model.version, local_dir=local, settings=job.settings)
        except Exception as exc:  # noqa: BLE001 - reported to the driver, raised there
            error = {"ok": False, "error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()}
            yield from ({**error, "split": split, "index": index} for split, index, _ in items)
            return
        download_s = round(time.perf_counter() - started, 3)
        for split, index, count in items:
            try:
                report = _predict_shard(job, model_path, split, index, count)
            except Exception as exc:  # noqa: BLE001 - reported to the driver, raised there
                report = {"ok": False, "split": split, "index": index, "error": f"{type(exc).__name__}: {exc}",
                          "traceback": traceback.format_exc()}
            yield {**report, "download_s": download_s}
    finally:
        shutil.rmtree(local, ignore_errors=True)


def _plan(storage: Storage, settings: config.Settings, dataset: str, splits: Sequence[str],
          num_tasks: int) -> list[tuple[str, int, int]]:
    """(split, task index, tasks of that split): as many tasks as row groups, at most `num_tasks`."""
    from hopsml.data.readers import reader

    plan = []
    for split in splits:
        pieces = len(reader(dataset, rank=0, world_size=1, split=split, shuffle=False,
                            settings=settings).pieces)
        count = max(1, min(pieces, num_tasks))
        plan += [(split, index, count) for index in range(count)]
    return plan


def _choose(manifest: Manifest, dataset: str, what: str, names: Sequence[str] | None,
            default: Sequence[str]) -> tuple[str, ...]:
    chosen = tuple(default if names is None else ([names] if isinstance(names, str) else names))
    unknown = [n for n in chosen if n not in manifest.fields]
    if unknown:
        raise ds.DatasetError(f"dataset {dataset!r} has no field(s) {', '.join(unknown)} for {what}; "
                              f"it has {', '.join(manifest.fields)}")
    return chosen


def predict(model_ref: ModelVersion | str | tuple[str, int], dataset: str, fn: PredictFn,
            output: str | None = None, *, split: str | Sequence[str] | None = None, batch_size: int = 1024,
            fields: Sequence[str] | None = None, keep: Sequence[str] | None = None,
            num_tasks: int | None = None, overwrite: bool = False, settings: config.Settings | None = None,
            spark: SparkSession | None = None) -> PredictionSummary:
    """Run `fn(model_path, batch)` over `dataset` in Spark tasks and write the predictions dataset `output`.

    `model_ref` is a ModelVersion (e.g. from get_best_model), 'name' (latest), 'name:version' or
    ('name', version). `batch` is a dict of numpy arrays of `fields` (default: the dataset's default
    fields), up to `batch_size` rows; `fn` returns an array with one prediction per row (the column
    'prediction') or a dict of such arrays. Columns in `keep` (default: the label and 'path', when
    the dataset has them) are copied beside the predictions. `split`: one split, a list, or all (None).
    """
    from hopsml.cluster import session
    from hopsml.launcher.driver import check_shippable, ship_by_value
    from hopsml.progress import spark_progress

    if not callable(fn):
        raise PredictionError(f"fn must be a function fn(model_path, batch), got {type(fn).__name__}")
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise PredictionError(f"batch_size must be a positive integer, got {batch_size!r}")
    settings = settings or config.load()
    storage = Storage(settings.root)
    started = time.perf_counter()
    mv = resolve(model_ref, settings)
    ddir, manifest = open_manifest(storage, settings.project, dataset)
    all_splits = list(manifest.splits)
    splits = all_splits if split is None else ([split] if isinstance(split, str) else list(split))
    missing = [s for s in splits if s not in all_splits]
    if missing:
        raise ds.DatasetError(f"dataset {dataset!r} has no split(s) {', '.join(missing)}; it has "
                              f"{', '.join(all_splits)}")
    fields_ = _choose(manifest, dataset, "the predict function", fields, manifest.default_field_names())
    label = manifest.label_field
    default_keep = [n for n in (label, "path") if n and n in manifest.fields
                    and not manifest.fields[n].get("shape")]
    keep_ = _choose(manifest, dataset, "keep", keep, default_keep)
    output = layout.validate_name(output or f"{dataset}-{mv.name}-{mv.version}-predictions", "dataset name")
    if output == dataset:
        raise ds.DatasetError(f"output {output!r} would replace the input dataset; choose another name")
    ds.check_writable(storage, settings.project, output, overwrite)  # before Spark starts for nothing
    ship_by_value(fn)
    check_shippable(fn)
    spark = spark or session.get_or_create(settings)
    session.check_session(settings, spark)  # also for a session passed in
    handle = SparkHandle.of(spark)
    plan = _plan(storage, settings, dataset, splits, int(num_tasks or max(1, handle.default_parallelism)))

    with ds.staged(storage, settings.project, output, overwrite) as stage, \
            spark_progress(handle, f"predict '{dataset}' with model {mv.ref}"):
        job = _Job(settings, mv, dataset, fn, fields_, keep_, batch_size, stage.path)
        reports = handle.run(functools.partial(_run_tasks, job), plan)
        failed = sorted((r for r in reports if not r["ok"]), key=lambda r: (r["split"], r["index"]))
        if failed:
            first = failed[0]
            raise PredictionError(f"predicting dataset {dataset!r} with model {mv.ref} failed in {len(failed)} "
                                  f"of {len(plan)} tasks; task {first['index']} of split {first['split']!r}: "
                                  f"{first['error']}\n\n{first['traceback'].rstrip()}")
        specs = reports[0]["specs"]
        for report in reports[1:]:
            if report["specs"] != specs:
                raise PredictionError(f"the predict function returned {report['specs']} in {report['where']} but "
                                      f"{specs} in {reports[0]['where']}; return the same columns, types and "
                                      "shapes for every batch")
        rows = {s: sum(r["rows"] for r in reports if r["split"] == s) for s in splits}
        for s in splits:
            expected = manifest.rows(s)
            if expected is not None and rows[s] != expected:
                raise PredictionError(f"split {s!r} has {expected} rows but {rows[s]} were predicted; a task "
                                      "ran twice or not at all: run the prediction again")
        summary = PredictionSummary(name=output, uri=storage.uri(ds.DatasetDir.of(settings.project, output).path),
                                    model=mv.ref, source=dataset, splits=rows,
                                    shards={s: sum(1 for p in plan if p[0] == s) for s in splits},
                                    columns=list(specs), seconds=0.0)
        summary.seconds = round(time.perf_counter() - started, 3)
        total = sum(rows.values())
        Manifest(
            kind=PREDICTIONS, name=output, source=dataset, source_uri=storage.uri(ddir.path),
            model={"name": mv.name, "version": mv.version, "path": mv.path},
            fields=specs, default_fields=list(specs), label_field=label if label in keep_ else None,
            splits={s: {"rows": rows[s], "parquet": f"{layout.DATASET_PARQUET}/{s}", "shards": summary.shards[s]}
                    for s in splits},
            counts={"read": total, "written": total, "rejected": 0},
            options={"fields": list(fields_), "keep": list(keep_), "batch_size": batch_size},
            seconds=summary.seconds).write(storage, stage.manifest)
    log.info("%s", summary)
    return summary
