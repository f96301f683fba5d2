"""HParams plugin data of a search, read back with TensorBoard's own loader and parsers."""

import os

import pytest

from hopsml.fs import Storage
from hopsml.tracking import hparams

tensorboard = pytest.importorskip("tensorboard")


def _events(folder):
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader

    (name,) = [n for n in os.listdir(folder) if n.startswith("events.out.tfevents.") and n.endswith(".hparams")]
    return list(EventFileLoader(os.path.join(folder, name)).Load())


def _plugin_values(events):
    return {v.tag: v for e in events for v in e.summary.value if v.metadata.plugin_data.plugin_name == "hparams"}


def test_a_trial_session_reads_back_with_its_hyperparameters_status_and_metric(tmp_path):
    from tensorboard.plugins.hparams import api_pb2, metadata

    storage = Storage(str(tmp_path))
    params = {"lr": 0.05, "dropout": 0.5, "optimizer": "sgd", "nesterov": True, "layers": 3}
    hparams.write_trial(storage, "exp/lr=0.05/tensorboard", params, "accuracy", 0.93, "FINISHED", 12.0)
    events = _events(tmp_path / "exp/lr=0.05/tensorboard")
    assert events[0].file_version == "brain.Event:2"
    values = _plugin_values(events)
    start = metadata.parse_session_start_info_plugin_data(
        values[metadata.SESSION_START_INFO_TAG].metadata.plugin_data.content)
    assert start.hparams["lr"].number_value == 0.05 and start.hparams["layers"].number_value == 3
    assert start.hparams["optimizer"].string_value == "sgd" and start.hparams["nesterov"].bool_value is True
    end = metadata.parse_session_end_info_plugin_data(
        values[metadata.SESSION_END_INFO_TAG].metadata.plugin_data.content)
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
    values = _plugin_values(_events(tmp_path / "exp/tensorboard"))
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
    events = _events(tmp_path / "t/tensorboard")
    end = metadata.parse_session_end_info_plugin_data(
        _plugin_values(events)[metadata.SESSION_END_INFO_TAG].metadata.plugin_data.content)
    assert end.status == api_pb2.STATUS_FAILURE
    assert not [v for e in events for v in e.summary.value if v.tag == "accuracy"]


def _trial_with_a_curve(tmp_path, values):
    """A trial folder as a run leaves it: scalars logged with hopsml's own writer and metrics.jsonl."""
    from hopsml.tracking.metrics import MetricsLogger

    trial = tmp_path / "exp" / "lr=0.5"
    logger = MetricsLogger(str(trial / "metrics.jsonl"), str(trial / "tensorboard"))
    for step, value in enumerate(values):
        logger.log({"accuracy": value, "loss": 1 - value}, step=step)
    logger.close()
    return trial


def _runs(logdir):
    from tensorboard.backend.event_processing import event_multiplexer

    multiplexer = event_multiplexer.EventMultiplexer()
    multiplexer.AddRunsFromDirectory(str(logdir))
    multiplexer.Reload()
    return multiplexer


def test_each_trial_is_one_run_with_its_whole_curve_and_its_session(tmp_path):
    trial = _trial_with_a_curve(tmp_path, [0.5, 0.6, 0.7, 0.8])
    storage = Storage(str(tmp_path))
    hparams.write_trial(storage, "exp/lr=0.5/tensorboard", {"lr": 0.5}, "accuracy", 0.85, "FINISHED", 3.0)
    hparams.write_experiment(storage, "exp/tensorboard", [{"lr": 0.5}], "accuracy")
    runs = _runs(tmp_path / "exp")
    assert sorted(runs.Runs()) == ["lr=0.5/tensorboard", "tensorboard"]  # one run per trial, one for the search
    assert not (trial / "tensorboard" / "hparams").exists()
    # the curve survives (an earlier step would have made TensorBoard drop it) and the final metric ends it
    points = [(e.step, round(e.value, 4)) for e in runs.Scalars("lr=0.5/tensorboard", "accuracy")]
    assert points == [(0, 0.5), (1, 0.6), (2, 0.7), (3, 0.8), (3, 0.85)]
    assert len(runs.Scalars("lr=0.5/tensorboard", "loss")) == 4
    content = runs.PluginRunToTagToContent("hparams")["lr=0.5/tensorboard"]
    assert {"_hparams_/session_start_info", "_hparams_/session_end_info"} <= set(content)


def test_a_final_metric_that_ends_the_curve_already_is_not_written_twice(tmp_path):
    _trial_with_a_curve(tmp_path, [0.5, 0.75])
    storage = Storage(str(tmp_path))
    hparams.write_trial(storage, "exp/lr=0.5/tensorboard", {"lr": 0.5}, "accuracy", 0.75, "FINISHED", 3.0)
    runs = _runs(tmp_path / "exp")
    assert list(runs.Runs()) == ["lr=0.5/tensorboard"]
    assert [(e.step, e.value) for e in runs.Scalars("lr=0.5/tensorboard", "accuracy")] == [(0, 0.5), (1, 0.75)]
