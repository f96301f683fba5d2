"""TFRecord framing and tf.train.Example encoding, checked against protobuf and (if present) TF."""

from __future__ import annotations

import gzip
import io
import os
import struct
import zlib

import crc32c
import numpy as np
import pytest

from hopsml.errors import HopsmlError, SettingsError
from hopsml.formats import (
    CorruptRecordError,
    FeatureTypeError,
    TFRecordWriter,
    TruncatedRecordError,
    decode_example,
    encode_example,
    example_proto,
    masked_crc32c,
    read_records,
    shard_name,
)

SIZES = [0, 1, 100, 100 * 1024, 3 * 1024 * 1024 + 7]


def reference_masked_crc(data: bytes) -> int:
    """TensorFlow's crc32c::Mask, written out independently."""
    crc = crc32c.crc32c(data)
    rotated = ((crc >> 15) | (crc << 17)) & 0xFFFFFFFF
    return (rotated + 0xA282EAD8) % 2**32


def reference_frame(record: bytes) -> bytes:
    length = struct.pack("<Q", len(record))
    return (length + struct.pack("<I", reference_masked_crc(length)) + record
            + struct.pack("<I", reference_masked_crc(record)))


def payloads(sizes=SIZES, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 256, size, dtype=np.uint8).tobytes() for size in sizes]


def write_file(path, records, compression=None):
    with TFRecordWriter(path, compression) as writer:
        for record in records:
            writer.write(record)


# --- framing ---------------------------------------------------------------------------------

def test_masked_crc_known_values():
    # crc32c("123456789") = 0xE3069283, the standard check value
    assert crc32c.crc32c(b"123456789") == 0xE3069283
    for data in [b"", b"a", b"123456789", os.urandom(1000)]:
        assert masked_crc32c(data) == reference_masked_crc(data)
    assert masked_crc32c(b"") == 0xA282EAD8  # crc of nothing is 0


@pytest.mark.parametrize("size", SIZES)
def test_bytes_on_disk_are_tensorflow_framing(tmp_path, size):
    record = payloads([size])[0]
    path = tmp_path / "one.tfrecord"
    write_file(path, [record])
    assert path.read_bytes() == reference_frame(record)
    assert list(read_records(path)) == [record]


def test_round_trip_many_records_of_mixed_sizes(tmp_path):
    rng = np.random.default_rng(1)
    sizes = rng.choice([0, 1, 13, 4000, 70_000, 100 * 1024, 1_500_000], size=300).tolist()
    records = payloads(sizes, seed=2)
    path = tmp_path / "many.tfrecord"
    write_file(path, records)
    assert path.stat().st_size == sum(len(r) + 16 for r in records)
    assert path.read_bytes() == b"".join(map(reference_frame, records))
    assert list(read_records(path)) == records
    assert list(read_records(str(path), verify=False)) == records
    with open(path, "rb") as stream:  # the generic stream path
        assert list(read_records(stream)) == records


def test_writer_on_stream_keeps_it_open_and_counts():
    buffer = io.BytesIO()
    records = payloads([5, 0, 200_000])
    with TFRecordWriter(buffer) as writer:
        for record in records:
            writer.write(record)
    assert not buffer.closed
    assert writer.records_written == 3
    assert writer.bytes_written == sum(len(r) + 16 for r in records)
    assert list(read_records(io.BytesIO(buffer.getvalue()))) == records


def test_writer_copies_mutable_buffers(tmp_path):
    path = tmp_path / "mutable.tfrecord"
    data = bytearray(b"abc")
    with TFRecordWriter(path) as writer:
        writer.write(data)
        data[:] = b"xyz"
        writer.write(memoryview(np.arange(3, dtype=np.uint8)))
    assert list(read_records(path)) == [b"abc", b"\x00\x01\x02"]


def test_flush_makes_records_readable_before_close(tmp_path):
    path = tmp_path / "flushed.tfrecord.gz"
    writer = TFRecordWriter(path, "gzip")
    writer.write(b"first")
    writer.flush()
    with open(path, "rb") as stream:
        partial = stream.read()
    assert zlib.decompressobj(31).decompress(partial) == reference_frame(b"first")
    writer.close()
    writer.close()  # closing twice is harmless
    assert list(read_records(path, "gzip")) == [b"first"]
    with pytest.raises(ValueError):
        writer.write(b"late")


