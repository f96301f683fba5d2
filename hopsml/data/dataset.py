"""One prepared dataset on storage: where its files live, its manifest, and the write-aside commit.

A data job writes into a hidden staging folder beside the final one and renames it into place as
its last step, with ``_SUCCESS`` as the last file inside; a failed job leaves no folder that looks
like a finished dataset. While it works, its driver rewrites a heartbeat beside the staging folder;
the folder of a job killed with its driver (no heartbeat for ``lost_after_s``) is removed by the
next job on the same dataset root and by ``hopsml datasets clean``.

>>> d = DatasetDir.of("demo", "digits")
>>> d.path
'Projects/demo/Datasets/digits'
>>> d.manifest
'Projects/demo/Datasets/digits/dataset.json'
>>> d.parquet("train")
'Projects/demo/Datasets/digits/parquet/train'
>>> d.tfrecord("train")
'Projects/demo/Datasets/digits/tfrecord/train'
"""

from __future__ import annotations

import datetime as _dt
import logging
import posixpath
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from functools import partial
from typing import Any

from hopsml import config, execution_notes, layout
from hopsml.clock import utc_now as now
from hopsml.errors import HopsmlError, StorageError
from hopsml.fs import Storage
from hopsml.layout import DATASET_HEARTBEAT as HEARTBEAT
from hopsml.layout import DATASET_STAGING as STAGING
from hopsml.layout import DATASET_SUCCESS as SUCCESS
from hopsml.layout import DatasetDir
from hopsml.records import BrokenRecordError, Shape, read_or_broken, read_record
from hopsml.tracking.heartbeat import Heartbeat, age_text, last_beat

log = logging.getLogger(__name__)

FORMAT_VERSION = 1
# What a listing needs of dataset.json at its top level (manifest.Manifest checks what readers need).
MANIFEST_SHAPE = Shape(layout.DATASET_MANIFEST, required=("splits",),
                       types={"fields": (dict,), "splits": (dict,), "counts": (dict,), "kind": (str,), "name": (str,),
                              "created": (str,), "source": (str,), "labels": (list,), "options": (dict,)})


class DatasetError(HopsmlError, ValueError):
    """A dataset cannot be prepared or read as asked; the message says what to change."""


class DatasetNotFoundError(DatasetError, LookupError):
    """No finished dataset of that name exists in the project."""


class DatasetExistsError(DatasetError):
    """A dataset of that name exists and overwrite was not asked for."""


class RejectedInputError(DatasetError):
    """strict=True and some input was rejected; nothing was committed."""


@dataclass
class DatasetSummary:
    """What a data job did: counts that add up (read = written + rejected + dropped) and where;
    `skipped` counts, by reason, the source files it did not read (links, other extensions)."""

    name: str
    kind: str
    uri: str
    read: int
    written: int
    rejected: int
    dropped: int = 0
    splits: dict[str, int] = field(default_factory=dict)
    shards: int = 0
    rejected_reasons: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0
    skipped: dict[str, int] = field(default_factory=dict)
    left_out: dict[str, str] = field(default_factory=dict)   # a table's columns not made features, and why
    engine: str = "spark"   # what ran the job: "spark", or "local" for a small table prepared in this process

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def __str__(self) -> str:
        splits = ", ".join(f"{k} {v}" for k, v in self.splits.items())
        text = (f"dataset {self.name!r} ({self.kind}) at {self.uri}: read {self.read}, written "
                f"{self.written} ({splits}), rejected {self.rejected}")
        if self.dropped:
            text += f", dropped {self.dropped} (missing values)"
        if self.rejected_reasons:
            text += " [" + ", ".join(f"{k}: {v}" for k, v in sorted(self.rejected_reasons.items())) + "]"
        if self.skipped:
            text += (f", skipped {sum(self.skipped.values())} not read ["
                     + ", ".join(f"{k}: {v}" for k, v in sorted(self.skipped.items())) + "]")
        if self.left_out:
            text += ", left out " + ", ".join(f"column {k!r} ({v})" for k, v in self.left_out.items())
        text += f", {self.shards} shards per split, {self.seconds:.1f}s"
        return text + (" (prepared without Spark: a small table)" if self.engine == "local" else "")




