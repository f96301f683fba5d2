"""`prepare_images` and its Spark job: one pass, the paths dealt into partitions, the reports summed up."""

from __future__ import annotations

import json
import logging
import os
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from hopsml import config, layout
from hopsml.cluster import preflight
from hopsml.cluster.handle import SparkHandle
from hopsml.data import dataset as ds
from hopsml.data import shards as shard_io
from hopsml.data.images.listing import deal, scan_images
from hopsml.data.images.options import DEFAULT_GLOB, TARGET_SHARD_BYTES, ImageOptions, arrow_schema, label_of, unischema
from hopsml.data.images.transformer import Transformer
from hopsml.data.manifest import Manifest
from hopsml.data.sources import resolve_source
from hopsml.fs import Storage
from hopsml.progress import spark_progress
from hopsml.redact import redact_uri

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


log = logging.getLogger(__name__)


def _compute_slots(spark: SparkHandle) -> int:
    """Tasks that can decode at once: the cores of this machine in local mode (local[N] may
    promise more slots than cores, for barrier stages; more decoding tasks than cores only
    compete with each other and with the JVM), else Spark's default parallelism."""

    if spark.master.startswith("local"):
        return min(os.cpu_count() or 1, spark.default_parallelism)
    return spark.default_parallelism


def _task_count(workers: int, slots: int, total_bytes: int) -> int:
    """Tasks (and shards per split) of an image job: enough for the workers and the task slots, and a
    task per ``TARGET_SHARD_BYTES`` of input, in whole waves of the slots: 5 tasks on 2 slots ran a
    third wave on one core while the other idled (a fifth of an 8000-image job's time).

    >>> _task_count(1, 2, 5 * TARGET_SHARD_BYTES), _task_count(4, 2, 0), _task_count(3, 1, 0)
    (6, 4, 3)
    """
    count = max(workers, slots, -(-total_bytes // TARGET_SHARD_BYTES))
    return -(-count // max(slots, 1)) * max(slots, 1) if count > workers else count


def prepare_images(src: str, dataset: str, *, resize: tuple[int, int] | None = (200, 200),
                   crop: tuple[int, int] | None = None, shards: int | None = None,
                   glob: str = DEFAULT_GLOB, strict: bool = False, image_format: str = "png",
                   overwrite: bool = False, draft: bool = True, compression: str | None = None,
                   test_fraction: float = 0.2, seed: int = 0, max_file_mb: float = 256.0,
                   spark: SparkSession | None = None,
                   settings: config.Settings | None = None) -> ImageSummary:
    """Turn a folder tree of images (label = parent folder) into the dataset ``dataset``.

    Every image is resized to ``resize`` = (width, height) and then, only if ``crop`` is given,
    center-cropped to ``crop``; the summary says which was applied.

    Writes petastorm Parquet (image (H, W, 3) uint8, label, label_text, path), TFRecord shards of
    tf.train.Example with the usual image/* keys, labels.json, _rejected/ (path, reason),
    stats.json and stats.html, then _SUCCESS. Images go to the splits 'train' and 'test' by a
    hash of their path relative to ``src`` seeded by ``seed`` (about ``test_fraction`` of them
    in 'test'); ``test_fraction=0`` writes one split, 'all'. ``shards`` is the number of
    TFRecord shards and Parquet files per split (default: enough for the configured num_workers
    and the machine's cores). ``strict=True`` fails instead of committing when any file is rejected.
    A file is read only once its header shows an image and it is at most ``max_file_mb``; others
    are rejected unread ('not an image', 'too large').
    """
    from hopsml.cluster import session
    from hopsml.data import stats as stats_mod

    options = ImageOptions(resize=resize, crop=crop, image_format=image_format, glob=glob,
                           shards=shards, strict=strict, overwrite=overwrite, draft=draft,
                           compression=compression, test_fraction=test_fraction, seed=seed,
                           max_file_mb=max_file_mb)
    settings = settings or config.load()
    storage = Storage(settings.root)
    started, began = time.perf_counter(), time.monotonic()
    ds.check_writable(storage, settings.project, dataset, options.overwrite)  # before Spark starts
    src = resolve_source(src, settings)
    scanned = scan_images(src, options.glob)
    listed = time.perf_counter()
    listing = scanned.files
    if scanned.links:
        shown = ", ".join(path for path in scanned.links[:5]) + (" ..." if len(scanned.links) > 5 else "")
        log.warning("%d symbolic link(s) under %s not followed (each file is read once, by its own path, "
                    "and never from outside the folder): %s", len(scanned.links), redact_uri(src), shown)
    if not listing:
        skipped = "; ".join(f"{k}: {v}" for k, v in scanned.skipped.items())
        raise ds.DatasetError(f"no files matching {options.glob!r} under {redact_uri(src)!r}"
                              f"{f' (skipped {skipped})' if skipped else ''}; check the path "
                              "(a folder of label folders) and the glob")
    spark = spark or session.get_or_create(settings)
    session.check_session(settings, spark)  # also for a session passed in
    handle = SparkHandle.of(spark)
    labels = sorted({label_of(path) for path, _ in listing})
    total_bytes = sum(size for _, size in listing)
    count = options.shards or _task_count(settings.num_workers, _compute_slots(handle), total_bytes)
    count = max(1, min(count, len(listing)))

    with ds.staged(storage, settings.project, dataset, options.overwrite) as stage, \
            spark_progress(handle, f"prepare images '{dataset}'", since=began):
        transformer = Transformer(options, labels, storage, stage, count, src)
        chunks = deal([path for path, _ in listing], count)
        tasks_started = time.perf_counter()
        checks = preflight.Preflight(preflight.driver_stack(packages=("pillow",)) if settings.check_versions
                                     else None, {})
        try:
            reports = [json.loads(report)
                       for report in handle.run(preflight.guard(transformer, checks), chunks, count, indexed=True)]
        except Exception as exc:  # an executor with another stack is named; anything else goes on up
            preflight.explain_failure(handle, exc, checks, count)
            raise
        tasks_done = time.perf_counter()
        summary = _summarise(reports, dataset, count, options.splits)
        summary.uri = storage.uri(ds.DatasetDir.of(settings.project, dataset).path)
        summary.skipped = scanned.skipped
        summary.applied = options.applied
        rejected = [r for report in reports for r in report["rejected"]]
        if not summary.written:
            reasons = ", ".join(f"{reason}: {n}" for reason, n in sorted(summary.rejected_reasons.items()))
            shown = "; ".join(f"{r['path']}: {r['reason']}" for r in sorted(rejected, key=lambda r: r["path"])[:5])
            raise ds.RejectedInputError(
                f"all {summary.read} images under {redact_uri(src)!r} were rejected ({reasons}), so dataset "
                f"{dataset!r} was not written: {shown}{' ...' if len(rejected) > 5 else ''}. Check that "
                "the folder holds images Pillow can decode, and the resize/crop options")
        if options.strict and rejected:
            shown = "; ".join(f"{r['path']}: {r['reason']}" for r in rejected[:10])
            raise ds.RejectedInputError(
                f"{len(rejected)} of {summary.read} images were rejected and strict=True, so dataset "
                f"{dataset!r} was not written: {shown}{' ...' if len(rejected) > 10 else ''}. "
                "Fix or remove these files, or run without --strict to list them in _rejected")
        schema = unischema(options.shape)
        for split in options.splits:
            row_groups = {name: groups for report in reports
                          for name, groups in report["splits"].get(split, {}).get("row_groups", {}).items()}
            storage.makedirs(stage.parquet(split))
            shard_io.write_petastorm_metadata(storage, stage.parquet(split), arrow_schema(), schema,
                                              row_groups)
            if len(row_groups) < count:
                log.warning("split %r of dataset %r has %d Parquet files, fewer than the %d planned: "
                            "at most %d ranks can share it; give more images or a larger test_fraction",
                            split, dataset, len(row_groups), count, len(row_groups))
        shard_io.write_jsonl(storage, layout.join(stage.rejected, "part-00000.jsonl"),
                             sorted(rejected, key=lambda r: r["path"]))
        storage.write_json(stage.labels, {"labels": labels})
        per_split = {split: [r["splits"][split] for r in reports if split in r["splits"]]
                     for split in options.splits}
        image_stats = stats_mod.image_stats(per_split, labels, summary.rejected_reasons)
        storage.write_json(stage.stats_json, image_stats)
        storage.write_text(stage.stats_html, stats_mod.render_html(image_stats, title=dataset))
        summary.seconds = time.perf_counter() - started
        summary.phases = {"listing": listed - started, "tasks": tasks_done - tasks_started,
                          "slowest task": max(r["seconds"] for r in reports),
                          "task cpu": sum(r["cpu_seconds"] for r in reports),
                          "commit": summary.seconds - (tasks_done - started)}
        Manifest(
            kind="images", name=dataset, source=redact_uri(src), options={
                "resize": options.resize, "crop": options.crop, "image_format": options.image_format,
                "glob": options.glob, "draft": options.draft, "compression": options.compression,
                "test_fraction": options.test_fraction, "seed": options.seed},
            fields={"image": {"dtype": "uint8", "shape": list(options.shape), "encoding": "npy",
                              "tfrecord": "image/encoded"},
                    "label": {"dtype": "int32", "shape": [], "tfrecord": "image/class/label"},
                    "label_text": {"dtype": "str", "shape": [], "tfrecord": "image/class/text"},
                    "path": {"dtype": "str", "shape": [], "tfrecord": "image/filename"}},
            default_fields=["image", "label"],
            label_field="label", labels=labels,
            splits={split: {"rows": summary.splits[split], "parquet": f"{layout.DATASET_PARQUET}/{split}",
                            "tfrecord": f"{layout.DATASET_TFRECORD}/{split}", "shards": count}
                    for split in options.splits},
            counts={"read": summary.read, "written": summary.written, "rejected": summary.rejected,
                    "skipped": sum(summary.skipped.values())},
            rejected_reasons=summary.rejected_reasons,
            skipped_reasons=summary.skipped,
            seconds=round(summary.seconds, 3)).write(storage, stage.manifest)
    log.info("%s", summary)
    return summary


@dataclass
class ImageSummary(ds.DatasetSummary):
    """A :class:`DatasetSummary` that also says what was done to every image."""

    applied: str = ""
    phases: dict[str, float] = field(default_factory=dict)   # seconds: listing, tasks, commit

    def __str__(self) -> str:
        text = super().__str__()
        return f"{text}; images {self.applied}" if self.applied else text


def _summarise(reports: list[dict[str, Any]], name: str, count: int,
               splits: tuple[str, ...]) -> ImageSummary:
    read = sum(r["read"] for r in reports)
    written = sum(r["written"] for r in reports)
    reasons = Counter(item["reason"] for r in reports for item in r["rejected"])
    per_split = {split: sum(r["splits"][split]["written"] for r in reports if split in r["splits"])
                 for split in splits}
    summary = ImageSummary(name=name, kind="images", uri="", read=read, written=written,
                                rejected=sum(reasons.values()), splits=per_split, shards=count,
                                rejected_reasons=dict(reasons))
    if summary.read != summary.written + summary.rejected or sum(per_split.values()) != written:
        raise ds.DatasetError(f"counts do not add up (read {read}, written {written} = "
                              f"{per_split}, rejected {summary.rejected}); a task reported twice or "
                              "not at all: rerun the job")
    return summary
