"""File formats hopsml writes and reads without TensorFlow: TFRecord framing, tf.train.Example.

Below both ``hopsml.data`` (dataset shards) and ``hopsml.tracking`` (TensorBoard event files),
and importing neither: pure encoding, no Spark, no storage.
"""

from hopsml.formats.example import FeatureTypeError, decode_example, encode_example
from hopsml.formats.tfrecord import (
    CorruptRecordError,
    TFRecordWriter,
    TruncatedRecordError,
    masked_crc32c,
    read_records,
    shard_name,
)

__all__ = [
    "CorruptRecordError",
    "FeatureTypeError",
    "TFRecordWriter",
    "TruncatedRecordError",
    "decode_example",
    "encode_example",
    "masked_crc32c",
    "read_records",
    "shard_name",
]
