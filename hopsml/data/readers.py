"""Rank-side readers: this rank's disjoint part of a dataset as numpy (or cupy) batches.

``reader("digits")`` inside ``experiment.allreduce`` reads the share of the current rank; outside
a run it reads everything (rank 0 of 1). ``reader("fv:fraud:1/td2", split="test")`` reads a feature
view's written training dataset the same way (:mod:`hopsml.data.training_datasets`).

Sharding follows petastorm's rule: the Parquet row groups of a split, in file order, go round-robin
to the ranks (``index % world_size == rank``), so every rank sees a disjoint part and together they
see every row once per epoch. The data jobs write at least as many files as the planned world
size; a reader asked for more shards than there are row groups (or TFRecord files) says so.

Engines, all yielding ``{field: array}`` batches:

* ``"arrow"`` (default): reads row groups with pyarrow and turns a whole image column into one
  ``(N, H, W, C)`` array without a copy per row (the cells are petastorm ``NdarrayCodec`` cells of
  one size, see :mod:`hopsml.data.codec`); a background thread reads the next row group while
  the caller works on the current one.
* ``"petastorm"``: petastorm's ``make_batch_reader`` with ``cur_shard=rank, shard_count=world_size``
  and its single-threaded ('dummy') pool by default, which has been reliable where the thread
  pool sometimes returned no rows for a shard.
* ``"tfrecord"``: the TFRecord shards (``part-i-of-n`` with ``i % world_size == rank``), images
  decoded from ``image/encoded``.

Equal steps: row groups rarely split evenly, so one rank may have a batch more than another, and
a loop with one all-reduce per batch then waits on the rank that has finished until the collective
timeout. ``equal_steps`` makes every rank yield the same number of batches per epoch, computed on
each rank from the Parquet footers of the whole split (no communication): ``"min"`` (or ``True``)
stops every rank after the smallest rank's count (the longer shards' last rows of that epoch are
skipped; with ``shuffle`` a different part each epoch), ``"max"`` lets the shorter shards start
their rows again until they reach the largest count (some rows are seen twice in that epoch).

Importable without pyspark.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import logging
import posixpath
import queue
import threading
import warnings
from collections.abc import Generator, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, BinaryIO, cast

import numpy as np

from hopsml import config, layout
from hopsml.data import dataset as ds
from hopsml.data import training_datasets
from hopsml.data.codec import decode_column
from hopsml.data.fingerprint import check_split
from hopsml.data.manifest import Manifest, open_manifest
from hopsml.fs import Storage
from hopsml.timeline.span import input_waits

if TYPE_CHECKING:
    import pyarrow as pa

log = logging.getLogger(__name__)

ENGINES = ("arrow", "petastorm", "tfrecord")
EQUAL_STEPS = ("min", "max")
_PREFETCH = 2
_END = object()


@dataclass(frozen=True)
class Piece:
    """One row group of one Parquet file: the unit of sharding."""

    path: str
    row_group: int
    rows: int


def _current_rank() -> tuple[int, int, Storage | None, str | None]:
    """(rank, world_size, storage, project) of the run this code is in, else (0, 1, None, None)."""
    from hopsml.tracking.run_context import current_or_none

    ctx = current_or_none()
    if ctx is None:
        return 0, 1, None, None
    return ctx.rank, ctx.world_size, ctx.storage, ctx.run_dir.project


def _seed(given: int | None) -> int:
    """The shuffling seed: the one given, else the run's (so a rerun shuffles the same), else 0."""
    if given is not None:
        return int(given)
    from hopsml.tracking.run_context import current_or_none

    ctx = current_or_none()
    return ctx.seed if ctx is not None and ctx.seed is not None else 0