def parquet_url(storage: Storage, rel: str) -> str:
    """A URL Spark and petastorm both understand for a root-relative path."""
    local = storage.local_path(rel)
    return "file://" + local if local is not None else storage.uri(rel)


def check_writable(storage: Storage, project: str, name: str, overwrite: bool) -> DatasetDir:
    """Refuse a bad name or an existing dataset (without overwrite) before any Spark work starts."""
    final = DatasetDir.of(project, name)
    if storage.exists(final.path) and not overwrite:
        raise DatasetExistsError(f"dataset {name!r} already exists at {storage.uri(final.path)}; "
                                 "pass overwrite=True (--overwrite) or choose another name")
    return final


@contextmanager
def staged(storage: Storage, project: str, name: str, overwrite: bool, *, heartbeat_s: float | None = None,
           lost_after_s: float | None = None) -> Iterator[DatasetDir]:
    """Yield a hidden staging DatasetDir; on success rename it to the final name, else delete it.
    Stale staging folders that killed jobs left in the project are removed first."""
    final = check_writable(storage, project, name, overwrite)
    for stale in remove_stale_staging(storage, project, config.value("lost_after_s", lost_after_s)):
        log.warning("removed %s", stale)
    parent = posixpath.dirname(final.path)
    stage = DatasetDir(layout.join(parent, f".{name}{STAGING}{uuid.uuid4().hex[:12]}"))
    # the heartbeat first: a staging folder without one is a killed job's, to any other job
    heartbeat = Heartbeat(storage, stage.path + HEARTBEAT, config.value("heartbeat_s", heartbeat_s))
    try:
        storage.makedirs(stage.path)
        yield stage
        from hopsml.data import fingerprint  # imports this module: here, not at the top
        fingerprint.seal(storage, stage.path, stage.manifest)   # what bytes it holds, before it is final
        _commit(storage, stage, final, overwrite)
    except BaseException:
        try:
            storage.delete(stage.path)
        except (OSError, StorageError) as exc:  # keep the original error; the staging folder is hidden anyway
            log.warning("could not remove staging folder %s: %s", storage.uri(stage.path), exc)
        raise
    finally:
        heartbeat.stop(remove=True)


@dataclass(frozen=True)
class StaleStaging:
    """A staging folder (or its lone heartbeat) of a data job that stopped without cleaning up."""

    path: str
    uri: str
    files: int
    bytes: int
    idle_s: float | None   # since its last heartbeat or file write; None when nothing tells

    def __str__(self) -> str:
        idle = f"idle {age_text(self.idle_s)}" if self.idle_s is not None else "no heartbeat, no files"
        return (f"stale staging folder {self.uri} ({self.files} files, {self.bytes / 1e6:.1f} MB, {idle}) "
                "of a data job that was killed")


def _epoch(mtime: _dt.datetime | None) -> float | None:
    return mtime.timestamp() if mtime is not None else None


def stale_staging(storage: Storage, project: str, lost_after_s: float, now: float | None = None
                  ) -> list[StaleStaging]:
    """The staging folders of the project's datasets whose job stopped beating `lost_after_s` ago
    (or, without a heartbeat, whose newest file is that old)."""
    now = time.time() if now is None else now
    parent = posixpath.dirname(layout.dataset_dir(project, "x"))
    entries = set(storage.ls(parent))
    found = []
    for rel in sorted(entries):
        base = posixpath.basename(rel)
        if not base.startswith(".") or STAGING not in base:
            continue
        if base.endswith(HEARTBEAT):
            folder = rel[:-len(HEARTBEAT)]
            if folder in entries:
                continue   # judged with its folder
            beat = last_beat(storage, rel)
            if beat is None or now - beat > lost_after_s:
                found.append(StaleStaging(rel, storage.uri(rel), 0, 0, None if beat is None else now - beat))
            continue
        files = [info for info in storage.walk(rel) if info.is_file]
        beat = last_beat(storage, rel + HEARTBEAT) if rel + HEARTBEAT in entries else None
        times = [beat] if beat is not None else [t for t in (_epoch(i.mtime) for i in files) if t is not None]
        if not times and (own := _epoch(storage.info(rel).mtime)) is not None:
            times.append(own)
        idle = now - max(times) if times else None
        if idle is None or idle > lost_after_s:
            found.append(StaleStaging(rel, storage.uri(rel), len(files), sum(i.size or 0 for i in files), idle))
    return found


