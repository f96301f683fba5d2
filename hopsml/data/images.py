"""Images -> a dataset: a folder tree of JPEG/PNG files (label = parent folder) into petastorm
Parquet and TFRecord shards, with a label map, rejected files, and statistics.

One Spark pass does the work. Spark's ``binaryFile`` source reads the files (recursive, glob
filter) straight into partitions sized so that there are at least ``shards`` of them, without a
shuffle; a vectorised ``mapInPandas`` decodes each image once (JPEG draft mode: decoded straight
at a reduced scale), resizes and crops it, writes the partition's TFRecord shard and report as it
goes, and hands the pixels to Spark's Parquet writer inside petastorm's ``materialize_dataset``.
Everything lands in a hidden staging folder that is renamed into place at the end.
"""

from __future__ import annotations

import fnmatch
import logging
import posixpath
import re
import time
import warnings
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterator, Optional

import numpy as np

from hopsml import config
from hopsml.data import dataset as ds
from hopsml.data import imaging
from hopsml.data import shards as shard_io
from hopsml.data.codec import encode_cell
from hopsml.data.tfrecord import encode_example
from hopsml.errors import SettingsError
from hopsml.fs import Storage

if TYPE_CHECKING:
    import pandas as pd
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)

SPLIT = "all"
DEFAULT_GLOB = "*.{jpg,jpeg,png,JPG,JPEG,PNG}"
IMAGE_FORMATS = ("png", "jpeg")
_TARGET_SHARD_BYTES = 64 << 20   # input bytes per partition when nothing else asks for more
_ROWS_PER_ARROW_BATCH = 64       # images per batch between the JVM and Python: keeps both busy
_ROW_GROUP_MB = 16


@dataclass(frozen=True)
class ImageOptions:
    """How images are turned into a dataset; validates itself."""

    resize: Optional[tuple[int, int]] = (200, 200)
    crop: Optional[tuple[int, int]] = (180, 180)
    image_format: str = "png"
    glob: str = DEFAULT_GLOB
    shards: Optional[int] = None
    strict: bool = False
    overwrite: bool = False
    draft: bool = True
    compression: Optional[str] = None   # of the TFRecord shards: None or "gzip"

    def __post_init__(self) -> None:
        for name in ("resize", "crop"):
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, imaging._check_size(name, value))
        if self.resize is None and self.crop is None:
            raise SettingsError("give resize or crop (or both): every image in a dataset needs one "
                                "fixed size, so a batch reader can stack them")
        if self.resize and self.crop and (self.crop[0] > self.resize[0] or self.crop[1] > self.resize[1]):
            raise SettingsError(f"crop={self.crop} is larger than resize={self.resize}; "
                                "the crop must fit inside the resized image")
        if self.image_format not in IMAGE_FORMATS:
            raise SettingsError(f"image_format={self.image_format!r}: use 'png' (lossless) or 'jpeg'")
        if self.shards is not None and int(self.shards) < 1:
            raise SettingsError(f"shards={self.shards!r} must be at least 1")

    @property
    def size(self) -> tuple[int, int]:
        """(width, height) of every output image."""
        return self.crop or self.resize  # type: ignore[return-value]

    @property
    def shape(self) -> tuple[int, int, int]:
        width, height = self.size
        return (height, width, 3)


def unischema(shape: tuple[int, int, int]):
    """The petastorm schema of an image dataset: image (H, W, 3) uint8, label, label text, path."""
    from petastorm.codecs import NdarrayCodec, ScalarCodec
    from petastorm.unischema import Unischema, UnischemaField
    from pyspark.sql.types import IntegerType, StringType

    return Unischema("ImageSchema", [
        UnischemaField("image", np.uint8, tuple(shape), NdarrayCodec(), False),
        UnischemaField("label", np.int32, (), ScalarCodec(IntegerType()), False),
        UnischemaField("label_text", np.str_, (), ScalarCodec(StringType()), False),
        UnischemaField("path", np.str_, (), ScalarCodec(StringType()), False),
    ])


def label_of(path: str) -> str:
    """The label of an image: the name of the folder it is in."""
    return posixpath.basename(posixpath.dirname(path.rstrip("/")))


