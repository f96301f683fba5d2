"""tf.train.Example records of an image row, built from a template per shape: the fixed parts encoded once."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from hopsml.formats.example import encode_example

if TYPE_CHECKING:
    pass


def _varint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _bytes_entry(key: bytes, value: bytes) -> list[bytes]:
    """The pieces of one map entry ``key -> Feature(bytes_list=[value])`` of tf.train.Features."""
    key_field = b"\x0a" + _varint(len(key)) + key
    bytes_list = b"\x0a" + _varint(len(value))
    feature_header = b"\x0a" + _varint(len(bytes_list) + len(value))
    feature_length = len(feature_header) + len(bytes_list) + len(value)
    value_header = b"\x12" + _varint(feature_length)
    entry_length = len(key_field) + len(value_header) + feature_length
    return [b"\x0a" + _varint(entry_length) + key_field + value_header + feature_header + bytes_list, value]


def _entries(features: dict[str, Any]) -> bytes:
    """The map entries of ``features`` as encode_example serializes them, without the Features header."""
    record = encode_example(features)
    return record[len(record) - _features_length(record):]


def _features_length(record: bytes) -> int:
    """The length of the Features message in a serialized Example (the bytes after its header)."""
    length, shift, at = 0, 0, 1
    while True:
        byte = record[at]
        length |= (byte & 0x7F) << shift
        at += 1
        if byte < 0x80:
            return length
        shift += 7


class ExampleTemplate:
    """tf.train.Example records of the image job, the same bytes as encode_example gives them:
    the fields that are the same for every image (size, format) or every label are serialized
    once, and only the encoded image and the file name per record (5x cheaper per image)."""

    def __init__(self, height: int, width: int, channels: int, fmt: bytes, index: dict[str, int]) -> None:
        self.fixed = _entries({"image/height": height, "image/width": width,
                               "image/channels": channels, "image/format": fmt})
        self.labels = {text: _entries({"image/class/label": label, "image/class/text": text.encode()})
                       for text, label in index.items()}

    def encode(self, encoded: bytes, text: str, path: str) -> bytes:
        pieces = _bytes_entry(b"image/encoded", encoded)
        pieces += [self.fixed, self.labels[text]]
        pieces += _bytes_entry(b"image/filename", path.encode())
        length = sum(len(piece) for piece in pieces)
        return b"".join([b"\x0a", _varint(length), *pieces])