def remove_stale_staging(storage: Storage, project: str, lost_after_s: float) -> list[StaleStaging]:
    """Remove what `stale_staging` finds (with their heartbeat files); returns what was removed."""
    removed = stale_staging(storage, project, lost_after_s)
    for stale in removed:
        storage.delete(stale.path)
        if not stale.path.endswith(HEARTBEAT):
            storage.delete(stale.path + HEARTBEAT)
    return removed


def _commit(storage: Storage, stage: DatasetDir, final: DatasetDir, overwrite: bool) -> None:
    old = None
    if storage.exists(final.path):
        if not overwrite:
            raise DatasetExistsError(f"dataset {final.name!r} appeared at {storage.uri(final.path)} "
                                     "while this job ran; pass overwrite=True or choose another name")
        old = layout.join(posixpath.dirname(final.path), f".{final.name}.old-{uuid.uuid4().hex[:12]}")
        storage.delete(final.success)   # not a finished dataset from here on
        storage.move_dir(final.path, old)
    storage.move_dir(stage.path, final.path)
    storage.write_text(final.success, now() + "\n")  # the last file of a complete dataset
    execution_notes.note("dataset", name=final.name, path=storage.uri(final.path))
    if old is not None:
        storage.delete(old)


def open_dataset(storage: Storage, project: str, name: str) -> tuple[DatasetDir, dict[str, Any]]:
    """The folder and manifest of a finished dataset, or DatasetNotFoundError saying what exists."""
    ddir = DatasetDir.of(project, name)
    if not storage.exists(ddir.success) or not storage.exists(ddir.manifest):
        known = ", ".join(list_names(storage, project)) or "none"
        raise DatasetNotFoundError(
            f"no finished dataset {name!r} in project {project!r} under {storage.uri()} "
            f"(finished datasets: {known}); prepare it with 'hopsml prep images|tabular'")
    return ddir, read_manifest(storage, ddir)


def read_manifest(storage: Storage, ddir: DatasetDir) -> dict[str, Any]:
    """A dataset's dataset.json through the guarded reader, each split an object; BrokenRecordError (naming the
    file and the reason) when it is not a manifest this hopsml can read."""
    manifest = read_record(storage, ddir.manifest, MANIFEST_SHAPE)
    for split, entry in manifest["splits"].items():
        if not isinstance(entry, dict):
            reason = f"{layout.DATASET_MANIFEST} split {split!r} is not an object"
            raise BrokenRecordError(f"{reason}. The record is {storage.uri(ddir.manifest)}: prepare the dataset "
                                    "again, or remove its folder if it is of no use", reason=reason)
    return manifest


def scan(storage: Storage, project: str) -> list[tuple[str, dict[str, Any] | BrokenRecordError]]:
    """Every finished dataset of a project, sorted by name, with its manifest or the reason it cannot be read
    (so a listing shows it as BROKEN rather than failing, or leaving it out)."""
    found: list[tuple[str, dict[str, Any] | BrokenRecordError]] = []
    for name in list_names(storage, project):
        ddir = DatasetDir.of(project, name)
        found.append((name, read_or_broken(partial(read_manifest, storage, ddir), layout.DATASET_MANIFEST)))
    return found


def list_names(storage: Storage, project: str) -> list[str]:
    """Names of the finished datasets of a project (a folder with _SUCCESS), sorted."""
    parent = posixpath.dirname(layout.dataset_dir(project, "x"))
    names = []
    for rel in storage.ls(parent):
        base = posixpath.basename(rel)
        if not base.startswith((".", "_")) and storage.exists(layout.join(rel, SUCCESS)):
            names.append(base)
    return names