def source_uri(src: str) -> str:
    """A path or URI Spark reads: local paths become absolute."""
    if "://" in src or src.startswith("file:"):
        return src
    return posixpath.abspath(posixpath.expanduser(src))


@contextmanager
def _session_conf(spark: "SparkSession", values: dict[str, str]) -> Iterator[None]:
    """Set SQL settings for one job and put the previous values back afterwards."""
    old = {key: spark.conf.get(key, None) for key in values}
    for key, value in values.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key, value in old.items():
            if value is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, value)


class _Transformer:
    """The per-partition work of the Spark job; pickled to the executors (small and plain)."""

    def __init__(self, options: ImageOptions, labels: list[str], storage: Storage,
                 stage: ds.DatasetDir, shard_count: int) -> None:
        self.options = options
        self.index = {name: i for i, name in enumerate(labels)}
        self.storage = storage
        self.stage = stage
        self.shard_count = shard_count

    def __call__(self, batches: Iterator["pd.DataFrame"]) -> Iterator["pd.DataFrame"]:
        import pandas as pd

        opts = self.options
        part = shard_io.partition_id()
        encode = imaging.encode_png if opts.image_format == "png" else imaging.encode_jpeg
        height, width, channels = opts.shape
        fmt = opts.image_format.encode()
        report: dict[str, Any] = {"partition": part, "read": 0, "written": 0, "labels": Counter(),
                                  "rejected": [], "widths": [], "heights": [], "modes": Counter(),
                                  "formats": Counter()}
        with shard_io.shard_writer(self.storage, self.stage.tfrecord(SPLIT), part, self.shard_count,
                                 opts.compression) as writer:
            for frame in batches:
                paths = frame["path"].tolist()
                contents = frame["content"].tolist()
                report["read"] += len(paths)
                images, labels, texts, kept = [], [], [], []
                for path, data in zip(paths, contents):
                    try:
                        w, h, mode, kind = imaging.inspect(data)
                        pixels = imaging.transform(data, opts.resize, opts.crop, draft=opts.draft)
                    except imaging.ImageRejected as rejected:
                        report["rejected"].append({"path": path, "reason": rejected.reason,
                                                   "detail": rejected.detail})
                        continue
                    text = label_of(path)
                    label = self.index[text]
                    writer.write(encode_example({
                        "image/encoded": encode(pixels), "image/height": height,
                        "image/width": width, "image/channels": channels, "image/format": fmt,
                        "image/class/label": label, "image/class/text": text.encode(),
                        "image/filename": path.encode()}))
                    images.append(encode_cell(pixels))
                    labels.append(label)
                    texts.append(text)
                    kept.append(path)
                    report["widths"].append(w)
                    report["heights"].append(h)
                    report["modes"][mode] += 1
                    report["formats"][kind] += 1
                    report["labels"][text] += 1
                report["written"] += len(kept)
                yield pd.DataFrame({"image": images, "label": np.asarray(labels, dtype=np.int32),
                                    "label_text": texts, "path": kept})
        shard_io.write_report(self.storage, self.stage.parts, part, report)


