"""Batch encoding of tf.train.Example records and their TFRecord framing: the same bytes as the
record-by-record path, checked against it and against protobuf."""

from __future__ import annotations

import io

import numpy as np
import pytest

from hopsml.formats import FeatureTypeError, TFRecordWriter, decode_example, encode_example, read_records
from hopsml.formats.example import encode_examples


def rows_of(columns, n):
    return [{name: values[i] for name, values in columns.items()} for i in range(n)]


def one_by_one(columns, n):
    """What the record-by-record path writes for each row (a float scalar as a Python float)."""
    return [encode_example({name: (value if isinstance(value, np.ndarray) else value.item())
                            for name, value in row.items()}) for row in rows_of(columns, n)]


def split(data, offsets):
    return [data[offsets[i]:offsets[i + 1]].tobytes() for i in range(len(offsets) - 1)]


@pytest.mark.parametrize("n", [0, 1, 7, 300])
def test_a_batch_encodes_as_each_row_does(n):
    rng = np.random.default_rng(n)
    columns = {
        "x": rng.normal(size=n),                                          # float64 -> float_list
        "count": rng.integers(-2**62, 2**62, n) >> rng.integers(0, 62, n),  # varints of 1 to 10 bytes
        "small": rng.integers(-3, 200, n).astype(np.int32),
        "flag": rng.random(n) < 0.5,
        "größe (cm)": rng.normal(size=n).astype(np.float32),
        "features": rng.normal(size=(n, 40)).astype(np.float32),        # lengths past one varint byte
        "k" * 200: np.arange(n, dtype=np.int64),                          # a key longer than 127 bytes
    }
    data, offsets = encode_examples(columns)
    assert offsets.shape == (n + 1,) and offsets[0] == 0 and offsets[-1] == data.size
    assert split(data, offsets) == one_by_one(columns, n)


def test_an_empty_vector_and_no_columns_encode_as_each_row_does():
    columns = {"features": np.zeros((3, 0), dtype=np.float32), "label": np.array([0, 1, 2])}
    data, offsets = encode_examples(columns)
    assert split(data, offsets) == one_by_one(columns, 3)
    assert decode_example(split(data, offsets)[2]) ["label"].tolist() == [2]


def test_values_round_trip_through_protobuf():
    columns = {"a": np.array([1.5, -2.25]), "b": np.array([-1, 2**40]), "v": np.array([[1, 2], [3, 4]], np.float32)}
    data, offsets = encode_examples(columns)
    decoded = [decode_example(record) for record in split(data, offsets)]
    assert [d["b"].tolist() for d in decoded] == [[-1], [2**40]]
    assert [d["a"].tolist() for d in decoded] == [[1.5], [-2.25]]
    assert [d["v"].tolist() for d in decoded] == [[1, 2], [3, 4]]


def test_a_column_of_text_is_refused_with_what_to_do():
    with pytest.raises(FeatureTypeError, match="encode_example"):
        encode_examples({"name": np.array(["a", "b"])})


@pytest.mark.parametrize("compression", [None, "gzip"])
@pytest.mark.parametrize("sizes", [(0, 1, 5, 5, 300, 70000, 3),   # far apart: each byte placed
                                   (90, 91, 90, 130, 2),           # close: rows padded to the longest
                                   (40,) * 9])                     # one length: a table's rows
def test_write_batch_frames_as_write_does(compression, sizes):
    rng = np.random.default_rng(1)
    records = [rng.integers(0, 256, size, dtype=np.uint8).tobytes() for size in sizes]
    data = np.frombuffer(b"".join(records), dtype=np.uint8)
    offsets = np.concatenate([[0], np.cumsum([len(r) for r in records])])
    one, batch = io.BytesIO(), io.BytesIO()
    with TFRecordWriter(one, compression) as writer:
        for record in records:
            writer.write(record)
    with TFRecordWriter(batch, compression) as writer:
        writer.write(b"before")
        writer.write_batch(data, offsets)
        writer.write_batch(data[5:], offsets[3:] - 5)   # offsets need not start at 0 of the array
        assert writer.records_written == 1 + len(records) + len(records) - 3
    assert list(read_records(io.BytesIO(batch.getvalue()), compression)) == [b"before"] + records + records[3:]
    if compression is None:
        framed = one.getvalue()
        assert batch.getvalue()[16 + 6:16 + 6 + len(framed)] == framed
