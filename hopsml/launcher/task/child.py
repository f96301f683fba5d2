"""Run a rank's or a trial's function in a fresh Python process, so that nothing it does can take
its Spark task down with it.

TensorFlow's distribution strategies start gRPC servers and a collective runtime that cannot be
stopped and that refuse a second, different configuration in the same process. Spark reuses its
Python workers, so the next experiment on that worker would fail or find a port still bound. The
function therefore runs in a child process (as Spark's TorchDistributor does): the child sets up the
run context and output capture itself (`run_function`), streams its output to the driver over the
experiment's channel, writes its report to a file and ends with everything it started. A watchdog
ends the child when its parent dies, so no orphan keeps a port or a GPU.

The trials of a search run the same way: a trial that ends its process (os._exit, a segfault, the
kernel's out-of-memory killer) is reported as a failure with its exit cause, the task itself ends
normally and the search goes on. Their native output (C code, os.write) is captured in the log too.

    python -m hopsml.launcher.task.child <payload.pkl> <report.json> <fd of a pipe with the channel secret>

The child's folder ($TMPDIR/hopsml-rank-<parent pid>-XXXX: payload, report, raw output) is private
(0700), holds no secret, and is removed by the parent when the child ends, by the child itself when
its parent dies first, and, when both were killed at once, by the next rank started on the host.
"""

from __future__ import annotations

import dataclasses
import faulthandler
import json
import logging
import os
import pickle
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable
from typing import Any

from hopsml import layout, orphans
from hopsml.launcher.channel import TaskChannel
from hopsml.launcher.messages import PROCESS, Finished, RankReport, to_wire
from hopsml.launcher.spec import TaskSpec

log = logging.getLogger(__name__)

PREFIX = "hopsml-rank-"  # $TMPDIR/hopsml-rank-<parent pid>-<random>
_WATCHDOG_INTERVAL_S = 1.0
_TAIL_LINES = 30


def _dumps(value: object) -> bytes:
    """Pickle functions by value where their module cannot be imported (notebook cells, test files).

    PySpark's own copy first: it is the one the driver registered by-value modules with, and it keeps
    each function's file name, so a failing rank's traceback shows the user's source lines (the
    standalone cloudpickle 3.1.3+ renames every such file to ``<dynamic-code>``).
    """
    try:
        from pyspark import cloudpickle
    except ImportError:  # a rank run without Spark
        import cloudpickle  # type: ignore[no-redef]
    return cloudpickle.dumps(value)