class ShardReader:
    """Iterate over one rank's batches: ``for batch in reader: batch["image"], batch["label"]``."""

    def __init__(self, storage: Storage, ddir: ds.DatasetDir, manifest: Manifest, split: str,
                 rank: int, world_size: int, batch_size: int, shuffle: bool, seed: int,
                 epochs: int | None, fields: Sequence[str], engine: str, drop_last: bool,
                 device: str, pool: str, equal_steps: str | None = None, what: str | None = None,
                 more_shards: str | None = None) -> None:
        self.storage, self.dir, self.manifest = storage, ddir, manifest
        # how messages name the dataset, and how to get more shards of it (a view's training dataset differs)
        self.what = what or f"dataset {ddir.name!r}"
        self.more_shards = more_shards or "rewrite it with shards>={n} (hopsml prep ... --shards)"
        self.split, self.rank, self.world_size = split, rank, world_size
        self.batch_size, self.shuffle, self.seed, self.epochs = batch_size, shuffle, seed, epochs
        self.fields, self.engine, self.drop_last = list(fields), engine, drop_last
        self.device, self.pool = device, pool
        self.equal_steps = equal_steps
        self.rank_rows: list[int] = []
        self._specs = {name: manifest.fields[name] for name in self.fields}
        if engine == "tfrecord":
            self.files = self._tfrecord_files()
            self.pieces: list[Piece] = []
            self.num_rows = None
        else:
            all_pieces = self._all_pieces()
            if len(all_pieces) < world_size:
                raise ds.DatasetError(
                    f"{self.what} split {split!r} has {len(all_pieces)} row groups, fewer than the {world_size} "
                    f"ranks asked to share it; {self.more_shards.format(n=world_size)} or read with fewer ranks")
            self.pieces = all_pieces[rank::world_size]
            self.num_rows = sum(piece.rows for piece in self.pieces)
            self.rank_rows = [sum(p.rows for p in all_pieces[r::world_size]) for r in range(world_size)]
        if equal_steps is not None and engine == "tfrecord":
            from hopsml.errors import SettingsError

            raise SettingsError("equal_steps needs the number of rows of every rank before reading, which "
                                "only the Parquet engines know; use engine='arrow' (or 'petastorm')")

    # --- discovery ---------------------------------------------------------------------------
    def _split_path(self, kind: str) -> str:
        return layout.join(self.dir.path, self.manifest.splits[self.split][kind])

    def _all_pieces(self) -> list[Piece]:
        import pyarrow.parquet as pq

        folder = self._split_path("parquet")
        pieces = []
        for rel in self.storage.ls(folder):
            if not rel.endswith(".parquet") or posixpath.basename(rel).startswith((".", "_")):
                continue
            with self.storage.open_input(rel, seekable=True) as handle:
                metadata = pq.ParquetFile(handle).metadata
            pieces += [Piece(rel, g, metadata.row_group(g).num_rows) for g in range(metadata.num_row_groups)]
        return [p for p in pieces if p.rows > 0]

    def _tfrecord_files(self) -> list[str]:
        folder = self._split_path("tfrecord")
        files = [rel for rel in self.storage.ls(folder) if ".tfrecord" in posixpath.basename(rel)
                 and not posixpath.basename(rel).startswith(".")]
        if len(files) < self.world_size:
            raise ds.DatasetError(
                f"{self.what} split {self.split!r} has {len(files)} TFRecord shards, fewer than the "
                f"{self.world_size} ranks asked to share it; {self.more_shards.format(n=self.world_size)} or read "
                "with fewer ranks")
        return files[self.rank::self.world_size]

    # --- iteration ---------------------------------------------------------------------------
    def __iter__(self) -> Iterator[dict[str, Any]]:
        return input_waits(self._batches())  # the time the loop waits for a batch is on the rank's timeline

    def _batches(self) -> Iterator[dict[str, Any]]:
        epoch = 0
        steps = self.steps_per_epoch() if self.equal_steps is not None else None
        while self.epochs is None or epoch < self.epochs:
            batches = self._epoch_batches(epoch) if steps is None else self._equal_batches(epoch, steps)
            for batch in batches:
                yield self._to_device(batch)
            epoch += 1

    def _epoch_batches(self, epoch: int) -> Generator[dict[str, Any], None, None]:
        batcher = _Batcher(self.batch_size)
        for chunk in self._chunks(epoch):
            yield from batcher.add(chunk)
        rest = batcher.rest()
        if rest is not None and not self.drop_last:
            yield rest

    def _equal_batches(self, epoch: int, steps: int) -> Iterator[dict[str, Any]]:
        """Exactly `steps` batches: cut short, or this epoch's rows again from the start ('max')."""
        produced, again = 0, 0
        while produced < steps:
            before = produced
            # Later passes shuffle differently, so the repeated rows are not the first ones every time.
            batches = self._epoch_batches(epoch if again == 0 else epoch + again * 1_000_003)
            for batch in batches:
                yield batch
                produced += 1
                if produced == steps:
                    batches.close()
                    return
            if produced == before:
                raise ds.DatasetError(f"rank {self.rank} has no batch of {self.batch_size} rows in {self.what}; "
                                      "use a smaller batch_size or drop_last=False")
            again += 1

    def _batches_for(self, rows: int) -> int:
        full, rest = divmod(rows, self.batch_size)
        return full + (1 if rest and not self.drop_last else 0)

    def steps_per_epoch(self) -> int:
        """Batches per epoch on this rank: its own count, or every rank's common count with equal_steps."""
        if self.num_rows is None:
            raise TypeError("the number of batches of a TFRecord reader is not known before reading")
        if self.equal_steps is None:
            return self._batches_for(self.num_rows)
        counts = [self._batches_for(rows) for rows in self.rank_rows]
        return min(counts) if self.equal_steps == "min" else max(counts)

    def __len__(self) -> int:
        """Batches per epoch on this rank (Parquet engines); the same on every rank with equal_steps."""
        return self.steps_per_epoch()

    def _rng(self, epoch: int) -> np.random.Generator:
        return np.random.default_rng([self.seed, epoch, self.rank])

    def _chunks(self, epoch: int) -> Iterator[dict[str, Any]]:
        if self.engine == "arrow":
            source = self._arrow_chunks(epoch)
        elif self.engine == "petastorm":
            source = self._petastorm_chunks(epoch)
        else:
            source = self._tfrecord_chunks(epoch)
        rng = self._rng(epoch)
        for chunk in source:
            if self.shuffle:
                count = len(next(iter(chunk.values())))
                order = rng.permutation(count)
                chunk = {name: values[order] for name, values in chunk.items()}
            yield chunk

    def _arrow_chunks(self, epoch: int) -> Iterator[dict[str, Any]]:
        pieces = list(self.pieces)
        if self.shuffle:
            order = np.random.default_rng([self.seed, epoch]).permutation(len(pieces))
            pieces = [pieces[i] for i in order]
        return _prefetch(self._read_piece(piece) for piece in pieces)

    def _read_piece(self, piece: Piece) -> dict[str, Any]:
        import pyarrow.parquet as pq

        with self.storage.open_input(piece.path, seekable=True) as handle:
            table = pq.ParquetFile(handle).read_row_group(piece.row_group, columns=self.fields,
                                                          use_threads=False)
        chunk = {name: self._column(name, table.column(name)) for name in self.fields}
        return chunk

    def _column(self, name: str, column: pa.ChunkedArray) -> np.ndarray:
        import pyarrow as pa

        spec = self._specs[name]
        if spec.get("encoding") == "npy":
            return decode_column(column, tuple(spec["shape"]), spec["dtype"])
        if spec["shape"]:  # fixed-length list column
            flat = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
            values = flat.flatten().to_numpy(zero_copy_only=False)
            return values.astype(spec["dtype"], copy=False).reshape((len(flat), *spec["shape"]))
        if spec["dtype"] == "str":
            return column.to_numpy(zero_copy_only=False)
        return column.to_numpy().astype(spec["dtype"], copy=False)

    def _petastorm_chunks(self, epoch: int) -> Iterator[dict[str, Any]]:
        url = ds.parquet_url(self.storage, self._split_path("parquet"))
        with warnings.catch_warnings():  # petastorm 0.13 uses pyarrow APIs deprecated since 5.0
            warnings.simplefilter("ignore", FutureWarning)
            warnings.simplefilter("ignore", UserWarning)
            yield from self._petastorm_batches(url, epoch)

    def _petastorm_batches(self, url: str, epoch: int) -> Iterator[dict[str, Any]]:
        from petastorm import make_batch_reader

        reader = make_batch_reader(url, schema_fields=self.fields, reader_pool_type=self.pool,
                                   workers_count=2, cur_shard=self.rank, shard_count=self.world_size,
                                   shuffle_row_groups=self.shuffle, seed=self.seed + epoch, num_epochs=1)
        try:
            for batch in reader:
                yield {name: self._petastorm_column(name, getattr(batch, name)) for name in self.fields}
        finally:
            # what the reader's __exit__ does, minus its print of "Cache cleanup complete." on every read
            with contextlib.redirect_stdout(io.StringIO()):
                reader.stop()
                reader.join()
                reader.cleanup_cache()

    def _petastorm_column(self, name: str, values: np.ndarray) -> np.ndarray:
        spec = self._specs[name]
        if spec.get("encoding") == "npy":
            import pyarrow as pa

            return decode_column(pa.array(values, type=pa.binary()), tuple(spec["shape"]), spec["dtype"])
        if spec["shape"]:
            return np.stack(list(values)).astype(spec["dtype"], copy=False) if len(values) else \
                np.empty((0, *spec["shape"]), spec["dtype"])
        return values if spec["dtype"] == "str" else values.astype(spec["dtype"], copy=False)

    def _tfrecord_chunks(self, epoch: int) -> Iterator[dict[str, Any]]:
        from hopsml.formats import decode_example, read_records

        files = list(self.files)
        if self.shuffle:
            order = np.random.default_rng([self.seed, epoch]).permutation(len(files))
            files = [files[i] for i in order]
        compression = "gzip" if any(f.endswith(".gz") for f in files) else None
        for rel in files:
            columns: dict[str, list[Any]] = {name: [] for name in self.fields}
            local = self.storage.local_path(rel)
            stream = None if local else self.storage.open_input(rel)
            try:
                for record in read_records(local or cast(BinaryIO, stream), compression):
                    example = decode_example(record)
                    for name in self.fields:
                        columns[name].append(self._from_example(name, example))
            finally:
                if stream is not None:
                    stream.close()
            if columns and columns[self.fields[0]]:
                yield {name: self._stack(name, values) for name, values in columns.items()}

    def _from_example(self, name: str, example: dict[str, Any]) -> Any:
        spec = self._specs[name]
        key = spec.get("tfrecord", name)
        value = example[key]
        if spec.get("encoding") == "npy":  # images: decode the PNG/JPEG bytes
            from PIL import Image

            with Image.open(io.BytesIO(value[0])) as image:
                return np.asarray(image.convert("RGB"))
        if spec["dtype"] == "str":
            return value[0].decode("utf-8")
        return value if spec["shape"] else value[0]

    def _stack(self, name: str, values: list[Any]) -> np.ndarray:
        spec = self._specs[name]
        if spec["dtype"] == "str":
            return np.array(values, dtype=object)
        return np.stack(values).astype(spec["dtype"], copy=False)

    def _to_device(self, batch: dict[str, np.ndarray]) -> dict[str, Any]:
        if self.device == "cpu":
            return batch
        import cupy

        return {name: cupy.asarray(values) if values.dtype != object else values
                for name, values in batch.items()}