def test_corrupted_data_byte_names_file_and_offset(tmp_path):
    records = payloads([10, 100, 1000])
    path = tmp_path / "bad.tfrecord"
    write_file(path, records)
    raw = bytearray(path.read_bytes())
    third = (10 + 16) + (100 + 16)
    raw[third + 12 + 500] ^= 0x01
    path.write_bytes(bytes(raw))
    reader = read_records(path)
    assert next(reader) == records[0]
    assert next(reader) == records[1]
    with pytest.raises(CorruptRecordError) as caught:
        next(reader)
    assert caught.value.offset == third
    assert str(path) in str(caught.value) and f"offset {third}" in str(caught.value)
    assert isinstance(caught.value, HopsmlError)
    # verify=False skips the data checksum but still returns the (damaged) record
    assert list(read_records(path, verify=False))[2] == bytes(raw[third + 12:third + 1012])


def test_corrupted_length_is_caught_before_reading_data(tmp_path):
    path = tmp_path / "badlen.tfrecord"
    write_file(path, payloads([50, 50]))
    raw = bytearray(path.read_bytes())
    raw[66 + 7] = 0x7F  # the high byte of the second record's length
    path.write_bytes(bytes(raw))
    for verify in (True, False):
        with pytest.raises(CorruptRecordError, match="length checksum.*offset 66"):
            list(read_records(path, verify=verify))


@pytest.mark.parametrize("cut", [1, 11, 12, 13, 50, 66 + 16 + 999])
def test_truncated_file(tmp_path, cut):
    records = payloads([50, 1000])
    path = tmp_path / "cut.tfrecord"
    write_file(path, records)
    full = path.read_bytes()
    path.write_bytes(full[:len(full) - cut])
    with pytest.raises(TruncatedRecordError) as caught:
        list(read_records(path))
    expected_offset = 66 if len(full) - cut >= 66 else 0
    assert caught.value.offset == expected_offset
    assert f"offset {expected_offset}" in str(caught.value) and str(path) in str(caught.value)
    with pytest.raises(TruncatedRecordError):
        list(read_records(io.BytesIO(full[:len(full) - cut])))


def test_empty_file_has_no_records(tmp_path):
    path = tmp_path / "empty.tfrecord"
    path.write_bytes(b"")
    assert list(read_records(path)) == []
    write_file(tmp_path / "empty.gz", [], "gzip")
    assert list(read_records(tmp_path / "empty.gz", "gzip")) == []


@pytest.mark.parametrize("compression", ["gzip", "zlib", "GZIP"])
def test_compressed_round_trip(tmp_path, compression):
    records = payloads([0, 1, 100, 100 * 1024, 2_000_000], seed=3) + [b"x" * 300_000]
    path = tmp_path / "c.tfrecord"
    write_file(path, records, compression)
    assert list(read_records(path, compression)) == records
    with open(path, "rb") as stream:
        assert list(read_records(stream, compression)) == records
    if compression.lower() == "gzip":
        assert gzip.decompress(path.read_bytes()) == b"".join(map(reference_frame, records))


def test_gzip_reader_accepts_standard_gzip_and_multiple_members(tmp_path):
    records = payloads([10, 20, 30])
    frames = [reference_frame(r) for r in records]
    path = tmp_path / "members.gz"
    path.write_bytes(gzip.compress(frames[0]) + gzip.compress(frames[1] + frames[2]))
    assert list(read_records(path, "gzip")) == records


def test_truncated_and_garbled_gzip(tmp_path):
    path = tmp_path / "t.gz"
    write_file(path, payloads([100_000, 100_000]), "gzip")
    full = path.read_bytes()
    path.write_bytes(full[:-30])
    with pytest.raises(TruncatedRecordError):
        list(read_records(path, "gzip"))
    path.write_bytes(full[:20] + bytes(200) + full[220:])
    with pytest.raises(CorruptRecordError):
        list(read_records(path, "gzip"))


def test_bad_settings():
    with pytest.raises(SettingsError, match="compression"):
        TFRecordWriter(io.BytesIO(), "snappy")
    with pytest.raises(SettingsError):
        list(read_records(io.BytesIO(), "lz4"))
    with pytest.raises(SettingsError):
        shard_name(10, 10)


