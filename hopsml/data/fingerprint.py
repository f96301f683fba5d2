"""Content fingerprints of a prepared dataset, so a run can say which bytes it read and a later read
(or a rerun) can say which file changed.

A fingerprint costs no full re-read of the data. A file's is its size and a SHA-256 of:

* a Parquet file's footer (its metadata: schema, row groups, every column chunk's offsets, sizes,
  compressed sizes and statistics), which changes with any rewrite of the data;
* any other file (TFRecord shards, petastorm's ``_common_metadata``) its first and last 64 KiB,
  which in a TFRecord file hold the records' own CRCs there; the whole file when it is smaller.

A split's fingerprint hashes its files' fingerprints (by path) and its row count; the dataset's
hashes its splits'. The data jobs write them into the manifest (``fingerprints``) as they commit;
a dataset prepared before that has none, and its fingerprint is computed when it is read.

>>> a = {"parquet/train/part-0.parquet": {"size": 10, "sha256": "ab"}}
>>> split_digest(a, 5) == split_digest(dict(a), 5), split_digest(a, 5) == split_digest(a, 6)
(True, False)
>>> diff_files(a, {"parquet/train/part-1.parquet": {"size": 3, "sha256": "cd"}})
['parquet/train/part-0.parquet removed', 'parquet/train/part-1.parquet added']
"""

from __future__ import annotations

import hashlib
import json
import logging
import posixpath
import struct
import warnings
from collections.abc import Mapping
from typing import Any

from hopsml.errors import StorageError
from hopsml.fs import Storage

log = logging.getLogger(__name__)

KEY = "fingerprints"     # the manifest's key
METHOD = "size+sha256(parquet footer | first and last 64 KiB) v1"
UNKNOWN = "unknown"
_EDGE = 64 * 1024
_SHORT = 12


class DatasetChangedWarning(UserWarning):
    """A dataset's files are not the bytes its manifest (or a run's record) names."""


def short(digest: str | None) -> str:
    """The first characters of a fingerprint, as shown to people."""
    return digest[:_SHORT] if digest and digest != UNKNOWN else UNKNOWN


def _sha(data: Mapping[str, object]) -> str:
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()


def file_digest(storage: Storage, rel: str, size: int) -> str:
    """SHA-256 of a Parquet file's footer, or of another file's first and last 64 KiB."""
    digest = hashlib.sha256()
    with storage.open_input(rel, seekable=True) as handle:
        if rel.endswith(".parquet") and size >= 12:
            handle.seek(size - 8)
            tail = handle.read(8)
            length = struct.unpack("<I", tail[:4])[0] if tail[4:] == b"PAR1" else -1
            if 0 <= length <= size - 12:
                handle.seek(size - 8 - length)
                digest.update(handle.read(length + 8))
                return digest.hexdigest()
            handle.seek(0)   # not a Parquet footer after all: fingerprint it like any file
        if size <= 2 * _EDGE:
            digest.update(handle.read(size))
        else:
            digest.update(handle.read(_EDGE))
            handle.seek(size - _EDGE)
            digest.update(handle.read(_EDGE))
    return digest.hexdigest()


def split_folders(manifest: Mapping[str, Any], split: str) -> list[str]:
    """The folders (relative to the dataset) holding a split's files, as its manifest names them."""
    entry = (manifest.get("splits") or {}).get(split) or {}
    return [str(entry[kind]) for kind in ("parquet", "tfrecord") if isinstance(entry.get(kind), str)]


def split_files(storage: Storage, dataset_path: str, manifest: Mapping[str, Any], split: str
                ) -> dict[str, dict[str, Any]]:
    """Each file of a split (dataset-relative path) with its size and digest."""
    files: dict[str, dict[str, Any]] = {}
    for folder in split_folders(manifest, split):
        base = posixpath.join(dataset_path, folder)
        for info in storage.walk(base):
            rel = storage.relative(info.path)
            if not info.is_file or posixpath.basename(rel).startswith("."):
                continue
            size = int(info.size or 0)
            files[posixpath.relpath(rel, dataset_path)] = {"size": size, "sha256": file_digest(storage, rel, size)}
    return files


def split_digest(files: Mapping[str, Mapping[str, Any]], rows: int | None) -> str:
    """One split's fingerprint: its files' fingerprints and its row count."""
    return _sha({"files": {k: [v.get("size"), v.get("sha256")] for k, v in files.items()}, "rows": rows})


