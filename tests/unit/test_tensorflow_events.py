"""TensorFlow itself reads the TensorBoard event files hopsml writes (runs where TensorFlow is installed)."""

import os

import pytest

from hopsml import layout, tensorboard
from hopsml.fs import Storage
from hopsml.tracking.run_context import active_run


def test_tensorflow_reads_the_event_files(tmp_path):
    tf = pytest.importorskip("tensorflow")

    storage = Storage(str(tmp_path))
    with active_run(storage, layout.RunDir("run")):
        for step in range(3):
            tensorboard.log({"loss": 1.0 / (step + 1), "accuracy": step / 4}, step=step)
        logdir = tensorboard.logdir()
    names = [name for name in os.listdir(logdir) if name.startswith("events.out.tfevents")]
    assert len(names) == 1
    events = list(tf.compat.v1.train.summary_iterator(os.path.join(logdir, names[0])))
    assert events[0].file_version == "brain.Event:2"
    scalars = sorted((e.step, v.tag, round(v.simple_value, 6)) for e in events[1:] for v in e.summary.value)
    assert scalars == [(0, "accuracy", 0.0), (0, "loss", 1.0), (1, "accuracy", 0.25), (1, "loss", 0.5),
                       (2, "accuracy", 0.5), (2, "loss", 0.333333)]
    assert all(e.wall_time > 0 for e in events)
