"""Run a rank's function in a fresh Python process, for frameworks whose state outlives a function.

TensorFlow's distribution strategies start gRPC servers and a collective runtime that cannot be
stopped and that refuse a second, different configuration in the same process. Spark reuses its
Python workers, so the next experiment on that worker would fail or find a port still bound. The
function therefore runs in a child process (as Spark's TorchDistributor does): the child sets up the
run context and output capture itself (`run_function`), streams its output to the driver over the
experiment's channel, writes its report to a file and ends with everything it started. A watchdog
ends the child when its parent dies, so no orphan keeps a port or a GPU.

    python -m hopsml.launcher.child <payload.pkl> <report.json>
"""

from __future__ import annotations

import json
import os
import pickle
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from typing import Any, Callable

from hopsml.launcher.task import TaskSpec

_WATCHDOG_INTERVAL_S = 1.0
_TAIL_LINES = 30


def _dumps(value: Any) -> bytes:
    """Pickle functions by value where their module cannot be imported (notebook cells, test files)."""
    try:
        import cloudpickle
    except ImportError:
        from pyspark import cloudpickle  # executors always have PySpark's copy
    return cloudpickle.dumps(value)


class ChildRank:
    """One rank's function running in a child process; `wait` returns run_function's report."""

    def __init__(self, fn: Callable[..., Any], spec: TaskSpec, *, rank: int, world_size: int,
                 write_metrics: bool, keep_stdin_open: bool = False) -> None:
        self._dir = tempfile.mkdtemp(prefix="hopsml-rank-")
        self._payload = os.path.join(self._dir, "payload.pkl")
        self._report = os.path.join(self._dir, "report.json")
        self._stderr_path = os.path.join(self._dir, "stderr.log")
        self.rank = rank
        with open(self._payload, "wb") as f:
            f.write(_dumps((fn, spec, {"rank": rank, "world_size": world_size, "write_metrics": write_metrics})))
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)  # what this worker can import
        self._stderr = open(self._stderr_path, "wb")
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "hopsml.launcher.child", self._payload, self._report],
            stdin=subprocess.PIPE if keep_stdin_open else subprocess.DEVNULL,
            stdout=self._stderr, stderr=subprocess.STDOUT, env=env, close_fds=True)

    def stop_input(self) -> None:
        """Close the child's stdin: a function waiting for it (a TensorFlow server) returns."""
        if self._proc.stdin is not None and not self._proc.stdin.closed:
            self._proc.stdin.close()

    def wait(self, timeout_s: float | None = None) -> dict[str, Any]:
        """Wait for the child (killing it after `timeout_s`) and return its report."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        try:
            while self._proc.poll() is None:
                if deadline is not None and time.monotonic() > deadline:
                    self._proc.kill()
                    self._proc.wait(10)
                    return self._lost(f"it did not end within {timeout_s:.0f} s and was killed")
                time.sleep(0.05)
            if os.path.exists(self._report):
                with open(self._report, encoding="utf-8") as f:
                    return json.load(f)
            return self._lost(f"its process exited with code {self._proc.returncode} before reporting")
        finally:
            self.close()

    def _lost(self, why: str) -> dict[str, Any]:
        return {"ok": False, "rank": self.rank, "error": f"rank {self.rank}: {why}", "traceback": "",
                "tail": self._stderr_tail()}

    def _stderr_tail(self) -> str:
        try:
            with open(self._stderr_path, encoding="utf-8", errors="replace") as f:
                return "\n".join(deque(f.read().splitlines(), maxlen=_TAIL_LINES))
        except OSError:
            return ""

    def close(self) -> None:
        """Kill the child if it still runs and remove its files."""
        if self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait(10)
        self.stop_input()
        self._stderr.close()
        shutil.rmtree(self._dir, ignore_errors=True)


def _watch_parent(parent: int) -> None:
    """End this process when the Spark worker that started it is gone."""

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(_WATCHDOG_INTERVAL_S)
        os._exit(3)

    threading.Thread(target=watch, name="hopsml-parent-watchdog", daemon=True).start()


def main(argv: list[str]) -> None:
    """Child entry point: run the pickled function as its rank and write the report."""
    payload_path, report_path = argv[1], argv[2]
    _watch_parent(os.getppid())
    from hopsml.launcher.task import run_function

    with open(payload_path, "rb") as f:
        fn, spec, options = pickle.load(f)
    report = run_function(fn, {}, spec, **options)
    partial = report_path + ".partial"
    with open(partial, "w", encoding="utf-8") as f:
        json.dump(report, f)
    os.replace(partial, report_path)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # frameworks' server threads must not keep the process alive


if __name__ == "__main__":
    main(sys.argv)
