"""Run a function in several real rank processes connected by hopsml.collective over 127.0.0.1.

The rendezvous is the launcher's, with multiprocessing in place of Spark: each rank listens first and
reports its address; the parent collects all of them once and hands the list to every rank; then each
rank connects and runs the target inside `collective.use(comm)`.
"""

from __future__ import annotations

import logging
import multiprocessing as mp
import queue
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from hopsml.cluster import auth

_START_METHOD = "forkserver" if "forkserver" in mp.get_all_start_methods() else "spawn"


@dataclass
class Outcome:
    """What one rank did: its return value, or the exception it raised, plus its collective log lines."""

    rank: int
    value: Any = None
    error_type: str | None = None
    error: str | None = None
    logs: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.error_type is None


class _ListHandler(logging.Handler):
    def __init__(self, lines: list[str]) -> None:
        super().__init__(logging.DEBUG)
        self.lines = lines

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(f"{record.levelname} {record.getMessage()}")


def _rank_entry(rank: int, size: int, target: Callable[..., Any], args: tuple, timeout_s: float,
                address_q: mp.Queue, conn: Any, result_q: mp.Queue, env: dict[str, str], options: Any) -> None:
    import os

    os.environ.update(env)
    from hopsml import collective

    lines: list[str] = []
    log = logging.getLogger("hopsml.collective")
    log.addHandler(_ListHandler(lines))
    log.setLevel(logging.DEBUG)
    outcome = Outcome(rank, logs=lines)
    try:
        listener, address = collective.listen("127.0.0.1")
        address_q.put((rank, address))
        addresses, secret = conn.recv()
        with collective.Communicator.connect(rank, size, addresses, listener, secret, timeout_s,
                                             options=options) as comm, collective.use(comm):
            outcome.value = target(rank, size, *args)
    except BaseException as exc:  # noqa: BLE001 - reported to the test, which decides whether it was expected
        outcome.error_type, outcome.error = type(exc).__name__, str(exc)
    result_q.put(outcome)


def run_ranks(target: Callable[..., Any], size: int, *args: Any, timeout_s: float = 20.0, join_s: float = 90.0,
              before_start: Callable[[list[str]], None] | None = None,
              env: Callable[[int], dict[str, str]] | None = None,
              options: Callable[[int], Any] | None = None) -> dict[int, Outcome]:
    """Run `target(rank, size, *args)` in `size` processes; returns each rank's Outcome (missing if it died).

    `env(rank)` gives environment variables set in that rank before it connects (e.g. a host id, so
    that ranks on this machine look like ranks on different hosts); `options(rank)`, the CollectiveOptions
    that rank connects with, as the launcher passes them (None: the rank resolves its own settings).
    `before_start(addresses)` runs after all ranks listen and before they learn the addresses. The test
    fails, instead of hanging, if the ranks are not done after `join_s` seconds.
    """
    ctx = mp.get_context(_START_METHOD)
    address_q, result_q = ctx.Queue(), ctx.Queue()
    pipes = [ctx.Pipe() for _ in range(size)]
    processes = [ctx.Process(target=_rank_entry, daemon=True,
                             args=(r, size, target, args, timeout_s, address_q, pipes[r][1], result_q,
                                   env(r) if env is not None else {}, options(r) if options is not None else None))
                 for r in range(size)]
    for process in processes:
        process.start()
    deadline = time.monotonic() + join_s
    results: dict[int, Outcome] = {}
    try:
        found = dict(address_q.get(timeout=join_s) for _ in range(size))
        addresses = [found[r] for r in range(size)]
        if before_start is not None:
            before_start(addresses)
        secret = auth.new_secret()
        for r in range(size):
            pipes[r][0].send((addresses, secret))
        while len(results) < size:
            try:
                outcome = result_q.get(timeout=0.2)
                results[outcome.rank] = outcome
            except queue.Empty:
                if all(not p.is_alive() for p in processes) and result_q.empty():
                    break
                if time.monotonic() > deadline:
                    pytest.fail(f"ranks did not finish within {join_s} s (a hang); results so far: {results}")
    finally:
        for process in processes:
            process.join(timeout=max(0.1, deadline - time.monotonic()))
            if process.is_alive():
                process.kill()
                process.join()
    return results
