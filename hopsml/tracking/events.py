"""TensorBoard event files of scalars, written directly: TFRecord records of ``tensorflow.Event``.

TensorBoard reads ``events.out.tfevents.*`` files: a TFRecord stream whose first record is an
Event carrying ``file_version = "brain.Event:2"`` and whose other records are Events with a
Summary of tagged values. The few fields a scalar needs are encoded here by hand (the schema of
TensorFlow's ``event.proto`` and ``summary.proto``)::

    message Event   { double wall_time = 1; int64 step = 2; string file_version = 3; Summary summary = 5; }
    message Summary { repeated Value value = 1; }
    message Value   { string tag = 1; float simple_value = 2; }

A writing library would do the same, but tensorboardX imports PyTorch when it is installed, which
cost about a second on the first logged metric of every worker.
"""

from __future__ import annotations

import os
import socket
import struct
import time
from collections.abc import Mapping

from hopsml.formats.tfrecord import TFRecordWriter
from hopsml.formats.wire import field, varint

FILE_VERSION = b"brain.Event:2"


def encode_event(wall_time: float, step: int = 0, *, scalars: Mapping[str, float] | None = None,
                 file_version: bytes | None = None) -> bytes:
    """One serialized Event: the file version record, or scalars (tag -> value) at ``step``.

    >>> encode_event(1.5, 3, scalars={"a": 1.0}).hex()
    '09000000000000f83f10032a0a0a080a0161150000803f'
    """
    out = b"\x09" + struct.pack("<d", wall_time) + b"\x10" + varint(int(step) & (2 ** 64 - 1))
    if file_version is not None:
        out += field(3, file_version)
    if scalars:
        values = b"".join(field(1, field(1, tag.encode("utf-8")) + b"\x15" + struct.pack("<f", value))
                          for tag, value in scalars.items())
        out += field(5, values)
    return out


class EventWriter:
    """Appends scalar events to a new ``events.out.tfevents.<time>.<host>.<pid>`` file in ``logdir``.

    Each ``add_scalars`` call is flushed to the file, so TensorBoard (and a copy made when the run
    ends) sees every step already logged.
    """

    def __init__(self, logdir: str) -> None:
        os.makedirs(logdir, exist_ok=True)
        now = time.time()
        self.path = os.path.join(logdir, f"events.out.tfevents.{int(now)}.{socket.gethostname()}.{os.getpid()}")
        self._records = TFRecordWriter(self.path)
        self._records.write(encode_event(now, file_version=FILE_VERSION))
        self._records.flush()

    def add_scalars(self, scalars: Mapping[str, float], step: int, wall_time: float | None = None) -> None:
        self._records.write(encode_event(time.time() if wall_time is None else wall_time, step,
                                         scalars=scalars))
        self._records.flush()

    def close(self) -> None:
        self._records.close()