def dataset_digest(splits: Mapping[str, Mapping[str, Any]]) -> str:
    """A dataset's fingerprint: its splits' fingerprints."""
    return _sha({name: entry.get("fingerprint") for name, entry in splits.items()})


def _rows(manifest: Mapping[str, Any], split: str) -> int | None:
    rows = ((manifest.get("splits") or {}).get(split) or {}).get("rows")
    return rows if isinstance(rows, int) else None


def compute_split(storage: Storage, dataset_path: str, manifest: Mapping[str, Any], split: str) -> dict[str, Any]:
    """{"fingerprint", "rows", "files"} of a split as it is on storage now."""
    files = split_files(storage, dataset_path, manifest, split)
    rows = _rows(manifest, split)
    return {"fingerprint": split_digest(files, rows), "rows": rows, "files": files}


def compute(storage: Storage, dataset_path: str, manifest: Mapping[str, Any]) -> dict[str, Any]:
    """The manifest's `fingerprints` entry for the dataset as it is on storage now."""
    splits = {name: compute_split(storage, dataset_path, manifest, name) for name in (manifest.get("splits") or {})}
    return {"method": METHOD, "dataset": dataset_digest(splits), "splits": splits}


def seal(storage: Storage, dataset_path: str, manifest_rel: str) -> None:
    """Write the fingerprints of a dataset's files into its manifest: the data jobs' last step before
    the commit, so every committed dataset says what bytes it holds."""
    if not storage.exists(manifest_rel):
        return
    manifest = storage.read_json(manifest_rel)
    if not isinstance(manifest, dict) or not isinstance(manifest.get("splits"), dict):
        return
    manifest[KEY] = compute(storage, dataset_path, manifest)
    storage.write_json(manifest_rel, manifest)


def diff_files(recorded: Mapping[str, Mapping[str, Any]], current: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """What differs between two splits' files, one line per file: changed, added or removed."""
    lines = []
    for rel in sorted(set(recorded) | set(current)):
        old, new = recorded.get(rel), current.get(rel)
        if new is None:
            lines.append(f"{rel} removed")
        elif old is None:
            lines.append(f"{rel} added")
        elif old.get("size") != new.get("size"):
            lines.append(f"{rel} changed (size {old.get('size')} -> {new.get('size')} bytes)")
        elif old.get("sha256") != new.get("sha256"):
            lines.append(f"{rel} changed (same size, other content)")
    return lines


def diff_split(recorded: Mapping[str, Any] | None, current: Mapping[str, Any]) -> list[str]:
    """What differs in one split; empty when it is the same bytes (or nothing was recorded)."""
    if not recorded or not isinstance(recorded.get("files"), Mapping):
        return []
    if recorded.get("fingerprint") == current.get("fingerprint"):
        return []
    lines = diff_files(recorded["files"], current["files"])
    if not lines and recorded.get("rows") != current.get("rows"):
        lines.append(f"rows {recorded.get('rows')} -> {current.get('rows')}")
    return lines or ["fingerprint differs"]


def check_split(storage: Storage, dataset_path: str, name: str, manifest: Mapping[str, Any], split: str
                ) -> dict[str, Any]:
    """A split's fingerprint as read now, for the run's lineage; warns (naming the split and the files)
    when the files are not those the manifest recorded. Without fingerprints in the manifest (a dataset
    prepared before them) it is computed now; when it cannot be, it is "unknown"."""
    try:
        current = compute_split(storage, dataset_path, manifest, split)
    except (OSError, StorageError, ValueError) as exc:
        log.warning("cannot fingerprint split %r of dataset %r: %s", split, name, exc)
        return {"fingerprint": UNKNOWN, "rows": _rows(manifest, split), "files": {}}
    recorded = ((manifest.get(KEY) or {}).get("splits") or {}).get(split)
    current["recorded"] = recorded is not None   # False: the manifest had none, this is the first
    changed = diff_split(recorded, current)
    if changed:
        message = (f"dataset {name!r} split {split!r} is not the data its manifest recorded: "
                   f"{'; '.join(changed)}. Prepare it again (overwrite=True) if the change was not meant")
        log.warning("%s", message)
        warnings.warn(message, DatasetChangedWarning, stacklevel=3)
    return current
