"""tf.train.Example messages, byte-compatible with TensorFlow, without it.

Examples are encoded by writing the protobuf wire format directly: every nested length is
computed first and the message is joined once, so a large bytes feature is copied exactly once.
Decoding goes through protobuf (:mod:`hopsml.formats.example_proto`), which also accepts the
unpacked encodings that other producers may write.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from google.protobuf.message import DecodeError

from hopsml.errors import HopsmlError
from hopsml.formats.example_proto import Example
from hopsml.formats.tfrecord import CorruptRecordError
from hopsml.formats.wire import varint, varint_matrix, varints

__all__ = ["FeatureTypeError", "decode_example", "encode_example", "encode_examples"]


class FeatureTypeError(HopsmlError, TypeError):
    """A feature value cannot be expressed as a bytes, float or int64 list."""

    def __init__(self, name: str, value: object, problem: str = "") -> None:
        problem = problem or (f"a value of type {type(value).__name__} is not bytes, str, int or "
                              "float (or a list/array of one kind of them); convert it, e.g. "
                              "serialize it to bytes or make it a numpy array")
        super().__init__(f"feature {name!r} cannot be encoded: {problem}")
        self.feature = name


_BYTES_LIST, _FLOAT_LIST, _INT64_LIST = 1, 2, 3
_NUMPY_KINDS = {"b": _INT64_LIST, "i": _INT64_LIST, "u": _INT64_LIST, "f": _FLOAT_LIST,
                "S": _BYTES_LIST, "U": _BYTES_LIST, "O": None}


def _as_bytes(value: object, name: str) -> bytes:
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, (bytearray, memoryview, np.bytes_)):
        return bytes(value)
    raise FeatureTypeError(name, value)


def _feature_payload(name: str, value: object) -> tuple[int, list[Any], int]:
    """Return (kind, pieces of the list message, its length) for one feature value."""
    if isinstance(value, (bytes, str, bytearray, memoryview)):
        value = [value]
    elif isinstance(value, (bool, int, float, np.generic)):
        value = np.asarray([value])
    if isinstance(value, np.ndarray):
        kind = _NUMPY_KINDS.get(value.dtype.kind)
        if kind is None and value.dtype.kind != "O":
            raise FeatureTypeError(name, value)
        if kind is None:
            value = value.ravel().tolist()
        else:
            return _array_payload(kind, value.ravel(), name)
    if not isinstance(value, (list, tuple)):
        if isinstance(value, Mapping) or not hasattr(value, "__iter__"):
            raise FeatureTypeError(name, value)
        value = list(value)
    if not value:
        return 0, [], 0
    if all(isinstance(v, (bytes, str, bytearray, memoryview, np.bytes_, np.str_))
           for v in value):
        pieces: list[Any] = []
        total = 0
        for item in value:
            data = _as_bytes(item, name)
            prefix = b"\x0a" + varint(len(data))
            pieces += (prefix, data)
            total += len(prefix) + len(data)
        return _BYTES_LIST, pieces, total
    if all(isinstance(v, (int, np.integer)) for v in value):  # bool is an int
        return _array_payload(_INT64_LIST, np.asarray(value, dtype=np.int64), name)
    if all(isinstance(v, (int, float, np.integer, np.floating)) for v in value):
        return _array_payload(_FLOAT_LIST, np.asarray(value, dtype=np.float32), name)
    bad = next(v for v in value if not isinstance(v, (int, float, np.integer, np.floating)))
    raise FeatureTypeError(name, bad)


def _array_payload(kind: int, array: np.ndarray, name: str) -> tuple[int, list[Any], int]:
    if kind == _BYTES_LIST:
        return _feature_payload(name, [v.encode("utf-8") if isinstance(v, str) else bytes(v)
                                     for v in array.tolist()])
    if array.size == 0:
        return kind, [], 0
    if kind == _FLOAT_LIST:
        packed: Any = np.ascontiguousarray(array, dtype="<f4").tobytes()
    else:
        if array.dtype.kind == "u" and array.size and array.max() > np.iinfo(np.int64).max:
            raise FeatureTypeError(name, array, "an unsigned value above 2**63 - 1 does not fit "
                                   "in int64; store it as bytes")
        packed = varints(array)
    prefix = b"\x0a" + varint(len(packed))
    return kind, [prefix, packed], len(prefix) + len(packed)


def encode_example(features: Mapping[str, Any]) -> bytes:
    """Serialize ``{name: value}`` as a ``tf.train.Example``.

    bytes/str values (or lists of them) become a bytes_list, ints and integer arrays an
    int64_list, floats and float arrays a float_list (float32, packed); arrays of any shape are
    flattened. A list mixing ints and floats becomes a float_list. An empty python list gives a
    Feature without a kind; pass an empty numpy array of the wanted dtype to fix its kind.
    """
    entries: list[Any] = []
    features_length = 0
    for name, value in features.items():
        if not isinstance(name, str):
            raise FeatureTypeError(repr(name), name)
        kind, pieces, list_length = _feature_payload(name, value)
        if kind:
            list_header = bytes((kind << 3 | 2,)) + varint(list_length)
            feature_length = len(list_header) + list_length
        else:
            list_header, feature_length = b"", 0
        key = name.encode("utf-8")
        key_field = b"\x0a" + varint(len(key)) + key
        value_header = b"\x12" + varint(feature_length)
        entry_length = len(key_field) + len(value_header) + feature_length
        entry_header = b"\x0a" + varint(entry_length)
        entries += (entry_header, key_field, value_header, list_header)
        entries += pieces
        features_length += len(entry_header) + entry_length
    return b"".join([b"\x0a", varint(features_length), *entries])


def encode_examples(columns: Mapping[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Serialize a batch of rows as ``tf.train.Example`` records at once, with numpy instead of a
    Python loop per row: the same bytes as :func:`encode_example` gives each row's dict.

    ``columns`` maps each feature name to its values, one per row: a 1-D array of ints or bools
    (an int64_list) or floats (a float_list), or a 2-D float array (a float_list of one row's
    values). Returns the records concatenated (uint8) and their ``n + 1`` offsets into it.
    """
    blocks: list[tuple[np.ndarray, np.ndarray | None]] = []   # (bytes [n, width], used bytes or all)
    rows = -1
    total = None
    for name, values in columns.items():
        if not isinstance(name, str):
            raise FeatureTypeError(repr(name), name)
        array = np.asarray(values)
        rows = array.shape[0] if rows < 0 else rows
        if array.shape[0] != rows or array.ndim not in (1, 2):
            raise FeatureTypeError(name, values, f"a batch column must have one value (or one 1-D row) "
                                   f"per row; this one has shape {array.shape} for {rows} rows")
        kind = _NUMPY_KINDS.get(array.dtype.kind)
        if kind not in (_FLOAT_LIST, _INT64_LIST):
            raise FeatureTypeError(name, values, "a batch column must hold ints, bools or floats; "
                                   "encode other values row by row with encode_example")
        payload: tuple[np.ndarray, np.ndarray | None]
        if kind == _FLOAT_LIST:
            packed = np.ascontiguousarray(array.reshape(rows, array[0].size if rows else 1),
                                          dtype="<f4").view(np.uint8)
            payload = (packed, None)
            payload_length = np.full(rows, packed.shape[1], dtype=np.int64)
        else:
            if array.ndim != 1:
                raise FeatureTypeError(name, values, "a batch int64 column holds one value per row")
            if array.dtype.kind == "u" and array.size and array.max() > np.iinfo(np.int64).max:
                raise FeatureTypeError(name, array, "an unsigned value above 2**63 - 1 does not fit "
                                       "in int64; store it as bytes")
            payload = varint_matrix(array.astype(np.int64, copy=False))
            payload_length = payload[1]
        empty = kind == _FLOAT_LIST and payload[0].shape[1] == 0
        list_length = payload_length + (0 if empty else 1 + _varint_size(payload_length))
        list_length_bytes = _varint_block(list_length)
        feature_length = 1 + list_length_bytes[1] + list_length
        key = name.encode("utf-8")
        key_field = np.frombuffer(b"\x0a" + varint(len(key)) + key, dtype=np.uint8)
        value_length = _varint_block(feature_length)
        entry_length = key_field.size + 1 + value_length[1] + feature_length
        entry_bytes = _varint_block(entry_length)
        blocks += [(_constant(b"\x0a", rows), None), entry_bytes,
                   (np.broadcast_to(key_field, (rows, key_field.size)), None),
                   (_constant(b"\x12", rows), None), value_length, (_constant(bytes((kind << 3 | 2,)), rows), None),
                   list_length_bytes]
        if not empty:
            blocks += [(_constant(b"\x0a", rows), None), _varint_block(payload_length), payload]
        length = 1 + entry_bytes[1] + entry_length
        total = length if total is None else total + length
    rows = max(rows, 0)
    features_length = total if total is not None else np.zeros(rows, dtype=np.int64)
    blocks = [(_constant(b"\x0a", rows), None), _varint_block(features_length)] + blocks
    blocks = [_fixed_width(block, sizes) for block, sizes in blocks]
    if all(sizes is None for _, sizes in blocks):   # every record as long as the others: no mask
        return _fixed_records([block for block, _ in blocks], rows)
    matrix = np.concatenate([block for block, _ in blocks], axis=1)
    used = np.concatenate([np.ones(block.shape, dtype=bool) if sizes is None else
                           np.arange(block.shape[1]) < sizes[:, None] for block, sizes in blocks], axis=1)
    lengths = used.sum(axis=1)
    offsets = np.zeros(rows + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return matrix[used], offsets


def _fixed_records(blocks: list[np.ndarray], rows: int) -> tuple[np.ndarray, np.ndarray]:
    """Records of one length, from blocks of fixed width: runs of blocks that are the same in every
    row (tags, names, lengths) are joined into one before they are copied into each row."""
    runs: list[np.ndarray] = []
    for block in blocks:
        if runs and block.strides[0] == 0 and runs[-1].strides[0] == 0:
            runs[-1] = _constant(runs[-1][0].tobytes() + block[0].tobytes(), rows) if rows else runs[-1]
        else:
            runs.append(block)
    width = sum(block.shape[1] for block in runs)
    matrix = np.empty((rows, width), dtype=np.uint8)
    at = 0
    for block in runs:
        matrix[:, at:at + block.shape[1]] = block
        at += block.shape[1]
    return matrix.reshape(-1), np.arange(rows + 1, dtype=np.int64) * width


def _varint_block(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`varint_matrix`, as one row broadcast to every row when all values are equal (the
    lengths of fixed-size features)."""
    if values.size and values.min() == values.max():
        encoded = varint(int(np.asarray(values[:1], dtype=np.int64).view(np.uint64)[0]))
        return _constant(encoded, values.size), np.broadcast_to(np.int64(len(encoded)), values.shape)
    return varint_matrix(values)


def _fixed_width(block: np.ndarray, sizes: np.ndarray | None) -> tuple[np.ndarray, np.ndarray | None]:
    """A varint block whose values all take the same number of bytes (the usual case: lengths of
    fixed-size lists, small labels) as a block of that width, needing no mask."""
    if sizes is None or not sizes.size or sizes.min() != sizes.max():
        return block, sizes
    return block[:, :int(sizes[0])], None


def _constant(data: bytes, rows: int) -> np.ndarray:
    return np.broadcast_to(np.frombuffer(data, dtype=np.uint8), (rows, len(data)))


def _varint_size(values: np.ndarray) -> np.ndarray:
    return varint_matrix(values)[1]


def decode_example(data: bytes) -> dict[str, Any]:
    """Parse a serialized ``tf.train.Example`` into ``{name: value}``.

    bytes_list features come back as a list of bytes, float_list as a float32 numpy array,
    int64_list as an int64 numpy array, and a Feature without a kind as an empty list.
    """
    try:
        message = Example.FromString(data)
    except DecodeError as error:
        raise CorruptRecordError(f"record is not a serialized tf.train.Example ({error}); "
                                 "check that the file holds Examples and not raw bytes") from None
    result: dict[str, Any] = {}
    for name, feature in message.features.feature.items():
        kind = feature.WhichOneof("kind")
        if kind == "bytes_list":
            result[name] = list(feature.bytes_list.value)
        elif kind == "float_list":
            result[name] = np.array(feature.float_list.value, dtype=np.float32)
        elif kind == "int64_list":
            result[name] = np.array(feature.int64_list.value, dtype=np.int64)
        else:
            result[name] = []
    return result
