"""TensorBoard's HParams plugin data for a search, so its HParams tab lists the trials.

Written as TensorBoard's ``hparams.summary_v2`` writes them, encoded here by hand like the scalar
events of :mod:`hopsml.tracking.events` (TensorBoard is not needed to write them):

- ``<search>/tensorboard/``: the experiment: every hyperparameter with the values the trials took, and
  the metric (the search's optimization key);
- ``<trial>/tensorboard/``: the trial's session, beside the scalars the trial logged, so that each trial
  is one run in TensorBoard (a subfolder would be a second run, and Time Series would show every trial
  twice): its hyperparameters, start and end, status, and its final metric as a scalar of the same name,
  which is what the tab shows. The events take the trial's last logged step (an earlier one would make
  TensorBoard drop the logged points of the same tag as data of a restarted run), and the final metric
  is left out when the trial's last logged value of that tag is it already.

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
import posixpath
import socket
import struct
import time
from collections.abc import Iterable, Mapping
from typing import Any

from hopsml.formats.tfrecord import CorruptRecordError, TFRecordWriter, read_records
from hopsml.formats.wire import field as _field
from hopsml.formats.wire import varint as _varint
from hopsml.fs import Storage
from hopsml.layout import RunDir, join
from hopsml.tracking.events import FILE_VERSION, encode_event
from hopsml.tracking.metrics import read_metrics

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


def _value(value: object) -> bytes:
    """A google.protobuf.Value."""
    value = _plain(value)
    if isinstance(value, bool):
        return _varint(4 << 3) + _varint(int(value))
    if isinstance(value, float):
        return _double(2, value)
    return _field(3, str(value).encode("utf-8"))


def _summary_event(tag: str, content: bytes, wall_time: float, step: int = 0) -> bytes:
    plugin_data = _field(1, PLUGIN_NAME.encode()) + _field(2, content)
    value = _field(1, tag.encode()) + _field(8, _NULL_TENSOR) + _field(9, _field(1, plugin_data))
    return _double(1, wall_time) + _varint(2 << 3) + _varint(step) + _field(5, _field(1, value))


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
                   start: float, end: float, step: int = 0) -> list[bytes]:
    """The Events of one trial at `step`: session start (its hyperparameters), its metric (None: none
    written), session end."""
    entries = b"".join(_field(1, _field(1, str(k).encode("utf-8")) + _field(2, _value(v)))
                       for k, v in sorted(hparams.items()))
    start_info = entries + _field(4, group_name(hparams).encode()) + _double(5, start)
    events = [_summary_event(SESSION_START_TAG, _field(3, start_info), start, step)]
    if value is not None:
        events.append(encode_event(end, step, scalars={metric: float(value)}))
    end_info = _enum(1, STATUS.get(state, 0)) + _double(2, end)
    events.append(_summary_event(SESSION_END_TAG, _field(4, end_info), end, step))
    return events


def _event_step(record: bytes) -> int | None:
    """The step (field 2) of a serialized Event; None when it has none or the record is not an Event."""
    pos = 0
    try:
        while pos < len(record):
            key, pos = _read_varint(record, pos)
            number, wire = key >> 3, key & 7
            if wire == 0:
                value, pos = _read_varint(record, pos)
                if number == 2:
                    return value - (1 << 64) if value >= 1 << 63 else value
            elif wire == 1:
                pos += 8
            elif wire == 5:
                pos += 4
            elif wire == 2:
                size, pos = _read_varint(record, pos)
                pos += size
            else:
                return None
    except IndexError:
        return None
    return None


def _read_varint(data: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7


def last_step(storage: Storage, tensorboard_dir: str) -> int | None:
    """The highest step among the events already in `tensorboard_dir` (not its subfolders), if any."""
    if not storage.isdir(tensorboard_dir):
        return None
    steps: list[int] = []
    for rel in storage.ls(tensorboard_dir):
        if not posixpath.basename(rel).startswith("events.out.tfevents.") or storage.isdir(rel):
            continue
        try:
            for record in read_records(io.BytesIO(storage.read_bytes(rel)), verify=False):
                step = _event_step(record)
                if step is not None:
                    steps.append(step)
        except CorruptRecordError:  # a file cut short: the steps before the cut still count
            continue
    return max(steps, default=None)


def _last_logged(storage: Storage, run_dir: str, metric: str) -> float | None:
    """The last value of `metric` that the trial logged with hopsml.tensorboard.log (metrics.jsonl)."""
    rel = RunDir(run_dir).metrics
    if not storage.exists(rel):
        return None
    values = [float(value) for row in read_metrics(storage.read_text(rel))
              if row.get("name") == metric and isinstance(value := row.get("value"), (int, float))]
    return values[-1] if values else None


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


def _same_float32(a: float, b: float) -> bool:
    return struct.pack("<f", a) == struct.pack("<f", b)


def write_trial(storage: Storage, tensorboard_dir: str, hparams: Mapping[str, Any], metric: str,
                value: float | None, state: str, duration: float | None) -> str:
    """Write one trial's session into ``tensorboard_dir`` (the trial's own, beside its scalars) at its
    last logged step; returns the file's path."""
    end = time.time()
    start = end - (duration or 0.0)
    step = last_step(storage, tensorboard_dir) or 0
    logged = _last_logged(storage, posixpath.dirname(tensorboard_dir), metric)
    if value is not None and logged is not None and _same_float32(float(value), logged):
        value = None  # the trial's curve ends with the final metric already: the tab reads it there
    return _write(storage, tensorboard_dir, session_events(hparams, metric, value, state, start, end, step), end)


def write_experiment(storage: Storage, tensorboard_dir: str, trials: Iterable[Mapping[str, Any]],
                     metric: str) -> str:
    """Write the search's experiment (hyperparameters and the values they took, the metric) into
    ``tensorboard_dir``, the search's own."""
    values: dict[str, list[Any]] = {}
    for params in trials:
        for name, value in params.items():
            values.setdefault(name, []).append(value)
    now = time.time()
    return _write(storage, tensorboard_dir, [experiment_event(values, metric, now)], now)