class ChildRank:
    """One rank's (or trial's) function running in a child process; `wait` returns run_function's report."""

    def __init__(self, fn: Callable[..., Any], spec: TaskSpec, *, rank: int, world_size: int,
                 write_metrics: bool, keep_stdin_open: bool = False, kwargs: dict[str, Any] | None = None,
                 native_output: bool = False, timeline: bool = False, fork: bool = False) -> None:
        self._started = time.monotonic()
        sweep_dead()
        # 0700 (mkdtemp), named by this process so that a later run can tell when its owner is gone
        self._dir = tempfile.mkdtemp(prefix=f"{PREFIX}{os.getpid()}-")
        self._payload = os.path.join(self._dir, "payload.pkl")
        self._report = os.path.join(self._dir, "report.json")
        self._stderr_path = os.path.join(self._dir, "stderr.log")
        # a working directory of its own, as each task had its container's folder on Hopsworks: trials and
        # ranks running at once cannot write over each other's relative files (a file returned is kept)
        self._workdir = os.path.join(self._dir, "work")
        os.mkdir(self._workdir)
        self.rank, self._spec = rank, spec
        options = {"rank": rank, "world_size": world_size, "write_metrics": write_metrics,
                   "native_output": native_output, "timeline": timeline}
        if fork and not keep_stdin_open and hasattr(os, "fork") and fork_is_safe():
            try:
                self._proc: Any = self._fork(fn, spec, kwargs or {}, options)
                return
            except OSError:   # no fork here (a sandbox's limit): a fresh interpreter, as below
                pass
        # the channel secret goes through a pipe, never into a file: the payload's spec has none
        payload = _dumps((fn, dataclasses.replace(spec, secret=b""), kwargs or {}, options))
        with open(os.open(self._payload, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb") as f:
            f.write(payload)
        env = dict(os.environ)
        # what this worker can import, and the folder it runs in (a notebook's own modules)
        env["PYTHONPATH"] = os.pathsep.join([os.getcwd(), *(p for p in sys.path if p)])
        self._stderr = open(self._stderr_path, "wb")
        secret_in, secret_out = os.pipe()
        try:
            os.write(secret_out, spec.secret)  # a few bytes: the pipe's buffer holds them until the child reads
            os.close(secret_out)
            secret_out = -1
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "hopsml.launcher.task.child", self._payload, self._report, str(secret_in)],
                stdin=subprocess.PIPE if keep_stdin_open else subprocess.DEVNULL,
                stdout=self._stderr, stderr=subprocess.STDOUT, env=env, close_fds=True, pass_fds=(secret_in,),
                cwd=self._workdir,
                # its own session: a SIGKILL of the worker's process group (a driver stopped by Ctrl-C) leaves
                # it alive long enough to see its parent gone and remove its folder itself
                start_new_session=True)
        finally:
            os.close(secret_in)
            if secret_out >= 0:
                os.close(secret_out)

    def _fork(self, fn: Callable[..., Any], spec: TaskSpec, kwargs: dict[str, Any], options: dict[str, Any]
              ) -> Forked:
        """The child as a fork of this task's Python worker, which has hopsml loaded (and keeps it for the
        next run): a fresh interpreter spent 0.9 s of a no-op launch's 1.3 s starting and importing. The fork
        runs exactly what :func:`main` runs, in its own session, folder, output file and working directory."""
        from hopsml.launcher.task.function import run_function  # loaded here, once per worker, not per child

        self._stderr = open(self._stderr_path, "wb")
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        parent = os.getpid()
        pythonpath = os.pathsep.join([os.getcwd(), *(p for p in sys.path if p)])
        pid = os.fork()
        if pid == 0:   # the child: never returns
            try:
                enter_fork(self._stderr.fileno(), parent, self._dir, self._workdir)
                os.environ["PYTHONPATH"] = pythonpath   # what a fresh child would have had, for its own children
                _write_report(self._report, run_function(fn, kwargs, spec, **options))
                sys.stdout.flush()
            finally:
                os._exit(0)
        return Forked(pid)

    def stop_input(self) -> None:
        """Close the child's stdin: a function waiting for it (a TensorFlow server) returns."""
        stdin = getattr(self._proc, "stdin", None)
        if stdin is not None and not stdin.closed:
            self._proc.stdin.close()

    def wait(self, timeout_s: float | None = None) -> dict[str, Any]:
        """Wait for the child (killing it after `timeout_s`) and return its report."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        exited = _exit_waiter(self._proc.pid)
        try:
            while True:
                left = 1.0 if deadline is None else min(1.0, deadline - time.monotonic())
                exited(max(left, 0.0))
                if self._proc.poll() is not None:
                    break
                if deadline is not None and time.monotonic() > deadline:
                    self._proc.kill()
                    self._proc.wait(10)
                    return self._lost(f"it did not end within {timeout_s:.0f} s and was killed")
            if os.path.exists(self._report):
                with open(self._report, encoding="utf-8") as f:
                    return json.load(f)
            return self._lost(exit_cause(self._proc.returncode) + " before returning a result")
        finally:
            self.close()

    def _lost(self, why: str) -> dict[str, Any]:
        spec = self._spec
        who = f"rank {self.rank}"
        if spec.trial is not None:  # by its parameters where known: an index means nothing to the user
            who = f"trial {spec.trial_name or spec.trial}"
        tail = self._tail()
        report = RankReport(False, rank=self.rank, trial=self._spec.trial, error=f"{who}: {why}", tail=tail,
                            duration=round(time.monotonic() - self._started, 3), cause=PROCESS)
        self._tell_driver(report)
        return report.to_wire()

    def _tell_driver(self, report: RankReport) -> None:
        """Send the 'finished' message the child could not, so the driver learns of the failure now."""
        if self._spec.channel_address is None:
            return
        channel = TaskChannel.connect(self._spec.channel_address, self._spec.secret)
        if channel is not None:
            channel.send(to_wire(Finished(report)))
            channel.close()

    def _tail(self) -> str:
        return output_tail(self._spec, self._stderr_path)

    def close(self) -> None:
        """Kill the child if it still runs and remove its files."""
        if self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait(10)
        self.stop_input()
        self._stderr.close()
        shutil.rmtree(self._dir, ignore_errors=True)


FORK_SAFE_THREADS = {"jemalloc_bg_thd"}   # native threads whose library makes them safe across a fork


def fork_is_safe() -> bool:
    """Whether every thread of this process is a Python thread (hopsml's own: the task's channel, its watchdogs),
    whose state the fork's child does not touch. A native library that started threads of its own (S3's client,
    once the worker read an S3 root; a framework's pools) leaves state a fork copies half-made: a child forked
    beside the S3 client's threads died of SIGSEGV. Then the child is a fresh interpreter. pyarrow's jemalloc
    keeps a background thread that is made for forks (its at-fork handlers): it does not count."""
    try:
        native = 0
        for task in os.listdir("/proc/self/task"):
            with open(f"/proc/self/task/{task}/comm", encoding="utf-8", errors="replace") as comm:
                native += comm.read().strip() not in FORK_SAFE_THREADS
        return native == threading.active_count()
    except OSError:   # no /proc (or a thread ended while read): nothing tells, so no fork
        return False


def enter_fork(output: int, parent: int, folder: str, workdir: str, keep: frozenset[int] = frozenset()) -> None:
    """In a fork of a task's Python worker, before its work: its own session and default signals, no stdin, its
    output to `output`, none of the worker's sockets and files but `keep`, `workdir` as its folder, and a watchdog
    that ends it (and removes `folder`) when `parent` is gone: what a freshly started child would have."""
    os.setsid()
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGCHLD):
        signal.signal(sig, signal.SIG_DFL)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(output, 1)
    os.dup2(output, 2)
    for fd in os.listdir("/proc/self/fd") if os.path.isdir("/proc/self/fd") else []:
        if int(fd) > 2 and int(fd) not in keep:   # the Spark worker's sockets and files are not the child's
            try:
                os.close(int(fd))
            except OSError:
                pass
    sys.stdin = open(0, closefd=False)
    sys.stdout = sys.stderr = open(1, "w", buffering=1, closefd=False)
    os.chdir(workdir)
    _watch_parent(parent, folder)
    faulthandler.enable(all_threads=False)


def _exit_waiter(pid: int) -> Callable[[float], None]:
    """A function that sleeps until process `pid` ends or the seconds given pass. Linux's pidfd wakes it once,
    at the end: the task's worker sleeps through a rank's run, where polling woke it every few milliseconds on
    the cores the ranks share (an all-reduce of 4 KiB waits microseconds for its peer). Elsewhere it polls."""
    try:
        fd = os.pidfd_open(pid)
    except (AttributeError, OSError):   # no pidfd (not Linux 5.3+), or the process is already gone
        return lambda seconds: time.sleep(min(seconds, 0.005))
    poller = select.poll()
    poller.register(fd, select.POLLIN)

    def exited(seconds: float) -> None:
        poller.poll(seconds * 1000)

    weakref.finalize(exited, os.close, fd)
    return exited


class Forked:
    """The few things of subprocess.Popen that a forked child's owner uses (poll, wait, kill)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: float) -> int:
        deadline = time.monotonic() + timeout
        while self.poll() is None:
            if time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(f"child {self.pid}", timeout)
            time.sleep(0.005)
        return int(self.returncode or 0)

    def kill(self) -> None:
        if self.poll() is None:
            os.kill(self.pid, signal.SIGKILL)


