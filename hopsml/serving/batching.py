"""Dynamic batching with TensorFlow Serving's knobs: requests that arrive together become one model call,
and each gets its own rows of the answer back, in order.

A batch is called when it holds `max_batch_size` rows, or `batch_timeout_micros` after its first request
arrived; a request larger than `max_batch_size` rows is called alone. When `max_enqueued_batches` full
batches already wait, a request is refused with 503 rather than queued without end. Each request's
inputs are checked before they join a batch, so a malformed one fails alone (4xx); a model that raises
fails the whole batch (500 for each request in it), as in TF Serving.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from dataclasses import dataclass
from typing import Any

import numpy as np

from hopsml.serving.definition import ServingError
from hopsml.serving.loaders import RequestError, Servable

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class BatchingOptions:
    """TF Serving's batching parameters (its defaults are for a GPU; these suit a CPU instance)."""

    max_batch_size: int = 32
    batch_timeout_micros: int = 1000
    max_enqueued_batches: int = 100

    def __post_init__(self) -> None:
        for name, low in (("max_batch_size", 1), ("batch_timeout_micros", 0), ("max_enqueued_batches", 1)):
            number = getattr(self, name)
            if isinstance(number, bool) or not isinstance(number, int) or number < low:
                raise ServingError(f"{name} must be a whole number of at least {low}, not {number!r}")


def _rows(prepared: Any) -> int | None:
    """How many rows prepared inputs hold, None when they cannot join a batch (not rows)."""
    if isinstance(prepared, np.ndarray) and prepared.ndim >= 1:
        return int(prepared.shape[0])
    if isinstance(prepared, list):
        return len(prepared)
    return None


def _join(parts: list[Any]) -> Any:
    if isinstance(parts[0], np.ndarray):
        return np.concatenate(parts) if len(parts) > 1 else parts[0]
    return [row for part in parts for row in part]


def _split(output: Any, sizes: list[int]) -> list[Any]:
    """One slice of the model's output per request, in order; a dict of outputs is split per entry."""
    total = sum(sizes)
    if isinstance(output, dict):
        columns = {key: _split(value, sizes) for key, value in output.items()}
        return [{key: parts[i] for key, parts in columns.items()} for i in range(len(sizes))]
    if isinstance(output, tuple):
        output = list(output)
    length = output.shape[0] if hasattr(output, "shape") and len(output.shape) else (
        len(output) if hasattr(output, "__len__") else None)
    if length != total:
        raise ServingError(f"the model returned {length} predictions for a batch of {total} rows; with "
                           "batching_enabled it must return one per row")
    out, start = [], 0
    for size in sizes:
        out.append(output[start:start + size])
        start += size
    return out


class Batcher:
    """Gathers prepared requests on the instance's event loop and calls the model once per batch."""

    def __init__(self, servable: Servable, options: BatchingOptions) -> None:
        self.servable = servable
        self.options = options
        self.queue: deque[tuple[Any, int, asyncio.Future[Any]]] = deque()
        self.queued_rows = 0
        self.task: asyncio.Task[None] | None = None
        self.arrived = asyncio.Event()
        self.full = asyncio.Event()
        self.batch_sizes: deque[int] = deque(maxlen=1000)  # rows per model call, the latest first

    async def predict(self, inputs: Any) -> Any:
        prepared = self.servable.prepare(inputs)
        rows = _rows(prepared)
        if rows is None or rows == 0:
            return self.servable.call(prepared)
        limit = self.options.max_batch_size * self.options.max_enqueued_batches
        if self.queued_rows + rows > limit and self.queue:
            raise RequestError(f"the serving's batch queue is full ({self.queued_rows} rows wait, "
                               f"max_enqueued_batches={self.options.max_enqueued_batches}); retry, or run more "
                               "instances", 503)
        if self.task is None or self.task.done():
            self.task = asyncio.get_running_loop().create_task(self._run())
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.queue.append((prepared, rows, future))
        self.queued_rows += rows
        self.arrived.set()
        if self.queued_rows >= self.options.max_batch_size:
            self.full.set()
        return await future

    async def _run(self) -> None:
        while True:
            while not self.queue:
                self.arrived.clear()
                await self.arrived.wait()
            if self.queued_rows < self.options.max_batch_size and self.options.batch_timeout_micros > 0:
                self.full.clear()
                try:
                    await asyncio.wait_for(self.full.wait(), self.options.batch_timeout_micros / 1e6)
                except asyncio.TimeoutError:
                    pass
            self._call(self._take())

    def _take(self) -> list[tuple[Any, int, asyncio.Future[Any]]]:
        batch = [self.queue.popleft()]
        rows = batch[0][1]
        while self.queue and rows + self.queue[0][1] <= self.options.max_batch_size:
            item = self.queue.popleft()
            batch.append(item)
            rows += item[1]
        self.queued_rows -= rows
        if self.queued_rows < self.options.max_batch_size:
            self.full.clear()
        return batch

    def _call(self, batch: list[tuple[Any, int, asyncio.Future[Any]]]) -> None:
        live = [item for item in batch if not item[2].done()]  # a client that went away is not computed for
        if not live:
            return
        sizes = [rows for _, rows, _ in live]
        self.batch_sizes.appendleft(sum(sizes))
        try:
            parts = _split(self.servable.call(_join([prepared for prepared, _, _ in live])), sizes)
        except Exception as exc:  # noqa: BLE001 - passed on: each request of the batch answers 500 with it
            for _, _, future in live:
                future.set_exception(exc)
            return
        for (_, _, future), part in zip(live, parts):
            future.set_result(part)