class _Batcher:
    """Cut a stream of column chunks into batches of one size, copying only across chunk edges."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._held: list[dict[str, np.ndarray]] = []
        self._held_rows = 0

    def add(self, chunk: dict[str, np.ndarray]) -> Iterator[dict[str, np.ndarray]]:
        count = len(next(iter(chunk.values())))
        start = 0
        if self._held_rows:
            take = min(self.size - self._held_rows, count)
            self._held.append({k: v[:take] for k, v in chunk.items()})
            self._held_rows += take
            start = take
            if self._held_rows < self.size:
                return
            yield self._join()
        while count - start >= self.size:
            yield {k: v[start:start + self.size] for k, v in chunk.items()}
            start += self.size
        if start < count:
            self._held = [{k: v[start:] for k, v in chunk.items()}]
            self._held_rows = count - start

    def _join(self) -> dict[str, np.ndarray]:
        held, self._held, self._held_rows = self._held, [], 0
        if len(held) == 1:
            return held[0]
        return {k: np.concatenate([part[k] for part in held]) for k in held[0]}

    def rest(self) -> dict[str, np.ndarray] | None:
        return self._join() if self._held_rows else None


def _prefetch(chunks: Iterator[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    """Produce the next items in a background thread (pyarrow decodes without the GIL)."""
    buffer: queue.Queue = queue.Queue(maxsize=_PREFETCH)
    stop = threading.Event()

    def produce() -> None:
        try:
            for chunk in chunks:
                while not stop.is_set():
                    try:
                        buffer.put(chunk, timeout=0.1)
                        break
                    except queue.Full:
                        continue
                if stop.is_set():
                    return
            buffer.put(_END)
        except BaseException as exc:  # noqa: BLE001 - handed to the consumer, raised there
            buffer.put(exc)

    worker = threading.Thread(target=produce, name="hopsml-reader-prefetch", daemon=True)
    worker.start()
    try:
        while True:
            item = buffer.get()
            if item is _END:
                return
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stop.set()
        worker.join(timeout=5)


def reader(dataset: str, rank: int | None = None, world_size: int | None = None, *,
           batch_size: int = 256, shuffle: bool = True, seed: int | None = None, epochs: int | None = 1,
           fields: Sequence[str] | None = None, split: str | None = None, engine: str = "arrow",
           drop_last: bool = False, device: str = "cpu", pool: str = "dummy",
           equal_steps: bool | str = False, settings: config.Settings | None = None) -> ShardReader:
    """This rank's share of ``dataset`` as batches of ``{field: array}``.

    ``dataset`` is a prepared dataset's name, or a feature view's written training dataset as
    ``"fv:<view>:<version>/td<n>"`` (see :mod:`hopsml.data.training_datasets`), read the same way.
    ``rank``/``world_size`` default to the current rank inside ``experiment.allreduce`` (else
    0 of 1); ``split`` to 'train' when the dataset has one, else its only split; ``fields`` to
    the dataset's default fields (image and label; features and label). ``epochs=None`` repeats
    forever; with ``shuffle`` the row-group order and the rows within each row group change per
    epoch, reproducibly from ``seed`` (default: the run's seed inside a run, else 0). ``device='cuda'`` gives
    cupy arrays on the current GPU.
    ``equal_steps`` ('min' or True, 'max'; default off) gives every rank the same number of
    batches per epoch, so that a loop with one all-reduce per batch cannot wait for a rank that
    has run out (see the module text).
    """
    from hopsml.errors import SettingsError

    if equal_steps is True:
        equal_steps = "min"
    if equal_steps is False or equal_steps is None:
        mode = None
    elif equal_steps in EQUAL_STEPS:
        mode = str(equal_steps)
    else:
        raise SettingsError(f"equal_steps={equal_steps!r}: use False, True (= 'min') or 'max'")

    if engine not in ENGINES:
        raise SettingsError(f"engine={engine!r}: use one of {', '.join(ENGINES)}")
    if engine == "petastorm" and importlib.util.find_spec("petastorm") is None:
        raise SettingsError("engine='petastorm' needs petastorm, which is not installed: install "
                            "hopsml's petastorm extra (pip install \".[petastorm]\" in its checkout: the stack "
                            "petastorm 0.13 runs on, pyarrow 14, numpy 1.x, Spark 3.5), or use engine='arrow', "
                            "which reads the same files")
    if int(batch_size) < 1:
        raise SettingsError(f"batch_size={batch_size!r} must be at least 1")
    if device not in ("cpu", "cuda", "gpu"):
        raise SettingsError(f"device={device!r}: use 'cpu' or 'cuda'")
    run_rank, run_world, run_storage, run_project = _current_rank()
    rank = run_rank if rank is None else int(rank)
    world_size = run_world if world_size is None else int(world_size)
    if world_size < 1 or not 0 <= rank < world_size:
        raise SettingsError(f"rank={rank} world_size={world_size}: need world_size >= 1 and "
                            "0 <= rank < world_size")
    if settings is None and run_storage is not None:
        storage, project = run_storage, run_project or config.load().project
    else:
        settings = settings or config.load()
        storage, project = Storage(settings.root), settings.project
    what, more_shards = f"dataset {dataset!r}", None
    if training_datasets.is_reference(dataset):   # a feature view's training dataset: the dataset it was written to
        ref = training_datasets.TrainingDatasetRef.parse(dataset)
        dataset = training_datasets.resolve(storage, project, ref)
        what = f"{ref} ({ref.described()}, dataset {dataset!r})"
        more_shards = "create another version with shards>={n} (fv.create_train_test_split(..., shards={n}))"
    ddir, manifest = open_manifest(storage, project, dataset)
    splits = list(manifest.splits)
    if split is None:
        split = "train" if "train" in splits else splits[0]
    if split not in splits:
        raise SettingsError(f"{what} has no split {split!r}; it has {', '.join(splits)}")
    fields = list(fields or manifest.default_field_names())
    unknown = [name for name in fields if name not in manifest.fields]
    if unknown:
        raise SettingsError(f"{what} has no field(s) {', '.join(unknown)}; it has {', '.join(manifest.fields)}")
    from hopsml.tracking.lineage import record_dataset  # the run notes what it trained on, and which bytes
    if run_rank == 0:   # rank 0 (or outside a run) checks and records: the others would repeat its warning
        record_dataset(dataset, storage.uri(ddir.path), split, manifest.to_json(),
                       fingerprint=check_split(storage, ddir.path, dataset, manifest.to_json(), split))
    return ShardReader(storage, ddir, manifest, split, rank, world_size, int(batch_size), shuffle,
                       _seed(seed), epochs, fields, engine, drop_last, "cpu" if device == "cpu" else "cuda",
                       pool, mode, what, more_shards)
