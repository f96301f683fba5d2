"""HParams plugin data of a search, read back with TensorBoard's own loader and parsers."""

import os

import pytest

from hopsml.fs import Storage
from hopsml.search import hparams

tensorboard = pytest.importorskip("tensorboard")


def _events(folder):
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader

    (name,) = [n for n in os.listdir(folder) if n.startswith("events.out.tfevents.")]
    return list(EventFileLoader(os.path.join(folder, name)).Load())


def _plugin_values(events):
    return {v.tag: v for e in events for v in e.summary.value if v.metadata.plugin_data.plugin_name == "hparams"}


def test_a_trial_session_reads_back_with_its_hyperparameters_status_and_metric(tmp_path):
    from tensorboard.plugins.hparams import api_pb2, metadata

    storage = Storage(str(tmp_path))
    params = {"lr": 0.05, "dropout": 0.5, "optimizer": "sgd", "nesterov": True, "layers": 3}
    hparams.write_trial(storage, "exp/lr=0.05/tensorboard", params, "accuracy", 0.93, "FINISHED", 12.0)
    events = _events(tmp_path / "exp/lr=0.05/tensorboard/hparams")
    assert events[0].file_version == "brain.Event:2"
    values = _plugin_values(events)
    start = metadata.parse_session_start_info_plugin_data(values[metadata.SESSION_START_INFO_TAG].metadata.plugin_data.content)
    assert start.hparams["lr"].number_value == 0.05 and start.hparams["layers"].number_value == 3
    assert start.hparams["optimizer"].string_value == "sgd" and start.hparams["nesterov"].bool_value is True
    end = metadata.parse_session_end_info_plugin_data(values[metadata.SESSION_END_INFO_TAG].metadata.plugin_data.content)
    assert end.status == api_pb2.STATUS_SUCCESS
    assert end.end_time_secs - start.start_time_secs == pytest.approx(12.0, abs=0.01)
    scalars = [v for e in events for v in e.summary.value if v.tag == "accuracy"]
    assert len(scalars) == 1   # the loader turns simple_value into a scalar tensor, as TensorBoard reads it
    assert (scalars[0].tensor.float_val or [scalars[0].simple_value])[0] == pytest.approx(0.93)


def test_the_experiment_lists_every_hyperparameter_with_its_values_and_the_metric(tmp_path):
    from tensorboard.plugins.hparams import api_pb2, metadata

    storage = Storage(str(tmp_path))
    hparams.write_experiment(storage, "exp/tensorboard", [{"lr": 0.5, "act": "relu"}, {"lr": 0.05, "act": "tanh"},
                                                          {"lr": 0.5, "act": "tanh"}], "accuracy")
    values = _plugin_values(_events(tmp_path / "exp/tensorboard/hparams"))
    experiment = metadata.parse_experiment_plugin_data(values[metadata.EXPERIMENT_TAG].metadata.plugin_data.content)
    infos = {i.name: i for i in experiment.hparam_infos}
    assert [v.number_value for v in infos["lr"].domain_discrete.values] == [0.05, 0.5]
    assert infos["lr"].type == api_pb2.DATA_TYPE_FLOAT64
    assert [v.string_value for v in infos["act"].domain_discrete.values] == ["relu", "tanh"]
    assert [m.name.tag for m in experiment.metric_infos] == ["accuracy"]


def test_a_failed_trial_without_a_metric_is_a_failed_session(tmp_path):
    from tensorboard.plugins.hparams import api_pb2, metadata

    storage = Storage(str(tmp_path))
    hparams.write_trial(storage, "t/tensorboard", {"lr": 1.0}, "accuracy", None, "FAILED", None)
    events = _events(tmp_path / "t/tensorboard/hparams")
    end = metadata.parse_session_end_info_plugin_data(
        _plugin_values(events)[metadata.SESSION_END_INFO_TAG].metadata.plugin_data.content)
    assert end.status == api_pb2.STATUS_FAILURE
    assert not [v for e in events for v in e.summary.value if v.tag == "accuracy"]
