"""The Keras callback puts every training batch of model.fit on the timeline."""

import numpy as np
import pytest

from hopsml.timeline import keras as timeline_keras
from hopsml.timeline.recorder import Recorder, recording


def test_fit_batches_become_spans():
    keras = pytest.importorskip("keras")
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    recorder = Recorder()
    with recording(recorder):
        model.fit(np.zeros((12, 4), np.float32), np.zeros(12, np.float32), batch_size=4, epochs=2, verbose=0,
                  callbacks=[timeline_keras.callback()])
    batches = [s for s in recorder.spans if s[1] == "train batch"]
    assert [s[5]["batch"] for s in batches] == [0, 1, 2, 0, 1, 2]
    assert all(s[3] >= s[2] for s in batches)
    timeline_keras.callback().on_train_batch_end(0)  # outside a run: nothing recorded, no error
