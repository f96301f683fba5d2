"""Spark's ``xxhash64`` of a row's typed values, in numpy: the hash that splits and shards a table's rows
(see :func:`hopsml.data.tables.typed.row_hash_column`), so a table prepared without Spark puts every row in
the split and shard Spark would. Long and boolean values hash as 64-bit integers, doubles by their bits (-0.0
as 0.0), strings by their UTF-8 bytes, the seed as a 32-bit integer; a missing value leaves the hash as it is.

>>> import numpy as np
>>> int(row_hashes([], 0, 1)[0])   # Spark: SELECT xxhash64(0)
3614696996920510707
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

_P1 = np.uint64(0x9E3779B185EBCA87)
_P2 = np.uint64(0xC2B2AE3D27D4EB4F)
_P3 = np.uint64(0x165667B19E3779F9)
_P4 = np.uint64(0x85EBCA77C2B2AE63)
_P5 = np.uint64(0x27D4EB2F165667C5)
SEED = 42   # Spark's xxhash64 starts from it


def _rotl(x: np.ndarray, r: int) -> np.ndarray:
    return (x << np.uint64(r)) | (x >> np.uint64(64 - r))


def _fmix(h: np.ndarray) -> np.ndarray:
    h = h ^ (h >> np.uint64(33))
    h = h * _P2
    h = h ^ (h >> np.uint64(29))
    h = h * _P3
    return h ^ (h >> np.uint64(32))


def hash_ints(values: np.ndarray, seeds: np.ndarray) -> np.ndarray:
    """XXH64.hashInt of int32 ``values`` (as uint64 hashes) with per-row ``seeds`` (uint64)."""
    with np.errstate(over="ignore"):
        h = seeds + _P5 + np.uint64(4)
        h = h ^ ((values.astype(np.int64).astype(np.uint64) & np.uint64(0xFFFFFFFF)) * _P1)
        h = _rotl(h, 23) * _P2 + _P3
        return _fmix(h)


def hash_longs(values: np.ndarray, seeds: np.ndarray) -> np.ndarray:
    """XXH64.hashLong of int64 ``values`` with per-row ``seeds``."""
    with np.errstate(over="ignore"):
        h = seeds + _P5 + np.uint64(8)
        h = h ^ (_rotl(values.astype(np.int64).view(np.uint64) * _P2, 31) * _P1)
        h = _rotl(h, 27) * _P1 + _P4
        return _fmix(h)


def hash_doubles(values: np.ndarray, seeds: np.ndarray) -> np.ndarray:
    """A double hashes as the long of its bits, -0.0 as 0.0 (Spark normalizes it)."""
    normal = np.where(values == 0.0, 0.0, values).astype(np.float64)
    return hash_longs(normal.view(np.int64), seeds)


def _hash_bytes_same_length(data: np.ndarray, seeds: np.ndarray) -> np.ndarray:
    """XXH64.hashUnsafeBytes of rows of ``data`` (uint8, one row per value, all of one length)."""
    count, length = data.shape
    words = data[:, : length // 8 * 8].copy().view("<u8") if length >= 8 else np.empty((count, 0), np.uint64)
    with np.errstate(over="ignore"):
        at = 0
        if length >= 32:
            v1, v2, v3, v4 = seeds + _P1 + _P2, seeds + _P2, seeds.copy(), seeds - _P1
            while at * 8 <= length - 32:
                v1 = _rotl(v1 + words[:, at] * _P2, 31) * _P1
                v2 = _rotl(v2 + words[:, at + 1] * _P2, 31) * _P1
                v3 = _rotl(v3 + words[:, at + 2] * _P2, 31) * _P1
                v4 = _rotl(v4 + words[:, at + 3] * _P2, 31) * _P1
                at += 4
            h = _rotl(v1, 1) + _rotl(v2, 7) + _rotl(v3, 12) + _rotl(v4, 18)
            for v in (v1, v2, v3, v4):
                h = (h ^ (_rotl(v * _P2, 31) * _P1)) * _P1 + _P4
        else:
            h = seeds + _P5
        h = h + np.uint64(length)
        while at * 8 <= length - 8:
            h = h ^ (_rotl(words[:, at] * _P2, 31) * _P1)
            h = _rotl(h, 27) * _P1 + _P4
            at += 1
        offset = at * 8
        if offset + 4 <= length:
            word = data[:, offset:offset + 4].copy().view("<u4")[:, 0].astype(np.uint64)
            h = h ^ (word * _P1)
            h = _rotl(h, 23) * _P2 + _P3
            offset += 4
        while offset < length:
            h = h ^ (data[:, offset].astype(np.uint64) * _P5)
            h = _rotl(h, 11) * _P1
            offset += 1
        return _fmix(h)


def hash_strings(values: Sequence[str], seeds: np.ndarray) -> np.ndarray:
    """XXH64.hashUnsafeBytes of each string's UTF-8 bytes, the strings of one length hashed together."""
    encoded = [value.encode("utf-8") for value in values]
    lengths = np.fromiter((len(b) for b in encoded), np.int64, len(encoded))
    out = np.empty(len(encoded), np.uint64)
    for length in np.unique(lengths):
        rows = np.flatnonzero(lengths == length)
        data = np.frombuffer(b"".join(encoded[i] for i in rows), np.uint8).reshape(len(rows), int(length))
        out[rows] = _hash_bytes_same_length(data, seeds[rows])
    return out


def row_hashes(columns: Sequence[tuple[str, np.ndarray, np.ndarray]], seed: int, rows: int) -> np.ndarray:
    """``xxhash64(seed, c1, c2, ...)`` as Spark computes it, int64 per row. ``columns``: (kind, values,
    present) with kind 'long', 'double' or 'string' (values an object array of str)."""
    first = hash_ints if -(1 << 31) <= seed < (1 << 31) else hash_longs   # Spark's literal: int, else long
    h = first(np.full(rows, seed, np.int64), np.full(rows, SEED, np.uint64))
    for kind, values, present in columns:
        rows_present = np.flatnonzero(present)
        if not rows_present.size:
            continue
        seeds = h[rows_present]
        if kind == "string":
            h[rows_present] = hash_strings([values[i] for i in rows_present], seeds)
        elif kind == "double":
            h[rows_present] = hash_doubles(np.asarray(values, np.float64)[rows_present], seeds)
        else:
            h[rows_present] = hash_longs(np.asarray(values, np.int64)[rows_present], seeds)
    return h.view(np.int64)