def test_shard_name():
    assert shard_name(3, 10) == "part-00003-of-00010.tfrecord"
    assert shard_name(3, 10, "gzip") == "part-00003-of-00010.tfrecord.gz"
    assert shard_name(0, 1) == "part-00000-of-00001.tfrecord"


# --- tf.train.Example ------------------------------------------------------------------------

def all_kinds():
    return {
        "image": b"\xff\xd8" + bytes(range(256)) * 400,
        "text": "héllo wörld",
        "label": 7,
        "bool": True,
        "np_int": np.int32(-3),
        "score": 0.25,
        "np_float": np.float64(2.5),
        "ints": [0, 1, 127, 128, 300, 2**31, 2**63 - 1, -1, -(2**63)],
        "floats": [1.0, -2.5, 3],
        "bytes_list": [b"a", b"", "c", bytearray(b"d")],
        "int_array": np.arange(-1000, 1000, 7, dtype=np.int64).reshape(2, -1),
        "uint8_array": np.arange(256, dtype=np.uint8),
        "float_array": np.linspace(-1, 1, 5000, dtype=np.float32),
        "f64_array": np.array([[0.1, 0.2], [0.3, 0.4]]),
        "str_array": np.array(["x", "yz"]),
        "empty_floats": np.zeros(0, dtype=np.float32),
        "empty_ints": np.zeros(0, dtype=np.int64),
        "untyped_empty": [],
    }


def expected(value):
    """What decode_example should return for an encode_example input."""
    if isinstance(value, (bytes, str, bytearray)):
        value = [value]
    if isinstance(value, np.ndarray) and value.dtype.kind in "SU":
        value = value.tolist()
    if isinstance(value, list) and all(isinstance(v, (bytes, str, bytearray)) for v in value):
        return [v.encode() if isinstance(v, str) else bytes(v) for v in value]
    if isinstance(value, list) and not value:
        return []
    array = np.asarray(value).ravel()
    if array.dtype.kind == "f":
        return array.astype(np.float32)
    return array.astype(np.int64)


def assert_same(decoded, features):
    assert set(decoded) == set(features)
    for name, value in features.items():
        want = expected(value)
        got = decoded[name]
        if isinstance(want, np.ndarray):
            assert isinstance(got, np.ndarray) and got.dtype == want.dtype, name
            np.testing.assert_array_equal(got, want, err_msg=name)
        else:
            assert got == want, name


def test_example_round_trip_all_kinds():
    features = all_kinds()
    assert_same(decode_example(encode_example(features)), features)


def test_protobuf_parses_hand_encoded_bytes_exactly():
    features = all_kinds()
    data = encode_example(features)
    message = example_proto.Example.FromString(data)
    assert message.ByteSize() == len(data)  # no stray or missing bytes
    feature = message.features.feature
    assert list(feature["ints"].int64_list.value) == all_kinds()["ints"]
    assert feature["text"].bytes_list.value[0] == "héllo wörld".encode()
    assert feature["untyped_empty"].WhichOneof("kind") is None
    assert feature["empty_floats"].WhichOneof("kind") == "float_list"
    # protobuf's own serialization of the parsed message decodes to the same thing
    assert_same(decode_example(message.SerializeToString()), features)


def test_protobuf_built_example_decodes_and_reencodes_to_same_bytes():
    message = example_proto.Example()
    feature = message.features.feature
    feature["b"].bytes_list.value.extend([b"1", b"22"])
    feature["f"].float_list.value.extend([0.5, -1.25])
    feature["i"].int64_list.value.extend([-5, 10**12])
    data = message.SerializeToString()
    decoded = decode_example(data)
    assert decoded["b"] == [b"1", b"22"]
    np.testing.assert_array_equal(decoded["f"], np.array([0.5, -1.25], np.float32))
    np.testing.assert_array_equal(decoded["i"], np.array([-5, 10**12]))
    reencoded = example_proto.Example.FromString(encode_example(
        {"b": decoded["b"], "f": decoded["f"], "i": decoded["i"]}))
    assert reencoded == message


