"""The protobuf wire format, written by hand for the few messages hopsml encodes itself.

Encoding directly (instead of building protobuf message objects) lets a large payload be copied
once; tf.train.Example and TensorBoard's Event use these pieces.

>>> varint(300).hex()
'ac02'
>>> field(1, b"a").hex()
'0a0161'
"""

from __future__ import annotations

import numpy as np

__all__ = ["field", "varint", "varint_matrix", "varints"]


def varint(value: int) -> bytes:
    """Encode a non-negative int below 2**64 as a protobuf varint."""
    if value < 0x80:
        return bytes((value,))
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


_VARINT_LIMITS = np.array([1 << (7 * k) for k in range(1, 10)], dtype=np.uint64)


def varints(values: np.ndarray) -> bytes:
    """Encode int64 values as concatenated varints (negatives take ten bytes, as protobuf does)."""
    unsigned = np.ascontiguousarray(values, dtype=np.int64).view(np.uint64)
    if unsigned.size < 16:
        return b"".join(varint(int(v)) for v in unsigned.tolist())
    sizes = 1 + np.searchsorted(_VARINT_LIMITS, unsigned, side="right").astype(np.int64)
    starts = np.concatenate(([0], np.cumsum(sizes)[:-1]))
    out = np.empty(int(sizes.sum()), dtype=np.uint8)
    shifted = unsigned.copy()
    for k in range(10):
        present = sizes > k
        if not present.any():
            break
        low = (shifted & np.uint64(0x7F)).astype(np.uint8)
        low[sizes > k + 1] |= 0x80
        out[starts[present] + k] = low[present]
        shifted >>= np.uint64(7)
    return out.tobytes()


def varint_matrix(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each int64 value's varint as one row of a byte matrix (as wide as the longest), with the
    number of bytes each one uses: a batch of records is put together from such blocks."""
    unsigned = np.ascontiguousarray(values, dtype=np.int64).view(np.uint64)
    sizes = 1 + np.searchsorted(_VARINT_LIMITS, unsigned, side="right").astype(np.int64)
    width = int(sizes.max()) if sizes.size else 1
    out = np.empty((unsigned.size, width), dtype=np.uint8)
    shifted = unsigned.copy()
    for k in range(width):
        low = (shifted & np.uint64(0x7F)).astype(np.uint8)
        low[sizes > k + 1] |= 0x80
        out[:, k] = low
        shifted >>= np.uint64(7)
    return out, sizes


def field(number: int, payload: bytes) -> bytes:
    """A length-delimited protobuf field (wire type 2): tag, length, payload."""
    return varint(number << 3 | 2) + varint(len(payload)) + payload
