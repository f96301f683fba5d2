"""A training dataset version written out as a prepared dataset (`Datasets/<view>_<version>_td<n>/`): Parquet
shards per split (with petastorm's metadata), TFRecord shards of its numeric columns, the manifest sealed with
its fingerprints, and statistics; so `hopsml.data.reader`, `experiment.allreduce`, TensorFlow and petastorm read
it exactly as they read a table `prepare_table` wrote. As there, the default fields are `features` (the
numeric feature columns side by side, float32) and `label`; every column is there on its own too."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from hopsml import layout
from hopsml.data import dataset as ds
from hopsml.data import shards as shard_io
from hopsml.data.manifest import Manifest
from hopsml.data.tables.writers import _write_examples
from hopsml.data.unischema import Field, unischema_pickle
from hopsml.errors import FeatureStoreError
from hopsml.featurestore import stats
from hopsml.fs import Storage

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa

ROWS_PER_SHARD = 250_000


def dataset_name(view: str, view_version: int, version: int) -> str:
    """The prepared dataset a feature view's training dataset version is written to.

    >>> dataset_name("fraud", 1, 3)
    'fraud_1_td3'
    """
    return f"{view}_{view_version}_td{version}"


def write(storage: Storage, project: str, name: str, splits: Mapping[str, pd.DataFrame], labels: Sequence[str],
          keys: Sequence[str], shards: int, source: str, overwrite: bool = False) -> Manifest:
    """Write `splits` (name -> frame of features and labels) as the prepared dataset `name`; `keys` (primary key
    and event time columns the frames kept) are columns, not part of the `features` vector."""
    tables, vectors = {}, []
    for split, frame in splits.items():
        tables[split], vector = _table(frame, labels, {*labels, *keys}, f"{source}, split {split!r}")
        vectors.append(vector)
    schema = next(iter(tables.values())).schema
    unischema = unischema_of(name, schema, len(vectors[0]))
    with ds.staged(storage, project, name, overwrite) as stage:
        written = {}
        for split, table in tables.items():
            count = max(1, min(shards, table.num_rows))
            written[split] = _write_split(storage, stage, split, table, count, unischema)
        return seal(storage, stage, name, source, schema, vectors[0], labels, shards,
                    {split: t.num_rows for split, t in tables.items()}, written, dataset_stats(tables))


def unischema_of(name: str, schema: pa.Schema, width: int) -> bytes:
    """The pickled petastorm Unischema of a training dataset's columns (`width`: the `features` vector's)."""
    fields = _fields(schema, width)
    return unischema_pickle(name, [Field(n, spec["dtype"], tuple(spec["shape"])) for n, spec in fields.items()])


def seal(storage: Storage, stage: ds.DatasetDir, name: str, source: str, schema: pa.Schema, features: Sequence[str],
         labels: Sequence[str], shards: int, rows: Mapping[str, int], written: Mapping[str, int],
         statistics: Mapping[str, Any]) -> Manifest:
    """The manifest and stats.json of a training dataset whose splits are written (`rows` and shard counts
    `written` per split), whichever engine wrote them."""
    fields = _fields(schema, len(features))
    manifest = Manifest(
        kind="training_dataset", name=name, source=source, fields=fields,
        default_fields=[f for f in ("features", "label") if f in fields],
        label_field="label" if "label" in fields else None,
        splits={split: {"rows": rows[split], "parquet": f"{layout.DATASET_PARQUET}/{split}",
                        "tfrecord": f"{layout.DATASET_TFRECORD}/{split}", "shards": count}
                for split, count in written.items()},
        counts={"read": sum(rows.values()), "written": sum(rows.values()), "rejected": 0},
        options={"labels": list(labels), "shards": shards, "features": list(features)})
    manifest.write(storage, stage.manifest)
    storage.write_json(stage.stats_json, dict(statistics))
    return manifest


def dataset_stats(tables: Mapping[str, pa.Table]) -> dict[str, Any]:
    """Statistics per split in the form prepare_table's stats.json has (per column, its splits), so `hopsml data
    stats`, the web view and `serving.monitor` read a training dataset as they read a prepared table."""
    per = {split: stats.of_table(table, stats.DEFAULT)["columns"] for split, table in tables.items()}
    return assembled_stats(per, next(iter(tables.values())).column_names, {s: t.num_rows for s, t in tables.items()})


def assembled_stats(per: Mapping[str, Mapping[str, Any]], column_names: Sequence[str], rows: Mapping[str, int]
                    ) -> dict[str, Any]:
    """stats.json from each split's per-column summaries (`per`: split -> column -> summary)."""
    first = next(iter(per.values()))
    names = [n for n in column_names if n in first]
    columns = [{"name": n, "type": first[n]["kind"],
                "splits": {split: computed[n] for split, computed in per.items() if n in computed}} for n in names]
    return {"kind": "table", "splits": list(per), "rows": dict(rows), "columns": columns}


def _table(frame: pd.DataFrame, labels: Sequence[str], outside: set[str], where: str
           ) -> tuple[pa.Table, list[str]]:
    """The frame as the dataset's columns, and the columns its `features` holds: each feature and label as it is
    (numbers, strings), times as epoch milliseconds; plus `features` (the numeric columns but those `outside`
    it, float32) and `label` (the one label)."""
    import numpy as np
    import pandas as pd
    import pyarrow as pa

    columns: dict[str, Any] = {}
    numeric: list[str] = []
    for name in frame.columns:
        values = frame[name]
        if pd.api.types.is_datetime64_any_dtype(values):   # epoch milliseconds, as Hopsworks takes event times
            if values.dt.tz is not None:
                values = values.dt.tz_convert("UTC").dt.tz_localize(None)
            values = values.astype("datetime64[ms]").astype("int64")
        elif pd.api.types.is_bool_dtype(values):
            values = values.astype(np.int32)
        if pd.api.types.is_numeric_dtype(values):
            columns[name] = pa.array(values.to_numpy(dtype=np.float64 if pd.api.types.is_float_dtype(values)
                                                     else np.int64), from_pandas=True)
            if name not in outside:
                numeric.append(name)
        else:
            columns[name] = pa.array(values.astype("string").to_numpy(dtype=object, na_value=None), pa.string())
    if numeric:
        matrix = np.column_stack([columns[n].to_numpy(zero_copy_only=False).astype(np.float32) for n in numeric]) \
            if len(frame) else np.zeros((0, len(numeric)), dtype=np.float32)
        offsets = pa.array(np.arange(len(frame) + 1, dtype=np.int32) * len(numeric))
        columns["features"] = pa.ListArray.from_arrays(offsets, pa.array(matrix.reshape(-1)))
    if len(labels) == 1 and labels[0] in columns and labels[0] != "label":
        columns["label"] = columns[labels[0]]
    if not columns:
        raise FeatureStoreError(f"{where}: nothing to write (no features and no labels)")
    return pa.table(columns), numeric


def _fields(schema: pa.Schema, width: int) -> dict[str, dict[str, Any]]:
    """The manifest's fields: `features` a float32 vector of `width`, numbers scalars (in TFRecord too), strings
    scalars in Parquet only (tf.train.Example gets numbers)."""
    import pyarrow as pa

    out: dict[str, dict[str, Any]] = {}
    for field in schema:
        if pa.types.is_list(field.type):
            out[field.name] = {"dtype": "float32", "shape": [width], "tfrecord": field.name}
        elif pa.types.is_string(field.type):
            out[field.name] = {"dtype": "str", "shape": []}
        else:
            out[field.name] = {"dtype": "float64" if pa.types.is_floating(field.type) else "int64", "shape": [],
                               "tfrecord": field.name}
    return out


def _write_split(storage: Storage, stage: ds.DatasetDir, split: str, table: pa.Table, count: int,
                 unischema: bytes) -> int:
    """`table` as `count` Parquet shards and as many TFRecord shards; returns the shard count."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    numeric = [n for n in table.column_names if not pa.types.is_string(table.schema.field(n).type)]
    row_groups = {}
    bounds = [table.num_rows * i // count for i in range(count + 1)]
    for index in range(count):
        part = table.slice(bounds[index], bounds[index + 1] - bounds[index])
        name = shard_io.part_name(index)
        with shard_io.atomic_output(storage, layout.join(stage.parquet(split), name)) as target:
            pq.write_table(part, target, compression="snappy")
        row_groups[name] = 1
        with shard_io.shard_writer(storage, stage.tfrecord(split), index, count, None) as records:
            _write_examples(records, part.select(numeric))
    shard_io.write_petastorm_metadata(storage, stage.parquet(split), table.schema, unischema, row_groups)
    return count