def _write_report(report_path: str, report: dict[str, Any]) -> None:
    """The report, whole or not at all: the parent reads it once the child has ended."""
    partial = report_path + ".partial"
    with open(partial, "w", encoding="utf-8") as f:
        json.dump(report, f)
    os.replace(partial, report_path)


def output_tail(spec: TaskSpec, raw_output: str) -> str:
    """The last lines a child wrote: its run's log where it is on this disk, else its raw output."""
    log_file = spec.storage.local_path(layout.join(spec.run_dir, spec.log_name))
    lines: list[str] = []
    for path in (log_file, raw_output):
        try:
            with open(path or "", encoding="utf-8", errors="replace") as f:
                lines.extend(deque((line.rstrip("\n") for line in f), maxlen=_TAIL_LINES))
        except OSError:
            continue
    return "\n".join(lines[-_TAIL_LINES:])


def exit_cause(returncode: int) -> str:
    """Why a process ended, in words: its exit code, or the signal that killed it.

    >>> exit_cause(3)
    'its process exited with exit code 3'
    >>> exit_cause(-11)
    'its process was killed by SIGSEGV (Segmentation fault)'
    """
    if returncode >= 0:
        return f"its process exited with exit code {returncode}"
    try:
        name = signal.Signals(-returncode).name
    except ValueError:
        name = f"signal {-returncode}"
    text = f"its process was killed by {name} ({signal.strsignal(-returncode) or 'unknown signal'})"
    if -returncode == signal.SIGKILL:
        text += "; from outside the process, often the kernel's out-of-memory killer: give it more memory"
    return text


def sweep_dead(tmp: str | None = None) -> list[str]:
    """Remove the folders of children whose parent process is gone (both killed at once, say by the
    out-of-memory killer); returns them. A folder whose parent lives is never touched."""
    return orphans.sweep(PREFIX, "a rank", tmp=tmp)


def _watch_parent(parent: int, folder: str) -> None:
    """End this process when the Spark worker that started it is gone, removing its folder (the parent,
    which would have, cannot any more)."""

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(_WATCHDOG_INTERVAL_S)
        shutil.rmtree(folder, ignore_errors=True)
        os._exit(3)

    threading.Thread(target=watch, name="hopsml-parent-watchdog", daemon=True).start()


def main(argv: list[str]) -> None:
    """Child entry point: run the pickled function as its rank and write the report."""
    payload_path, report_path, secret_fd = argv[1], argv[2], int(argv[3])
    _watch_parent(os.getppid(), os.path.dirname(payload_path))
    faulthandler.enable(all_threads=False)  # a fatal error's Python traceback goes to the log (or the raw output)
    from hopsml.launcher.task.function import run_function

    secret = b""
    while chunk := os.read(secret_fd, 4096):
        secret += chunk
    os.close(secret_fd)
    with open(payload_path, "rb") as f:
        fn, spec, kwargs, options = pickle.load(f)
    os.remove(payload_path)  # read once: the function and its arguments need not stay on disk
    spec = dataclasses.replace(spec, secret=secret)
    _write_report(report_path, run_function(fn, kwargs, spec, **options))
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # frameworks' server threads must not keep the process alive


if __name__ == "__main__":
    main(sys.argv)
