"""Fixed-shape ndarrays in Parquet cells that petastorm reads cell by cell and hopsml reads in batches.

petastorm's ``NdarrayCodec`` stores each cell as ``np.save`` output: a ``.npy`` header and the raw
C-order bytes. For one shape and dtype the header is always the same bytes, so every cell has the
same size, and a whole Parquet column is one contiguous buffer of equal cells. The writer builds
the cell as header + raw bytes (the same bytes ``np.save`` writes, without its per-cell cost);
``petastorm.make_reader`` decodes it with its own codec, and :func:`decode_column` turns a column
into one ``(N, *shape)`` array with a single strided view. Importable without pyspark.
"""

from __future__ import annotations

import io
from functools import lru_cache
from typing import Any

import numpy as np

from hopsml.errors import HopsmlError


class ShapeMismatchError(HopsmlError, ValueError):
    """A column's cells do not hold arrays of the shape and dtype its dataset declares."""


@lru_cache(maxsize=64)
def npy_header(shape: tuple[int, ...], dtype: str = "uint8") -> bytes:
    """The ``.npy`` header ``np.save`` writes for a C-order array of ``shape`` and ``dtype``.

    >>> len(npy_header((2, 2, 3)))
    128
    """
    out = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        out, {"descr": np.lib.format.dtype_to_descr(np.dtype(dtype)), "fortran_order": False,
              "shape": tuple(int(v) for v in shape)})
    return out.getvalue()


def encode_cell(array: np.ndarray) -> bytes:
    """``np.save`` bytes of ``array`` (as petastorm's NdarrayCodec writes them), built in one join.

    >>> a = np.arange(6, dtype=np.uint8).reshape(2, 3)
    >>> buf = io.BytesIO(); np.save(buf, a); buf.getvalue() == encode_cell(a)
    True
    """
    array = np.ascontiguousarray(array)
    return npy_header(array.shape, array.dtype.str) + array.tobytes()


def decode_column(column: Any, shape: tuple[int, ...], dtype: Any = np.uint8) -> np.ndarray:
    """Turn a pyarrow binary column of equal ``np.save`` cells into one (N, *shape) array view.

    Raises ShapeMismatchError when a cell has another size than ``shape`` and ``dtype`` give.
    """
    import pyarrow as pa

    array = column
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks() if array.num_chunks != 1 else array.chunk(0)
    if pa.types.is_large_binary(array.type):
        offset_type = np.dtype(np.int64)
    elif pa.types.is_binary(array.type):
        offset_type = np.dtype(np.int32)
    else:
        raise ShapeMismatchError(f"expected a binary column of arrays, got {array.type}")
    dtype = np.dtype(dtype)
    shape = tuple(int(v) for v in shape)
    header = npy_header(shape, dtype.str)
    cell = len(header) + int(np.prod(shape)) * dtype.itemsize
    count = len(array)
    if count == 0:
        return np.empty((0, *shape), dtype=dtype)
    if array.null_count:
        raise ShapeMismatchError("the column holds null cells; every row needs an array")
    _, offsets_buf, data_buf = array.buffers()
    offsets = np.frombuffer(offsets_buf, dtype=offset_type, count=count + 1,
                            offset=array.offset * offset_type.itemsize)
    start, end = int(offsets[0]), int(offsets[-1])
    if end - start != cell * count or (count > 1 and offsets[1] - offsets[0] != cell) or \
            (count > 2 and not np.all(np.diff(offsets) == cell)):
        raise ShapeMismatchError(f"cells are not all {cell} bytes ({dtype} arrays of shape {shape}); "
                                 "the column was written with another shape or codec")
    cells = np.frombuffer(data_buf, dtype=np.uint8, count=end - start, offset=start).reshape(count, cell)
    if bytes(cells[0, :len(header)]) != header:
        raise ShapeMismatchError(f"cells do not start with the .npy header of {dtype} {shape}")
    return cells[:, len(header):].view(dtype).reshape((count, *shape))
