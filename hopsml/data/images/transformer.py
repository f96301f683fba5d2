"""The task of the image job: read each of its files once, decode, resize and crop, and write its shards."""

from __future__ import annotations

import json
import os
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from contextlib import ExitStack
from typing import TYPE_CHECKING, Any, BinaryIO

from hopsml import layout
from hopsml.data import dataset as ds
from hopsml.data import pixels
from hopsml.data import shards as shard_io
from hopsml.data.codec import npy_header
from hopsml.data.images.listing import source_base, source_filesystem
from hopsml.data.images.options import (
    PARQUET_CODECS,
    ROW_GROUP_BYTES,
    UNREADABLE_FILE,
    ImageOptions,
    arrow_schema,
    label_of,
    relative_key,
    split_of,
)
from hopsml.data.images.records import ExampleTemplate
from hopsml.fs import Storage

if TYPE_CHECKING:
    from PIL import Image


class _SourceFiles:
    """Reads the listed source files: local files directly, others through the source's pyarrow
    filesystem (made once per task from the source URI, options such as an S3 endpoint included)."""

    def __init__(self, src: str) -> None:
        self.src = src
        self._remote: tuple[Any, str, str] | None = None

    def open(self, path: str) -> BinaryIO:
        """The listed file, open for random access reads."""
        if path.startswith("file:"):
            local = path[len("file:"):]
            if local.startswith("//"):   # file:///x -> /x
                local = "/" + local.lstrip("/")
            return open(local, "rb")
        if self._remote is None:
            self._remote = source_filesystem(self.src)
        filesystem, _, prefix = self._remote
        return filesystem.open_input_file(path[len(prefix):])

    def load(self, path: str, max_bytes: int) -> tuple[Image.Image, tuple[int, int, str, str]]:
        """An image file, opened (not decoded), and its header (width, height, mode, format).

        The header is checked before the file is read whole, and then its size: a file that
        is not an image or is over ``max_bytes`` is rejected after a bounded read. A file of up
        to 16 MiB (:data:`~hopsml.data.pixels.HEADER_BYTES`, nearly every photo) is that bounded
        read itself, read once and opened once; a larger one has its header read first."""
        try:
            handle = self.open(path)
        except OSError as error:
            raise pixels.ImageRejected(UNREADABLE_FILE, f"{type(error).__name__}: {error}") from None
        with handle:
            try:
                size = handle.size() if hasattr(handle, "size") else os.fstat(handle.fileno()).st_size
                if size == 0:
                    raise pixels.ImageRejected(pixels.EMPTY_FILE)
                if size > min(pixels.HEADER_BYTES, max_bytes):
                    pixels.inspect_file(handle)   # the header, from at most HEADER_BYTES
                    if size > max_bytes:
                        raise pixels.ImageRejected(pixels.TOO_LARGE, f"a file of {size} bytes, over the "
                                                   f"limit of {max_bytes} (max_file_mb)")
                    handle.seek(0)
                data = handle.read(size)
            except OSError as error:
                raise pixels.ImageRejected(UNREADABLE_FILE, f"{type(error).__name__}: {error}") from None
        return pixels.open_image(data)


def _split_report() -> dict[str, Any]:
    return {"written": 0, "labels": Counter(), "widths": [], "heights": [], "modes": Counter(),
            "formats": Counter(), "row_groups": {}}


class Transformer:
    """The per-partition work of the Spark job; pickled to the executors (small and plain)."""

    def __init__(self, options: ImageOptions, labels: list[str], storage: Storage,
                 stage: ds.DatasetDir, shard_count: int, src: str) -> None:
        self.options = options
        self.index = {name: i for i, name in enumerate(labels)}
        self.storage = storage
        self.stage = stage
        self.shard_count = shard_count
        self.src = src
        self.source_base = source_base(src)

    def __call__(self, part: int, chunks: Iterable[list[str]]) -> Iterator[str]:
        started, cpu = time.perf_counter(), time.process_time()
        report: dict[str, Any] = {"partition": part, "read": 0, "written": 0, "rejected": [],
                                  "splits": {split: _split_report() for split in self.options.splits}}
        with ExitStack() as stack:
            self._run(part, (path for chunk in chunks for path in chunk), report, stack)
        report["seconds"] = time.perf_counter() - started
        report["cpu_seconds"] = time.process_time() - cpu
        yield json.dumps(report, separators=(",", ":"))

    def _run(self, part: int, paths: Iterator[str], report: dict[str, Any], stack: ExitStack) -> None:
        opts = self.options
        encode = pixels.encode_png_fast if opts.image_format == "png" else pixels.encode_jpeg
        height, width, channels = opts.shape
        fmt = opts.image_format.encode()
        rows_per_group = ROW_GROUP_BYTES // (len(npy_header(opts.shape)) + height * width * channels)
        tfrecords, parquets = {}, {}
        for split in opts.splits:
            tfrecords[split] = stack.enter_context(shard_io.shard_writer(
                self.storage, self.stage.tfrecord(split), part, self.shard_count, opts.compression, uncached=True))
            parquets[split] = shard_io.ParquetShard(
                self._opener(stack, split, part), arrow_schema(), rows_per_group,
                dictionary=("label", "label_text"), cells={"image": opts.shape}, compression=PARQUET_CODECS)
        example = ExampleTemplate(height, width, channels, fmt, self.index)
        files = _SourceFiles(self.src)
        max_bytes = int(opts.max_file_mb * (1 << 20))
        for path in paths:
            report["read"] += 1
            try:
                image, (w, h, mode, kind) = files.load(path, max_bytes)
                array = pixels.transform(image, opts.resize, opts.crop, draft=opts.draft)
            except pixels.ImageRejected as rejected:
                report["rejected"].append({"path": path, "reason": rejected.reason,
                                           "detail": rejected.detail})
                continue
            text = label_of(path)
            label = self.index[text]
            split = split_of(relative_key(path, self.source_base), opts.test_fraction, opts.seed)
            tfrecords[split].write(example.encode(encode(array), text, path))
            parquets[split].add({"image": array, "label": label,
                                 "label_text": text, "path": path})
            stats = report["splits"][split]
            stats["written"] += 1
            stats["labels"][text] += 1
            stats["widths"].append(w)
            stats["heights"].append(h)
            stats["modes"][mode] += 1
            stats["formats"][kind] += 1
            report["written"] += 1
        for split, shard in parquets.items():
            groups = shard.close()   # before the stack renames the file into place
            if groups:
                report["splits"][split]["row_groups"][shard_io.part_name(part)] = groups

    def _opener(self, stack: ExitStack, split: str, part: int) -> Callable[[], Any]:
        """Open the split's Parquet file on its first row group: a split with no rows here gets none."""
        rel = layout.join(self.stage.parquet(split), shard_io.part_name(part))
        return lambda: stack.enter_context(shard_io.atomic_output(self.storage, rel, uncached=True))
