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
from hopsml.formats.wire import varint, varints

__all__ = ["FeatureTypeError", "decode_example", "encode_example"]


class FeatureTypeError(HopsmlError, TypeError):
    """A feature value cannot be expressed as a bytes, float or int64 list."""

    def __init__(self, name: str, value: Any, problem: str = "") -> None:
        problem = problem or (f"a value of type {type(value).__name__} is not bytes, str, int or "
                              "float (or a list/array of one kind of them); convert it, e.g. "
                              "serialize it to bytes or make it a numpy array")
        super().__init__(f"feature {name!r} cannot be encoded: {problem}")
        self.feature = name


_BYTES_LIST, _FLOAT_LIST, _INT64_LIST = 1, 2, 3
_NUMPY_KINDS = {"b": _INT64_LIST, "i": _INT64_LIST, "u": _INT64_LIST, "f": _FLOAT_LIST,
                "S": _BYTES_LIST, "U": _BYTES_LIST, "O": None}


def _as_bytes(value: Any, name: str) -> bytes:
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, (bytearray, memoryview, np.bytes_)):
        return bytes(value)
    raise FeatureTypeError(name, value)


def _feature_payload(name: str, value: Any) -> tuple[int, list[Any], int]:
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