def test_unpacked_repeated_fields_are_accepted():
    # An Int64List written unpacked (tag 0x08 per value) is valid wire format for proto2 readers.
    int64_list = b"\x08\x05\x08\x07"
    feature = b"\x1a" + bytes([len(int64_list)]) + int64_list
    entry = b"\x0a\x01k" + b"\x12" + bytes([len(feature)]) + feature
    features = b"\x0a" + bytes([len(entry)]) + entry
    data = b"\x0a" + bytes([len(features)]) + features
    np.testing.assert_array_equal(decode_example(data)["k"], [5, 7])


@pytest.mark.parametrize("size", [1, 15, 16, 17, 1000])
def test_varint_encoding_matches_protobuf_for_all_widths(size):
    rng = np.random.default_rng(size)
    widths = rng.integers(0, 64, size)
    values = (rng.integers(0, 2**62, size) >> (62 - np.minimum(widths, 62))) * rng.choice([-1, 1],
                                                                                          size)
    message = example_proto.Example()
    message.features.feature["v"].int64_list.value.extend(values.tolist())
    assert encode_example({"v": values}) == message.SerializeToString()


def test_large_payload_is_encoded_correctly():
    blob = os.urandom(1_000_000)
    data = encode_example({"blob": blob, "shape": [1000, 1000]})
    assert len(data) < len(blob) + 64
    decoded = decode_example(data)
    assert decoded["blob"] == [blob]


@pytest.mark.parametrize("bad", [{"x": object()}, {"x": [1, b"a"]}, {"x": {"a": 1}},
                                 {"x": np.array([1 + 2j])}, {"x": np.array([2**64 - 1],
                                                                           dtype=np.uint64)},
                                 {"x": None}])
def test_unencodable_values_are_rejected(bad):
    with pytest.raises(FeatureTypeError, match="'x'"):
        encode_example(bad)


def test_garbage_is_not_an_example():
    with pytest.raises(CorruptRecordError, match="tf.train.Example"):
        decode_example(b"\xff\xff\xff")


def test_examples_in_records(tmp_path):
    path = tmp_path / shard_name(0, 1)
    rows = [{"image": os.urandom(1000), "label": i} for i in range(50)]
    write_file(path, [encode_example(row) for row in rows])
    for row, record in zip(rows, read_records(path)):
        decoded = decode_example(record)
        assert decoded["image"] == [row["image"]] and decoded["label"].tolist() == [row["label"]]


# --- TensorFlow itself, when installed -------------------------------------------------------

def test_tensorflow_reads_ours_and_we_read_theirs(tmp_path):
    tf = pytest.importorskip("tensorflow")
    records = payloads([0, 1, 100, 100 * 1024], seed=5)
    for compression, tf_name in [(None, ""), ("gzip", "GZIP"), ("zlib", "ZLIB")]:
        ours = tmp_path / f"ours-{compression}.tfrecord"
        write_file(ours, records, compression)
        got = [r.numpy() for r in tf.data.TFRecordDataset(str(ours), compression_type=tf_name)]
        assert got == records
        theirs = tmp_path / f"theirs-{compression}.tfrecord"
        with tf.io.TFRecordWriter(str(theirs), tf_name) as writer:
            for record in records:
                writer.write(record)
        assert list(read_records(theirs, compression)) == records

    features = all_kinds()
    del features["untyped_empty"]
    data = encode_example(features)
    assert tf.train.Example.FromString(data).SerializeToString() == \
        example_proto.Example.FromString(data).SerializeToString()
    parsed = tf.io.parse_single_example(data, {
        "label": tf.io.FixedLenFeature([], tf.int64),
        "float_array": tf.io.FixedLenFeature([5000], tf.float32),
        "bytes_list": tf.io.VarLenFeature(tf.string),
    })
    assert int(parsed["label"]) == 7
    np.testing.assert_array_equal(parsed["float_array"].numpy(), features["float_array"])
    tf_example = tf.train.Example(features=tf.train.Features(feature={
        "x": tf.train.Feature(int64_list=tf.train.Int64List(value=[1, -2])),
        "y": tf.train.Feature(bytes_list=tf.train.BytesList(value=[b"z"]))}))
    decoded = decode_example(tf_example.SerializeToString())
    assert decoded["x"].tolist() == [1, -2] and decoded["y"] == [b"z"]
