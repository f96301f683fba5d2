"""The datasets of the web view: the table of a project's prepared datasets, one dataset's manifest, statistics
per split with the skew between splits flagged, rejected inputs, and sample images of each class. Plain data
for the templates, as views.py."""

from __future__ import annotations

import base64
import io
import json
import logging
from typing import Any

from hopsml.data import dataset as ds
from hopsml.data.manifest import Manifest
from hopsml.errors import HopsmlError, InvalidNameError, StorageError
from hopsml.fs import Storage
from hopsml.records import BROKEN, BrokenRecordError
from hopsml.ui.views import NotFound, short_time

log = logging.getLogger(__name__)

MAX_REJECTED = 200           # rejected inputs listed on a dataset page
THUMBS_PER_CLASS = 8
SKEW_THRESHOLD = 0.2         # L-infinity distance between two splits' distributions that is flagged


def _distribution_distance(a: dict[str, float], b: dict[str, float]) -> float:
    """L-infinity distance between two distributions given as shares (TFDV's skew measure)."""
    keys = set(a) | set(b)
    return max((abs(a.get(k, 0.0) - b.get(k, 0.0)) for k in keys), default=0.0)


def _shares(entry: dict[str, Any]) -> dict[str, float]:
    if "histogram" in entry:
        counts = entry["histogram"].get("counts") or []
        total = sum(counts) or 1
        return {str(i): c / total for i, c in enumerate(counts)}
    pairs = entry.get("top") or []
    total = entry.get("count") or sum(int(n) for _, n in pairs) or 1
    return {str(v): int(n) / total for v, n in pairs}


def column_skew(column: dict[str, Any], splits: list[str]) -> float | None:
    """The largest distance between the first split and any other, for one column of stats.json."""
    per = column.get("splits") or {}
    if len(splits) < 2 or splits[0] not in per:
        return None
    base = _shares(per[splits[0]])
    distances = [_distribution_distance(base, _shares(per[s])) for s in splits[1:] if s in per]
    return max(distances) if distances else None


def class_pairs(balance: dict[str, dict[str, int]]) -> dict[str, list[list[Any]]]:
    """stats.json's class balance ({split: {label: n}}) as the top-values pairs the bar chart takes."""
    return {split: [[label, n] for label, n in counts.items()] for split, counts in balance.items()}


def histogram_parts(column: dict[str, Any], splits: list[str]) -> dict[str, tuple[list[float], list[int]]]:
    """{split: (edges, counts)} of a numeric column, for the splits that have a histogram."""
    per = column.get("splits") or {}
    return {s: (per[s]["histogram"]["edges"], per[s]["histogram"]["counts"])
            for s in splits if "histogram" in per.get(s, {})}


def top_values(column: dict[str, Any], splits: list[str]) -> dict[str, list[list[Any]]]:
    per = column.get("splits") or {}
    return {s: per[s].get("top") or [] for s in splits if s in per}


def dataset_rows(storage: Storage, project: str) -> list[dict[str, Any]]:
    """Every finished dataset; one whose dataset.json cannot be read is a BROKEN row with the reason."""
    rows: list[dict[str, Any]] = []
    for name, manifest in ds.scan(storage, project):
        if isinstance(manifest, BrokenRecordError):
            rows.append({"name": name, "kind": BROKEN, "problem": manifest.reason})
            continue
        rows.append({"name": name, "kind": manifest.get("kind"), "created": short_time(manifest.get("created")),
                     "counts": manifest.get("counts") or {},
                     "splits": {s: v.get("rows") for s, v in manifest["splits"].items()}})
    return rows


def dataset_view(storage: Storage, project: str, name: str) -> dict[str, Any]:
    try:
        ddir, manifest = ds.open_dataset(storage, project, name)
    except InvalidNameError as exc:
        raise NotFound(str(exc)) from None
    except ds.DatasetNotFoundError as exc:
        raise NotFound(str(exc)) from None
    except BrokenRecordError as exc:
        return {"name": name, "broken": exc.reason, "message": str(exc), "manifest": {}, "counts": {}, "stats": None,
                "rejected": [], "rejected_total": 0, "thumbnails": {}, "uri": storage.uri(ds.DatasetDir.of(project,
                                                                                                          name).path)}
    view: dict[str, Any] = {"name": name, "manifest": manifest, "uri": storage.uri(ddir.path),
                            "counts": manifest.get("counts") or {}, "stats": None, "rejected": [],
                            "rejected_total": 0, "thumbnails": {}}
    if storage.exists(ddir.stats_json):
        try:
            stats = storage.read_json(ddir.stats_json)
            splits = list(stats.get("splits") or [])
            for column in stats.get("columns") or []:
                column["skew"] = column_skew(column, splits)
                column["skewed"] = column["skew"] is not None and column["skew"] > SKEW_THRESHOLD
            view["stats"] = stats
        except (StorageError, ValueError, AttributeError, TypeError) as exc:
            view["stats_error"] = f"stats.json cannot be read: {exc}"
    for rel in storage.ls(ddir.rejected):
        if not rel.endswith(".jsonl"):
            continue
        for line in storage.read_text(rel).splitlines():
            view["rejected_total"] += 1
            if len(view["rejected"]) < MAX_REJECTED:
                try:
                    entry = json.loads(line)
                except ValueError:
                    entry = {"path": line, "reason": "(unreadable line)"}
                view["rejected"].append(entry if isinstance(entry, dict) else {"path": str(entry)})
    if manifest.get("kind") == "images":
        try:
            view["thumbnails"] = thumbnails(storage, ddir, Manifest.from_json(manifest, storage.uri(ddir.manifest)))
        except (OSError, ValueError, KeyError, TypeError, HopsmlError) as exc:
            log.warning("no sample images for dataset %s: %s", name, exc)
            view["thumbnails_error"] = f"sample images cannot be read: {exc}"
    return view


def thumbnails(storage: Storage, ddir: ds.DatasetDir, manifest: Manifest,
               per_class: int = THUMBS_PER_CLASS) -> dict[str, list[str]]:
    """Up to `per_class` images of each class as PNG data URIs, from the first split's Parquet files."""
    import numpy as np
    import pyarrow.parquet as pq
    from PIL import Image

    from hopsml.data.codec import decode_column

    field = manifest.fields["image"]
    shape, dtype = tuple(field["shape"]), np.dtype(field.get("dtype", "uint8"))
    split = next(iter(manifest.splits), None)
    if split is None:
        return {}
    labels = [str(label) for label in manifest.labels or []]
    found: dict[str, list[str]] = {label: [] for label in labels}
    for rel in storage.ls(ddir.parquet(split)):
        if not rel.endswith(".parquet"):
            continue
        with storage.open_input(rel, seekable=True) as handle:
            table = pq.read_table(handle, columns=["image", "label"])
        images = decode_column(table.column("image"), shape, dtype)
        for pixels, label in zip(images, table.column("label").to_pylist()):
            text = labels[label] if isinstance(label, int) and 0 <= label < len(labels) else str(label)
            bucket = found.setdefault(text, [])
            if len(bucket) >= per_class:
                continue
            out = io.BytesIO()
            Image.fromarray(np.ascontiguousarray(pixels).squeeze().astype(np.uint8)).save(out, "PNG")
            bucket.append("data:image/png;base64," + base64.b64encode(out.getvalue()).decode("ascii"))
        if all(len(v) >= per_class for v in found.values()):
            break
    return found
