"""TensorBoard's HParams plugin data for a search, so its HParams tab lists the trials.

Written as TensorBoard's ``hparams.summary_v2`` writes them, encoded here by hand like the scalar
events of :mod:`hopsml.tracking.events` (TensorBoard is not needed to write them):

- ``<search>/tensorboard/hparams/``: the experiment: every hyperparameter with the values the trials
  took, and the metric (the search's optimization key);
- ``<trial>/tensorboard/hparams/``: the trial's session: its hyperparameters, start and end, status,
  and its final metric as a scalar of the same name (step 0), which is what the tab shows.

The fields used (TensorBoard's ``plugin_data.proto``, ``api.proto``, ``summary.proto``)::

    HParamsPluginData { Experiment experiment = 2; SessionStartInfo session_start_info = 3;
                        SessionEndInfo session_end_info = 4; }            (version 0: not written)
    SessionStartInfo  { map<string, google.protobuf.Value> hparams = 1; string group_name = 4;
                        double start_time_secs = 5; }
    SessionEndInfo    { Status status = 1; double end_time_secs = 2; }
    Experiment        { double time_created_secs = 3; repeated HParamInfo hparam_infos = 4;
                        repeated MetricInfo metric_infos = 5; string name = 6; }
    HParamInfo        { string name = 1; DataType type = 4; google.protobuf.ListValue domain_discrete = 5; }
    MetricInfo        { MetricName name = 1; }   MetricName { string group = 1; string tag = 2; }
    Summary.Value     { string tag = 1; float simple_value = 2; TensorProto tensor = 8; SummaryMetadata metadata = 9; }
"""

from __future__ import annotations

import hashlib
import io
import json
import socket
import struct
import time
from typing import Any
from collections.abc import Iterable, Mapping

from hopsml.formats.tfrecord import TFRecordWriter
from hopsml.formats.wire import field as _field
from hopsml.formats.wire import varint as _varint
from hopsml.fs import Storage
from hopsml.layout import join
from hopsml.tracking.events import FILE_VERSION, encode_event

FOLDER = "hparams"
EXPERIMENT_TAG = "_hparams_/experiment"
SESSION_START_TAG = "_hparams_/session_start_info"
SESSION_END_TAG = "_hparams_/session_end_info"
PLUGIN_NAME = "hparams"
_NULL_TENSOR = bytes.fromhex("080112021200")   # an empty float vector: the value holds only metadata
_TYPES = {str: 1, bool: 2, float: 3}           # DATA_TYPE_STRING, _BOOL, _FLOAT64
STATUS = {"FINISHED": 1, "EARLY_STOPPED": 1, "FAILED": 2, "RUNNING": 3}   # SUCCESS, FAILURE, RUNNING


def _double(number: int, value: float) -> bytes:
    return _varint(number << 3 | 1) + struct.pack("<d", value)


def _enum(number: int, value: int) -> bytes:
    return _varint(number << 3) + _varint(value) if value else b""


def _plain(value: Any) -> Any:
    """A hyperparameter value as the tab can show it: bool, number or text."""
    if isinstance(value, bool) or isinstance(value, str):
        return value
    if isinstance(value, (int, float)):
        return float(value)
    try:
        return float(value)   # numpy numbers
    except (TypeError, ValueError):
        return json.dumps(value, default=str) if not isinstance(value, str) else value


def _value(value: Any) -> bytes:
    """A google.protobuf.Value."""
    value = _plain(value)
    if isinstance(value, bool):
        return _varint(4 << 3) + _varint(int(value))
    if isinstance(value, float):
        return _double(2, value)
    return _field(3, str(value).encode("utf-8"))


def _summary_event(tag: str, content: bytes, wall_time: float) -> bytes:
    plugin_data = _field(1, PLUGIN_NAME.encode()) + _field(2, content)
    value = _field(1, tag.encode()) + _field(8, _NULL_TENSOR) + _field(9, _field(1, plugin_data))
    return _double(1, wall_time) + _varint(2 << 3) + _varint(0) + _field(5, _field(1, value))


def experiment_event(hparams: Mapping[str, Iterable[Any]], metric: str, wall_time: float) -> bytes:
    """The Event holding the experiment: each hyperparameter with its values, and the metric."""
    infos = b""
    for name in sorted(hparams):
        values = [_plain(v) for v in hparams[name]]
        kinds = {type(v) for v in values}
        info = _field(1, name.encode())
        if len(kinds) == 1:
            info += _enum(4, _TYPES[kinds.pop()])
            unique = sorted(set(values), key=lambda v: (str(type(v)), v))
            info += _field(5, b"".join(_field(1, _value(v)) for v in unique))
        infos += _field(4, info)
    metric_info = _field(1, _field(2, metric.encode()))   # MetricName: no group, the tag
    experiment = _double(3, wall_time) + infos + _field(5, metric_info)
    return _summary_event(EXPERIMENT_TAG, _field(2, experiment), wall_time)


def group_name(hparams: Mapping[str, Any]) -> str:
    """The trial's session group: a hash of its hyperparameters, as TensorBoard derives it."""
    text = json.dumps({k: _plain(v) for k, v in hparams.items()}, sort_keys=True, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def session_events(hparams: Mapping[str, Any], metric: str, value: float | None, state: str,
                   start: float, end: float) -> list[bytes]:
    """The Events of one trial: session start (its hyperparameters), its metric, session end."""
    entries = b"".join(_field(1, _field(1, str(k).encode("utf-8")) + _field(2, _value(v)))
                       for k, v in sorted(hparams.items()))
    start_info = entries + _field(4, group_name(hparams).encode()) + _double(5, start)
    events = [_summary_event(SESSION_START_TAG, _field(3, start_info), start)]
    if value is not None:
        events.append(encode_event(end, 0, scalars={metric: float(value)}))
    end_info = _enum(1, STATUS.get(state, 0)) + _double(2, end)
    events.append(_summary_event(SESSION_END_TAG, _field(4, end_info), end))
    return events


def _write(storage: Storage, folder: str, events: list[bytes], wall_time: float) -> str:
    out = io.BytesIO()
    writer = TFRecordWriter(out)
    writer.write(encode_event(wall_time, file_version=FILE_VERSION))
    for event in events:
        writer.write(event)
    writer.flush()
    data = out.getvalue()
    writer.close()
    rel = join(folder, f"events.out.tfevents.{int(wall_time)}.{socket.gethostname()}.hparams")
    storage.write_bytes(rel, data)
    return rel


def write_trial(storage: Storage, tensorboard_dir: str, hparams: Mapping[str, Any], metric: str,
                value: float | None, state: str, duration: float | None) -> str:
    """Write one trial's session into ``<tensorboard_dir>/hparams/``; returns the file's path."""
    end = time.time()
    start = end - (duration or 0.0)
    return _write(storage, join(tensorboard_dir, FOLDER),
                  session_events(hparams, metric, value, state, start, end), end)


def write_experiment(storage: Storage, tensorboard_dir: str, trials: Iterable[Mapping[str, Any]],
                     metric: str) -> str:
    """Write the search's experiment (hyperparameters and the values they took, the metric)."""
    values: dict[str, list[Any]] = {}
    for params in trials:
        for name, value in params.items():
            values.setdefault(name, []).append(value)
    now = time.time()
    return _write(storage, join(tensorboard_dir, FOLDER), [experiment_event(values, metric, now)], now)
