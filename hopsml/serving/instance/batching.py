"""Dynamic batching with TensorFlow Serving's knobs: requests that arrive together become one model call,
and each gets its own rows of the answer back, in order.

A batch is called when it holds `max_batch_size` rows, or `batch_timeout_micros` after its first request
arrived; a request larger than `max_batch_size` rows is called alone. A request that finds the model idle
and no other request queued is called at once, as without batching: one client pays no timeout, and under
load the requests that queue while the model computes (or arrive together) make the next batch. When
`max_enqueued_batches` full batches already wait, a request is refused with 503 rather than queued without
end. Each request's inputs are checked before they join a batch, so a malformed one fails alone (4xx); a model
that raises fails the whole batch (500 for each request in it), as in TF Serving.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np

from hopsml.serving.definition import ServingError
from hopsml.serving.instance.loaders import RequestError, Servable, to_json_ready

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


class ModelThread:
    """The thread an instance's models compute on, shared by its batchers (a canary's and the stable version's, or
    the models of a server of several), with the number of calls on it or queued for it: a lone request is computed
    on the event loop only when no model of the instance is busy (else it would stall the loop while another
    version's batch computes: a 10% canary cost a fifth of the throughput that way)."""

    def __init__(self) -> None:
        self.executor = ThreadPoolExecutor(1, thread_name_prefix="model")
        self.busy = 0

    def prepare(self, servable: Servable) -> None:
        """A servable's per-thread settings, made on the model thread before its first call there."""
        self.executor.submit(servable.on_thread)

    def close(self) -> None:
        self.executor.shutdown(wait=False)


def _rows(prepared: object) -> int | None:
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
    """Gathers prepared requests on the instance's event loop and calls the model once per batch.

    The model runs on one worker thread, one hand-off per batch, so the event loop goes on reading
    requests (the next batch) while it computes (a lone request with none waiting is computed on the loop);
    a batch whose first request waited the timeout while
    the model was busy leaves as soon as the model is free."""

    def __init__(self, servable: Servable, options: BatchingOptions, thread: ModelThread | None = None) -> None:
        self.servable = servable
        self.options = options
        self.queue: deque[tuple[Any, int, asyncio.Future[Any], float]] = deque()
        self.queued_rows = 0
        self.loop: asyncio.AbstractEventLoop | None = None
        self.task: asyncio.Task[None] | None = None
        self.arrived = asyncio.Event()
        self.full = asyncio.Event()
        self.batch_sizes: deque[int] = deque(maxlen=1000)  # rows per model call, the latest first
        self.owns_thread = thread is None
        self.thread = thread or ModelThread()
        self.thread.prepare(servable)

    def close(self) -> None:
        """Stop batching (an evicted model): its task ends, and its model thread unless it is shared."""
        if self.task is not None:
            self.task.cancel()
        if self.owns_thread:
            self.thread.close()

    async def predict(self, inputs: object) -> Any:
        """This request's predictions, JSON-ready (lists and numbers), once its batch has been computed."""
        prepared = self.servable.prepare(inputs)
        rows = _rows(prepared)
        if rows is None or rows == 0:
            return to_json_ready(self.servable.call(prepared))
        limit = self.options.max_batch_size * self.options.max_enqueued_batches
        if self.queued_rows + rows > limit and self.queue:
            raise RequestError(f"the serving's batch queue is full ({self.queued_rows} rows wait, "
                               f"max_enqueued_batches={self.options.max_enqueued_batches}); retry, or run more "
                               "instances", 503)
        loop = self.loop
        if loop is None:   # kept: asyncio.get_running_loop() costs a getpid() system call each time
            loop = self.loop = asyncio.get_running_loop()
        if self.task is None or self.task.done():
            self.task = loop.create_task(self._run())
        future: asyncio.Future[Any] = loop.create_future()
        self.queue.append((prepared, rows, future, loop.time()))
        self.queued_rows += rows
        if len(self.queue) == 1:
            self.arrived.set()
        if self.queued_rows >= self.options.max_batch_size:
            self.full.set()
        return await future

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        timeout = self.options.batch_timeout_micros / 1e6
        while True:
            while not self.queue:
                self.arrived.clear()
                await self.arrived.wait()
            # a lone request on an idle model goes at once; else the timeout counts from the first request's
            # arrival, not from when the model got free
            delay = self.queue[0][3] + timeout - loop.time()
            if len(self.queue) > 1 and self.queued_rows < self.options.max_batch_size and delay > 0:
                self.full.clear()
                try:
                    await asyncio.wait_for(self.full.wait(), delay)
                except asyncio.TimeoutError:
                    pass
            await self._call(self._take())

    def _take(self) -> list[tuple[Any, int, asyncio.Future[Any], float]]:
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

    async def _call(self, batch: list[tuple[Any, int, asyncio.Future[Any], float]]) -> None:
        live = [item for item in batch if not item[2].done()]  # a client that went away is not computed for
        if not live:
            return
        sizes = [item[1] for item in live]
        self.batch_sizes.appendleft(sum(sizes))
        joined = _join([item[0] for item in live])
        try:
            thread = self.thread
            if len(live) == 1 and not self.queue and not thread.busy:   # nothing to overlap with: a thread hop
                output = self._compute(joined, sizes)                      # would only add latency
            else:
                thread.busy += 1
                try:
                    output = await asyncio.get_running_loop().run_in_executor(thread.executor, self._compute,
                                                                              joined, sizes)
                finally:
                    thread.busy -= 1
        except Exception as exc:  # noqa: BLE001 - passed on: each request of the batch answers 500 with it
            for item in live:
                if not item[2].done():
                    item[2].set_exception(exc)
            return
        for item, part in zip(live, output):
            if not item[2].done():
                item[2].set_result(part)

    def _compute(self, joined: object, sizes: list[int]) -> list[Any]:
        """On the model thread: the call, its answer made JSON-ready there too (in one conversion: a tolist()
        per request cost the model thread more than the split) and split per request."""
        return _split(to_json_ready(self.servable.call(joined)), sizes)
