"""Which datasets a run read: the rank reader reports each dataset it opens, and the run keeps the
list in `datasets.json`, so a model exported from the run can say what it was trained on.
Importable without pyspark."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping
from typing import Any

from hopsml.layout import DATASETS_USED
from hopsml.tracking.run_context import RunContext, current_or_none

log = logging.getLogger(__name__)


def read(local_dir: str) -> list[dict[str, Any]]:
    """The datasets recorded in a run's local folder (empty when none)."""
    path = os.path.join(local_dir, DATASETS_USED)
    try:
        with open(path, encoding="utf-8") as handle:
            return list(json.load(handle).get("datasets", []))
    except FileNotFoundError:
        return []
    except (OSError, ValueError) as exc:
        log.warning("cannot read %s: %s", path, exc)
        return []


def merge(entries: list[dict[str, Any]], entry: Mapping[str, Any]) -> list[dict[str, Any]]:
    """`entries` with `entry` added, or its splits (and their fingerprints) joined to the entry of the
    same dataset.

    >>> merge([{"name": "d", "uri": "u", "splits": ["train"]}], {"name": "d", "uri": "u", "splits": ["test"]})
    [{'name': 'd', 'uri': 'u', 'splits': ['test', 'train']}]
    """
    out = [dict(e) for e in entries]
    for existing in out:
        if existing.get("name") == entry.get("name") and existing.get("uri") == entry.get("uri"):
            existing["splits"] = sorted(set(existing.get("splits", [])) | set(entry.get("splits", [])))
            if entry.get(SPLIT_FINGERPRINTS):
                existing[SPLIT_FINGERPRINTS] = {**existing.get(SPLIT_FINGERPRINTS, {}), **entry[SPLIT_FINGERPRINTS]}
            return out
    return out + [dict(entry)]


SPLIT_FINGERPRINTS = "split_fingerprints"   # split -> {"fingerprint", "rows", "files", "recorded"} as read


def record_dataset(name: str, uri: str, split: str, manifest: Mapping[str, Any],
                   ctx: RunContext | None = None, fingerprint: Mapping[str, Any] | None = None,
                   extra: Mapping[str, Any] | None = None) -> None:
    """Note in the active run (rank 0 only, so ranks do not race) that it read `split` of `name`, and
    the fingerprint of the bytes it read (hopsml.data.fingerprint); `extra`: more of what identifies it (a
    feature view's training dataset taken in memory names its view and version)."""
    ctx = ctx or current_or_none()
    if ctx is None or ctx.rank != 0:
        return
    entry: dict[str, Any] = {"name": name, "uri": uri, "splits": [split], "kind": manifest.get("kind"),
                             "created": manifest.get("created"), **(extra or {})}
    dataset_print = (manifest.get("fingerprints") or {}).get("dataset")
    if dataset_print:   # the whole dataset's, as its manifest recorded it (none before fingerprints)
        entry["fingerprint"] = dataset_print
    if fingerprint is not None:
        entry[SPLIT_FINGERPRINTS] = {split: dict(fingerprint)}
    entries = merge(read(ctx.local_dir), entry)
    path = os.path.join(ctx.local_dir, DATASETS_USED)
    tmp = f"{path}.tmp-{os.getpid()}"
    try:
        with open(tmp, "w", encoding="utf-8") as handle:
            json.dump({"datasets": entries}, handle, indent=2)
        os.replace(tmp, path)
    except OSError as exc:  # lineage is a record, not a reason to stop training
        log.warning("cannot record dataset %r in %s: %s", name, path, exc)
