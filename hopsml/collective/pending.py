"""Asynchronous all-reduces: `Communicator.allreduce_async` and the handle it returns.

Every rank must issue its collectives in the same order, so the asynchronous ones run one after another on
the communicator's own background thread, in the order they were submitted, while the caller computes. A
synchronous collective called while asynchronous ones are pending first waits for them (`AsyncQueue.settle`),
so the sequence every rank sees is the sequence its code wrote. The operation itself is the synchronous one,
run on that thread: the same path, the same bits, the same errors, which `Handle.wait()` raises.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from hopsml.collective.timeout import Timeout
from hopsml.errors import CollectiveError

ArrayT = TypeVar("ArrayT")

_STOP = object()


class Handle(Generic[ArrayT]):
    """One submitted all-reduce: `wait()` for its result (the array, reduced in place where the synchronous
    call reduces in place), `done()` to ask without waiting."""

    def __init__(self, label: str, run: Callable[[], ArrayT], bound_s: float) -> None:
        self.label = label
        self._run = run
        self._bound_s = bound_s  # how long one operation may take before its own timeout must have fired
        self._finished = threading.Event()
        self._result: ArrayT | None = None
        self._error: BaseException | None = None
        self._ahead: Handle[Any] | None = None  # the handle submitted just before, for the default wait bound

    def __repr__(self) -> str:
        return f"Handle({self.label}, {'done' if self.done() else 'pending'})"

    def done(self) -> bool:
        """Whether the operation finished (reduced or failed); wait() then returns or raises at once."""
        return self._finished.is_set()

    def wait(self, timeout: float | None = None) -> ArrayT:
        """The reduced array, once every rank took part; raises the error the synchronous call would have.

        `timeout` (seconds) bounds only this wait: when it passes, a CollectiveError says so and the operation
        goes on (wait again). None waits as long as the operations still ahead of it may take, each bounded by
        the communicator's timeout."""
        if not self._finished.is_set():
            seconds = timeout if timeout is not None else self._bound_s * (1 + self._queued_ahead())
            if not self._finished.wait(timeout=seconds):
                raise CollectiveError(f"{self.label} did not finish within {seconds:g} s of waiting; it is still "
                                      "queued or running on the communicator's background thread: call wait() "
                                      "again, or look at the other ranks' logs if one of them stopped")
        if self._error is not None:
            raise self._error
        return self._result  # type: ignore[return-value]

    def _queued_ahead(self) -> int:
        count, handle = 0, self._ahead
        while handle is not None and not handle.done() and count < 10_000:
            count, handle = count + 1, handle._ahead
        return count

    def _execute(self) -> None:
        try:
            self._result = self._run()
        except BaseException as exc:  # noqa: BLE001 - handed to the caller through wait()
            self._error = exc
        finally:
            self._run = _finished_run
            self._ahead = None
            self._finished.set()


def _finished_run() -> Any:
    raise AssertionError("a handle's operation runs once")


class AsyncQueue:
    """The communicator's background thread and its queue of handles, run strictly in submission order."""

    def __init__(self, name: str, bound_s: float) -> None:
        self._bound_s = bound_s
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._last: Handle[Any] | None = None
        self._closed = False
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._thread.start()

    def submit(self, label: str, run: Callable[[], ArrayT]) -> Handle[ArrayT]:
        """Queue `run` behind everything submitted before; returns its handle at once."""
        if self._closed:
            raise CollectiveError(f"{label}: the communicator is closed; collectives only work while the run is "
                                  "active")
        handle: Handle[ArrayT] = Handle(label, run, self._bound_s)
        handle._ahead = self._last
        self._last = handle
        self._queue.put(handle)
        return handle

    def busy(self) -> bool:
        """Whether something submitted has not finished yet (cheap: read on every synchronous call)."""
        last = self._last
        return last is not None and not last.done()

    def on_worker(self) -> bool:
        return threading.get_ident() == self._thread.ident

    def settle(self, what: str) -> None:
        """Wait until everything submitted has finished, so that `what` (a synchronous collective) runs after
        it on every rank. Errors stay with their handles; the communicator itself refuses work after one."""
        last = self._last
        if last is None or last.done() or self.on_worker():
            return
        deadline = Timeout(self._bound_s * (1 + last._queued_ahead()), f"{what}, waiting for the pending "
                           "asynchronous all-reduces before it")
        if not last._finished.wait(timeout=deadline.remaining()):
            raise deadline.error("the background thread did not finish them")

    def _loop(self) -> None:
        while True:
            handle = self._queue.get()
            if handle is _STOP:
                return
            handle._execute()

    def close(self, reason: str) -> None:
        """Stop the thread after what it is running; handles still queued fail with `reason`."""
        if self._closed:
            return
        self._closed = True
        while True:
            try:
                handle = self._queue.get_nowait()
            except queue.Empty:
                break
            if handle is not _STOP:
                handle._error = CollectiveError(f"{handle.label}: {reason}")
                handle._run = _finished_run
                handle._finished.set()
        self._queue.put(_STOP)
        if not self.on_worker():
            self._thread.join(timeout=self._bound_s)


__all__ = ["AsyncQueue", "Handle"]
