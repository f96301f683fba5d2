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
from typing import TYPE_CHECKING, Any

import numpy as np

from hopsml.errors import HopsmlError

if TYPE_CHECKING:
    import numpy.typing as npt
    import pyarrow as pa


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


class CellColumn:
    """A column of equal ``np.save`` cells, written into one preallocated buffer and handed to
    Arrow without a copy: no bytes object per row and no copy into an Arrow array, which saves
    about a tenth of a millisecond per 180x180 image.

    >>> column = CellColumn((2, 3), capacity=1)
    >>> for i in range(3):
    ...     column.append(np.full((2, 3), i, np.uint8))
    >>> cells = column.take()
    >>> cells[2].as_py() == encode_cell(np.full((2, 3), 2, np.uint8)), len(column)
    (True, 0)
    """

    def __init__(self, shape: tuple[int, ...], dtype: npt.DTypeLike = np.uint8, capacity: int = 1024) -> None:
        self.shape, self.dtype = tuple(int(v) for v in shape), np.dtype(dtype)
        self._header = np.frombuffer(npy_header(self.shape, self.dtype.str), np.uint8)
        self.cell = len(self._header) + int(np.prod(self.shape)) * self.dtype.itemsize
        self.capacity = max(1, int(capacity))
        self._rows: np.ndarray | None = None   # allocated on the first append
        self._count = 0

    def __len__(self) -> int:
        return self._count

    def append(self, array: np.ndarray) -> None:
        array = np.asarray(array)
        if array.shape != self.shape or array.dtype != self.dtype:
            raise ShapeMismatchError(f"expected a {self.dtype} array of shape {self.shape}, "
                                     f"got {array.dtype} {array.shape}")
        if self._rows is None:
            self._rows = np.empty((self.capacity, self.cell), np.uint8)
        elif self._count == len(self._rows):
            self._rows = np.concatenate([self._rows, np.empty_like(self._rows)])
        row = self._rows[self._count]
        row[:len(self._header)] = self._header
        row[len(self._header):] = array.reshape(-1).view(np.uint8)
        self._count += 1

    def take(self) -> Any:
        """The cells so far as a pyarrow binary array (sharing this buffer); the column is then empty."""
        import pyarrow as pa

        count = self._count
        if count * self.cell >= 2 ** 31:
            raise ShapeMismatchError(f"{count} cells of {self.cell} bytes overflow a binary column; "
                                     "take them in smaller groups")
        data = self._rows[:count] if self._rows is not None else np.empty(0, np.uint8)
        offsets = np.arange(count + 1, dtype=np.int32) * self.cell
        cells = pa.Array.from_buffers(pa.binary(), count, [None, pa.py_buffer(offsets), pa.py_buffer(data)])
        self._rows, self._count = None, 0   # the buffer now belongs to the Arrow array
        return cells


def decode_column(column: pa.Array | pa.ChunkedArray, shape: tuple[int, ...], dtype: npt.DTypeLike = np.uint8
                  ) -> np.ndarray:
    """Turn a pyarrow binary column of equal ``np.save`` cells into one (N, *shape) array view.

    Raises ShapeMismatchError when a cell has another size than ``shape`` and ``dtype`` give.
    """
    import pyarrow as pa

    array = column
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks() if array.num_chunks != 1 else array.chunk(0)
    offset_type: np.dtype[Any]
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
