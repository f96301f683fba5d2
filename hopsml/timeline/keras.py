"""A Keras callback that puts every training and test batch on the rank's timeline:
`model.fit(..., callbacks=[hopsml.timeline.keras.callback()])`. Keras is imported only when it is made."""

from __future__ import annotations

from time import perf_counter_ns
from typing import Any

from hopsml.timeline.recorder import COMPUTE, current


def callback() -> Any:
    """A keras.callbacks.Callback recording each batch as a 'train batch' (or 'test batch') span."""
    try:
        import keras
    except ImportError:  # TensorFlow's own copy
        from tensorflow import keras

    class TimelineCallback(keras.callbacks.Callback):
        """Batch spans on the hopsml timeline (nothing is recorded when the timeline is off)."""

        def __init__(self) -> None:
            super().__init__()
            self._started = 0

        def _begin(self, batch: int, logs: object = None) -> None:
            self._started = perf_counter_ns()

        def _end(self, name: str, batch: int) -> None:
            recorder = current()
            if recorder is not None and self._started:
                recorder.span(COMPUTE, name, self._started, perf_counter_ns(), {"batch": int(batch)})
            self._started = 0

        on_train_batch_begin = _begin
        on_test_batch_begin = _begin

        def on_train_batch_end(self, batch: int, logs: object = None) -> None:
            self._end("train batch", batch)

        def on_test_batch_end(self, batch: int, logs: object = None) -> None:
            self._end("test batch", batch)

    return TimelineCallback()
