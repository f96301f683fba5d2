"""The fitted transform applied to Arrow batches (scaling, category indices, one-hot, the features vector):
the part that the feature store's transformation functions share with the table prep."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Union

import numpy as np

if TYPE_CHECKING:
    import pyarrow as pa

# A column as Arrow's compute functions take it: one array, or a table's chunked column.
ArrowColumn = Union["pa.Array", "pa.ChunkedArray"]

_ARROW_TYPES = {"float64": "float64", "float32": "float32", "int32": "int32", "int64": "int64"}


@dataclass(frozen=True)
class Transform:
    """The fitted transform as the shard writers apply it to Arrow batches of typed rows, with Arrow's
    compute functions: each number as a double (standardized: ``(x - mean) / std``), each category as its
    train index (-1 for one the train split never saw, or missing) or one-hot floats, the label, and the
    ``features`` vector of float32. The same numbers Spark's casts give, in the same order as
    ``transform.json`` names them."""

    features: list[str]                                # the feature columns, in order
    label: str
    label_kind: str                                    # 'long', 'double' or 'index'
    one_hot: bool
    scale: dict[str, tuple[float, float] | None]       # numeric column -> (mean, std) when standardized
    categories: dict[str, list[str]]                   # categorical column (and label) -> train categories
    dtypes: dict[str, str]                             # output field -> dtype
    fills: dict[str, Any]                              # column -> the value its missing values take

    def inputs(self) -> list[str]:
        return [*self.features, self.label]

    def schema(self) -> pa.Schema:
        import pyarrow as pa

        return pa.schema([pa.field(name, pa.list_(pa.float32()) if name == "features" else
                                   pa.type_for_alias(_ARROW_TYPES[dtype])) for name, dtype in self.dtypes.items()])

    def _index(self, column: ArrowColumn, name: str) -> pa.Array:
        return category_index(column, self.categories.get(name, []))

    def __call__(self, batch: pa.RecordBatch) -> pa.Table:
        import pyarrow as pa
        import pyarrow.compute as pc

        out: dict[str, Any] = {}
        vectors = []
        for name in self.features:
            column = batch.column(name)
            if name in self.fills:
                column = pc.fill_null(column, pa.scalar(self.fills[name], type=column.type))
            if name in self.scale:
                scale = self.scale[name]
                value = scaled(column, *scale) if scale is not None else pc.cast(column, pa.float64(), safe=False)
                out[name] = value
                vectors.append(pc.cast(value, pa.float32(), safe=False))
            elif self.one_hot:
                for i, hot in enumerate(one_hot(self._index(column, name), len(self.categories[name]))):
                    out[f"{name}_{i}"] = hot
                    vectors.append(hot)
            else:
                out[name] = self._index(column, name)
                vectors.append(pc.cast(out[name], pa.float32()))
        label = batch.column(self.label)
        out["label"] = (self._index(label, self.label) if self.label_kind == "index" else
                        pc.cast(label, pa.int64() if self.label_kind == "long" else pa.float64(), safe=False))
        out["features"] = _vectors(vectors, batch.num_rows)
        return pa.Table.from_pydict(out, schema=self.schema())


def scaled(column: ArrowColumn, center: float, spread: float) -> ArrowColumn:
    """``(x - center) / spread`` as doubles: standardizing (mean, std), min-max (min, max - min), robust
    scaling (median, IQR)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    return pc.divide(pc.subtract(pc.cast(column, pa.float64(), safe=False), center), spread)


def category_index(column: ArrowColumn, categories: Sequence[Any], missing: int | None = -1) -> pa.Array:
    """Each value's index in ``categories`` (int32): -1 for one not there; a missing value gets ``missing``
    (-1 by default, None keeps it missing)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    known = pa.array(list(categories), type=column.type if len(categories) else None)
    if len(categories) and known.type != column.type:
        known = known.cast(column.type)
    index = pc.index_in(column, value_set=known) if len(categories) else pa.nulls(len(column), pa.int32())
    index = pc.if_else(pc.is_null(column), pa.scalar(None, pa.int32()), pc.fill_null(index, -1))
    if missing is not None:
        index = pc.fill_null(index, missing)
    return index.cast(pa.int32())


def one_hot(index: pa.Array, count: int) -> list[pa.Array]:
    """One float32 column per category: 1 where ``index`` (of category_index) is that category, else 0."""
    import pyarrow as pa
    import pyarrow.compute as pc

    return [pc.cast(pc.fill_null(pc.equal(index, i), False), pa.float32()) for i in range(count)]


def _vectors(columns: Sequence[Any], rows: int) -> Any:
    """One list<float32> value per row holding the ``columns`` (float32 Arrow arrays) side by side."""
    import pyarrow as pa

    if any(column.null_count for column in columns):   # a missing value stays missing in its vector
        values = [column.to_pylist() for column in columns]
        return pa.array([list(row) for row in zip(*values)] if values else [[]] * rows, pa.list_(pa.float32()))
    matrix = np.empty((rows, len(columns)), dtype=np.float32)
    for j, column in enumerate(columns):
        matrix[:, j] = column.to_numpy(zero_copy_only=False)
    offsets = pa.array(np.arange(rows + 1, dtype=np.int32) * len(columns))
    return pa.ListArray.from_arrays(offsets, pa.array(matrix.reshape(-1)))
