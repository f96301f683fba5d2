"""Spark standalone daemons for the cluster tests: a master and workers started with spark-class."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

START_TIMEOUT_S = 120.0
RUN_TIMEOUT_S = 420.0


def _spark_class() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent / "bin" / "spark-class"


def java_missing() -> bool:
    java_home = os.environ.get("JAVA_HOME")
    return shutil.which("java") is None and not (java_home and Path(java_home, "bin", "java").exists())


class Daemon:
    """A spark-class process in its own process group (its executors too), logging to a file."""

    def __init__(self, name: str, args: list[str], env: dict[str, str], log_dir: Path,
                 prefix: Sequence[str] = ()) -> None:
        """`prefix`: a command that runs spark-class, e.g. inside another network namespace."""
        self.name = name
        self.log = log_dir / f"{name}.log"
        with open(self.log, "wb") as out:
            self.process = subprocess.Popen([*prefix, str(_spark_class()), *args], stdout=out,
                                            stderr=subprocess.STDOUT, env=env, start_new_session=True)

    def wait_for(self, pattern: str) -> re.Match[str]:
        """The first match of `pattern` in the log, waiting at most START_TIMEOUT_S."""
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            match = re.search(pattern, self.log.read_text(errors="replace"))
            if match:
                return match
            if self.process.poll() is not None:
                break
            time.sleep(0.2)
        raise AssertionError(f"{self.name} did not log {pattern!r}; its log:\n{self.log.read_text()[-3000:]}")

    def stop(self) -> None:
        """End the whole process group (the daemon and the executors it started), SIGKILL if needed."""
        for sig, wait_s in ((signal.SIGTERM, 20.0), (signal.SIGKILL, 10.0)):
            try:
                os.killpg(self.process.pid, sig)
            except ProcessLookupError:
                return
            deadline = time.monotonic() + wait_s
            while time.monotonic() < deadline:
                self.process.poll()
                try:
                    os.killpg(self.process.pid, 0)
                except ProcessLookupError:
                    return
                time.sleep(0.2)

    def alive(self) -> bool:
        try:
            os.killpg(self.process.pid, 0)
        except ProcessLookupError:
            return False
        return True


def run_driver(script: Path, env: dict[str, str], cwd: Path, python: str = sys.executable,
               args: Sequence[str] = ()) -> tuple[int, dict[str, dict], str]:
    """Run a driver program in its own process (one SparkContext per process) with `python`; returns its exit
    status, the JSON steps it printed (lines of objects with a "step", by it) and the end of its stderr."""
    log_path = cwd / f"{script.stem}.log"
    with open(log_path, "wb") as log:
        driver = subprocess.Popen([python, str(script), *args], stdout=subprocess.PIPE, stderr=log, env=env,
                                  cwd=cwd, start_new_session=True)
        try:
            out, _ = driver.communicate(timeout=RUN_TIMEOUT_S)
        finally:
            if driver.poll() is None:
                os.killpg(driver.pid, signal.SIGKILL)
                driver.wait(10)
    lines = (line for line in out.decode().splitlines() if line.startswith('{"step": '))  # not the live output
    steps = {s["step"]: s for s in map(json.loads, lines)}
    return driver.returncode, steps, log_path.read_text(errors="replace")[-4000:]


def stop_all(daemons: list[Daemon]) -> None:
    """Stop the daemons, workers before the master; fails if any process of theirs is still running."""
    for daemon in reversed(daemons):
        daemon.stop()
    leftovers = [d.name for d in daemons if d.alive()]
    assert not leftovers, f"still running after the test: {leftovers}"
