"""The manifest of a prepared dataset (``dataset.json``): what its files hold and how they were made.

The image job, the table job and batch inference each write one, and every reader reads one;
this dataclass is the one place that knows its keys. The JSON keeps the keys it always had:
keys a writer does not use are left out, and keys this version does not know are kept in
``extra`` and written back.

>>> m = Manifest(kind="table", name="iris", source="/data/iris.csv", created="2026-01-01T00:00:00+00:00",
...              fields={"features": {"dtype": "float32", "shape": [4]}, "label": {"dtype": "int32", "shape": []}},
...              splits={"train": {"rows": 120, "parquet": "parquet/train", "shards": 2}},
...              counts={"read": 150, "written": 150, "rejected": 0})
>>> m.default_field_names(), m.rows("train")
(['features', 'label'], 120)
>>> Manifest.from_json(m.to_json()) == m
True
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from hopsml.data import dataset as ds
from hopsml.fs import Storage
from hopsml.records import read_record

__all__ = ["Manifest", "open_manifest"]

PREDICTIONS = "predictions"

# The order keys are written in; optional ones are left out when they are None.
_ORDER = ("format_version", "kind", "name", "created", "source", "source_uri", "model", "options", "fields",
          "default_fields", "label_field", "labels", "splits", "counts", "rejected_reasons", "skipped_reasons",
          "seconds")
_OPTIONAL = frozenset({"source_uri", "model", "rejected_reasons", "skipped_reasons", "seconds"})


@dataclass
class Manifest:
    """One dataset's ``dataset.json``."""

    kind: str                                   # "images", "table" or "predictions"
    name: str
    source: str | None                          # where the rows came from (credentials removed)
    fields: dict[str, dict[str, Any]]           # column -> {"dtype", "shape", "tfrecord", "encoding"}
    splits: dict[str, dict[str, Any]]           # split -> {"rows", "parquet", "tfrecord", "shards"}
    counts: dict[str, int] = field(default_factory=dict)
    options: dict[str, Any] = field(default_factory=dict)
    default_fields: list[str] | None = None     # what a reader yields when not told
    label_field: str | None = None
    labels: list[str] | None = None             # class names (images, categorical table labels)
    rejected_reasons: dict[str, int] | None = None
    skipped_reasons: dict[str, int] | None = None
    source_uri: str | None = None               # predictions: the dataset they were made from
    model: dict[str, Any] | None = None         # predictions: the model version that made them
    seconds: float | None = None
    created: str = field(default_factory=ds.now)
    format_version: int = ds.FORMAT_VERSION
    extra: dict[str, Any] = field(default_factory=dict)   # keys written by a newer hopsml

    def default_field_names(self) -> list[str]:
        return list(self.default_fields or self.fields)

    def rows(self, split: str) -> int | None:
        """The rows the job wrote to `split`, None when the manifest does not say."""
        rows = self.splits.get(split, {}).get("rows")
        return int(rows) if isinstance(rows, int) else None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key in _ORDER:
            value = getattr(self, key)
            if value is None and (key in _OPTIONAL or (key == "labels" and self.kind == PREDICTIONS)):
                continue   # predictions have no class names, and never wrote the key
            out[key] = value
        out.update(self.extra)
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any], where: str = "dataset.json") -> Manifest:
        """The manifest in `data`; DatasetError naming `where` when it lacks what readers need."""
        if not isinstance(data, Mapping):
            raise ds.DatasetError(f"{where} is not a JSON object; prepare the dataset again")
        missing = [key for key in ("fields", "splits") if not isinstance(data.get(key), Mapping)]
        if missing:
            raise ds.DatasetError(f"{where} has no {' and no '.join(missing)} object; it was not written by "
                                  "hopsml's data jobs, or it was cut short: prepare the dataset again")
        known = {f.name for f in dataclasses.fields(cls)} - {"extra"}
        values = {key: data[key] for key in known if key in data}
        values.setdefault("kind", "")
        values.setdefault("name", "")
        values.setdefault("source", None)
        return cls(**values, extra={k: v for k, v in data.items() if k not in known})

    def write(self, storage: Storage, rel: str) -> None:
        storage.write_json(rel, self.to_json())

    @classmethod
    def read(cls, storage: Storage, rel: str) -> Manifest:
        return cls.from_json(read_record(storage, rel, ds.MANIFEST_SHAPE), storage.uri(rel))


def open_manifest(storage: Storage, project: str, name: str) -> tuple[ds.DatasetDir, Manifest]:
    """The folder and manifest of a finished dataset (`dataset.open_dataset`, read as a Manifest)."""
    ddir, data = ds.open_dataset(storage, project, name)
    return ddir, Manifest.from_json(data, storage.uri(ddir.manifest))