def _plan_partitions(spark: "SparkSession", files: int, total_bytes: int, shards_wanted: int) -> dict[str, str]:
    """Settings that make Spark's file source cut about ``shards_wanted`` partitions, by bytes."""
    open_cost = max(1, total_bytes // max(files, 1))  # count a file as one average file of work
    per_partition = max(1, (total_bytes + files * open_cost) // shards_wanted)
    return {"spark.sql.files.maxPartitionBytes": str(per_partition),
            "spark.sql.files.openCostInBytes": str(open_cost),
            "spark.sql.files.minPartitionNum": str(shards_wanted),
            "spark.sql.execution.arrow.maxRecordsPerBatch": str(_ROWS_PER_ARROW_BATCH)}


def _expand_braces(pattern: str) -> list[str]:
    """Hadoop glob alternatives: 'a.{png,jpg}' -> ['a.png', 'a.jpg'] (nested braces too)."""
    match = re.search(r"\{([^{}]*)\}", pattern)
    if not match:
        return [pattern]
    head, tail = pattern[:match.start()], pattern[match.end():]
    return [out for alt in match.group(1).split(",") for out in _expand_braces(head + alt + tail)]


def list_images(src: str, glob: str = DEFAULT_GLOB) -> list[tuple[str, int]]:
    """(path, size) of the files under ``src`` that Spark's binaryFile source would read, plus the
    empty ones it skips, with paths spelled as Spark spells them (``file:/...`` for local files)."""
    import pyarrow.fs as pafs

    uri = source_uri(src)
    if "://" in uri:
        uri = uri.rstrip("/")
        filesystem, base = pafs.FileSystem.from_uri(uri)
        prefix = uri[:len(uri) - len(base)] if uri.endswith(base) else ""  # scheme://authority
    else:
        filesystem, base, prefix = pafs.LocalFileSystem(), uri, "file:"
    patterns = _expand_braces(glob)
    try:
        infos = filesystem.get_file_info(pafs.FileSelector(base, recursive=True))
    except (OSError, ValueError) as exc:
        raise ds.DatasetError(f"cannot list {src!r}: {exc}; give a folder of label folders") from exc
    out = []
    for info in infos:
        if info.type != pafs.FileType.File:
            continue
        parts = posixpath.relpath(info.path, base).split("/")
        if any(part.startswith((".", "_")) for part in parts):  # Spark skips hidden files too
            continue
        if any(fnmatch.fnmatchcase(parts[-1], pattern) for pattern in patterns):
            out.append((prefix + info.path, int(info.size or 0)))
    return sorted(out)


def _compute_slots(spark: "SparkSession") -> int:
    """Tasks that can decode at once: the cores of this machine in local mode (local[N] may
    promise more slots than cores, for barrier stages; more decoding tasks than cores only
    compete with each other and with the JVM), else Spark's default parallelism."""
    import os

    if spark.sparkContext.master.startswith("local"):
        return min(os.cpu_count() or 1, spark.sparkContext.defaultParallelism)
    return spark.sparkContext.defaultParallelism


def _read_files(spark: "SparkSession", src: str, glob: str) -> "DataFrame":
    return (spark.read.format("binaryFile").option("recursiveFileLookup", "true")
            .option("pathGlobFilter", glob).load(source_uri(src)))


def prepare_images(src: str, dataset: str, *, resize: Optional[tuple[int, int]] = (200, 200),
                   crop: Optional[tuple[int, int]] = (180, 180), shards: Optional[int] = None,
                   glob: str = DEFAULT_GLOB, strict: bool = False, image_format: str = "png",
                   overwrite: bool = False, draft: bool = True, compression: Optional[str] = None,
                   spark: "SparkSession | None" = None,
                   settings: config.Settings | None = None) -> ds.DatasetSummary:
    """Turn a folder tree of images (label = parent folder) into the dataset ``dataset``.

    Writes petastorm Parquet (image (H, W, 3) uint8, label, label_text, path), TFRecord shards of
    tf.train.Example with the usual image/* keys, labels.json, _rejected/ (path, reason),
    stats.json and stats.html, then _SUCCESS. ``shards`` is the least number of Parquet files and
    TFRecord shards (default: enough for the configured num_workers and the machine's cores).
    ``strict=True`` fails instead of committing when any file is rejected.
    """
    from petastorm.etl.dataset_metadata import materialize_dataset

    from hopsml import session
    from hopsml.data import stats as stats_mod

    options = ImageOptions(resize=resize, crop=crop, image_format=image_format, glob=glob,
                           shards=shards, strict=strict, overwrite=overwrite, draft=draft,
                           compression=compression)
    settings = settings or config.load()
    spark = spark or session.get_or_create(settings)
    storage = Storage(settings.root)
    started = time.perf_counter()

    listing = list_images(src, options.glob)
    if not listing:
        raise ds.DatasetError(f"no files matching {options.glob!r} under {src!r}; check the path "
                              "(a folder of label folders) and the glob")
    labels = sorted({label_of(path) for path, _ in listing})
    empty = [{"path": path, "reason": imaging.EMPTY_FILE, "detail": ""}
             for path, size in listing if size == 0]  # Spark's file source skips empty files
    files = len(listing) - len(empty)
    total_bytes = sum(size for _, size in listing)
    wanted = options.shards or max(settings.num_workers, _compute_slots(spark),
                                   -(-total_bytes // _TARGET_SHARD_BYTES))
    wanted = max(1, min(wanted, files))

    with ds.staged(storage, settings.project, dataset, options.overwrite) as stage, \
            _session_conf(spark, _plan_partitions(spark, files, total_bytes, wanted)):
        source = _read_files(spark, src, options.glob).select("path", "content")
        count = source.rdd.getNumPartitions()
        if count < wanted:  # Spark's packing cut fewer partitions than needed: spread by a shuffle
            source, count = source.repartition(wanted), wanted
        schema = unischema(options.shape)
        transformer = _Transformer(options, labels, storage, stage, count)
        out = source.mapInPandas(transformer, schema.as_spark_schema())
        url = ds.parquet_url(storage, stage.parquet(SPLIT))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)  # petastorm 0.13 uses pyarrow APIs deprecated in 5.0
            with materialize_dataset(spark, url, schema, _ROW_GROUP_MB):
                (out.write.mode("overwrite").option("parquet.enable.dictionary#image", "false")
                 .parquet(url))

        reports = shard_io.read_reports(storage, stage.parts)
        if empty:
            reports.append({"partition": -1, "read": len(empty), "written": 0, "labels": {},
                            "rejected": empty, "widths": [], "heights": [], "modes": {}, "formats": {}})
        summary = _summarise(reports, dataset, count)
        summary.uri = storage.uri(ds.DatasetDir.of(settings.project, dataset).path)
        rejected = [r for report in reports for r in report["rejected"]]
        if options.strict and rejected:
            shown = "; ".join(f"{r['path']}: {r['reason']}" for r in rejected[:10])
            raise ds.RejectedInputError(
                f"{len(rejected)} of {summary.read} images were rejected and strict=True, so dataset "
                f"{dataset!r} was not written: {shown}{' ...' if len(rejected) > 10 else ''}. "
                "Fix or remove these files, or run without --strict to list them in _rejected")
        shard_io.write_jsonl(storage, ds.layout.join(stage.rejected, "part-00000.jsonl"),
                           sorted(rejected, key=lambda r: r["path"]))
        storage.write_json(stage.labels, {"labels": labels})
        image_stats = stats_mod.image_stats(reports, labels)
        storage.write_json(stage.stats_json, image_stats)
        storage.write_text(stage.stats_html, stats_mod.render_html(image_stats, title=dataset))
        storage.delete(stage.parts)
        summary.seconds = time.perf_counter() - started
        storage.write_json(stage.manifest, {
            "format_version": ds.FORMAT_VERSION, "kind": "images", "name": dataset,
            "created": ds.now(), "source": src, "options": {
                "resize": options.resize, "crop": options.crop, "image_format": options.image_format,
                "glob": options.glob, "draft": options.draft, "compression": options.compression},
            "fields": {"image": {"dtype": "uint8", "shape": list(options.shape), "encoding": "npy",
                                 "tfrecord": "image/encoded"},
                       "label": {"dtype": "int32", "shape": [], "tfrecord": "image/class/label"},
                       "label_text": {"dtype": "str", "shape": [], "tfrecord": "image/class/text"},
                       "path": {"dtype": "str", "shape": [], "tfrecord": "image/filename"}},
            "default_fields": ["image", "label"],
            "label_field": "label", "labels": labels,
            "splits": {SPLIT: {"rows": summary.written, "parquet": f"{ds.PARQUET}/{SPLIT}",
                               "tfrecord": f"{ds.TFRECORD}/{SPLIT}", "shards": count}},
            "counts": {"read": summary.read, "written": summary.written, "rejected": summary.rejected},
            "rejected_reasons": summary.rejected_reasons,
            "seconds": round(summary.seconds, 3)})
    log.info("%s", summary)
    return summary


def _summarise(reports: list[dict[str, Any]], name: str, count: int) -> ds.DatasetSummary:
    read = sum(r["read"] for r in reports)
    written = sum(r["written"] for r in reports)
    reasons = Counter(item["reason"] for r in reports for item in r["rejected"])
    summary = ds.DatasetSummary(name=name, kind="images", uri="", read=read, written=written,
                                rejected=sum(reasons.values()), splits={SPLIT: written}, shards=count,
                                rejected_reasons=dict(reasons))
    if summary.read != summary.written + summary.rejected:
        raise ds.DatasetError(f"counts do not add up (read {read}, written {written}, rejected "
                              f"{summary.rejected}); a task reported twice or not at all: rerun the job")
    return summary
