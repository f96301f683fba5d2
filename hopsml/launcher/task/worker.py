"""Task side of a search's long-lived slot tasks: one Spark task per slot that runs trial after trial, so
a trial costs neither a Spark job nor a process start.

The task tells the driver it is `Ready` over the run's channel, then takes `Assign`ed jobs until the
driver says `Stop`. Each job runs in one worker process the task keeps (`WorkerProcess`, forked from the
task so that it starts with the function loaded), with the trial's own folder, log, seed and working
directory, exactly as a child of its own would run it (launcher/task/child.py): a trial that ends the process
(os._exit, a segfault, the out-of-memory killer) is reported FAILED with its exit cause, and the next job gets
a fresh process.

    python -m hopsml.launcher.task.worker <payload.pkl> <secret fd> <jobs fd> <reports fd>
"""

from __future__ import annotations

import dataclasses
import faulthandler
import json
import os
import pickle
import queue
import select
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from typing import Any

from hopsml.errors import ClusterError
from hopsml.launcher.channel import TaskChannel
from hopsml.launcher.messages import (
    PROCESS,
    Assign,
    Finished,
    RankReport,
    Ready,
    Stop,
    decode,
    to_wire,
    unpack_arguments,
)
from hopsml.launcher.spec import TaskSpec
from hopsml.launcher.task.child import (
    PREFIX,
    _dumps,
    _watch_parent,
    enter_fork,
    exit_cause,
    fork_is_safe,
    output_tail,
    sweep_dead,
)
from hopsml.launcher.task.child import Forked as _Forked

_POLL_S = 1.0   # how often a wait looks whether the process or the driver is gone


class WorkerProcess:
    """A process that runs the trials of one slot in turn; `run` returns a job's report (wire form).

    It is forked from the slot task, which has the function and hopsml loaded already, so it costs no
    interpreter start and no imports; where forking is not possible it is a fresh Python."""

    def __init__(self, fn: Callable[..., Any], spec: TaskSpec) -> None:
        sweep_dead()
        self._dir = tempfile.mkdtemp(prefix=f"{PREFIX}{os.getpid()}-")   # 0700, named by this process
        self._raw = os.path.join(self._dir, "stderr.log")   # what it writes outside a trial's log
        jobs_in, self._jobs = os.pipe()
        self._reports, reports_out = os.pipe()
        try:
            if not fork_is_safe():
                raise OSError("this worker runs other threads: a fork is not safe")
            self._proc: Any = self._fork(fn, spec, jobs_in, reports_out)
        except OSError:   # a fresh interpreter instead
            self._proc = self._spawn(fn, spec, jobs_in, reports_out)
        finally:
            os.close(jobs_in)
            os.close(reports_out)

    def _fork(self, fn: Callable[..., Any], spec: TaskSpec, jobs_in: int, reports_out: int) -> _Forked:
        raw = os.open(self._raw, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        parent = os.getpid()
        pid = os.fork()
        if pid == 0:   # the worker: its own session, its output to the raw file, the job loop
            try:
                enter_fork(raw, parent, self._dir, self._dir, keep=frozenset({jobs_in, reports_out}))
                _run_jobs(fn, spec, jobs_in, reports_out, self._dir)
            finally:
                os._exit(0)
        os.close(raw)
        return _Forked(pid)

    def _spawn(self, fn: Callable[..., Any], spec: TaskSpec, jobs_in: int, reports_out: int) -> Any:
        payload = os.path.join(self._dir, "payload.pkl")
        with open(os.open(payload, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb") as f:
            f.write(_dumps((fn, dataclasses.replace(spec, secret=b""))))   # the secret goes through a pipe
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([os.getcwd(), *(p for p in sys.path if p)])
        secret_in, secret_out = os.pipe()
        os.write(secret_out, spec.secret)
        os.close(secret_out)
        with open(self._raw, "ab") as raw:
            try:
                return subprocess.Popen(
                    [sys.executable, "-m", "hopsml.launcher.task.worker", payload, str(secret_in), str(jobs_in),
                     str(reports_out)], stdin=subprocess.DEVNULL, stdout=raw, stderr=subprocess.STDOUT, env=env,
                    close_fds=True, pass_fds=(secret_in, jobs_in, reports_out), cwd=self._dir,
                    start_new_session=True)   # outlives a kill of the worker's group long enough to clean up
            finally:
                os.close(secret_in)

    def alive(self) -> bool:
        return self._proc.poll() is None

    def run(self, spec: TaskSpec, kwargs: dict[str, Any]) -> dict[str, Any]:
        """Run one trial (`spec` names its folder) and return its report; a process that died is a failure."""
        started = time.monotonic()
        job = {"run_dir": spec.run_dir, "trial": spec.trial, "trial_name": spec.trial_name, "kwargs": kwargs}
        try:
            os.write(self._jobs, (json.dumps(job) + "\n").encode("utf-8"))
        except OSError:
            return self._lost(spec, started)
        line = b""
        while not line.endswith(b"\n"):
            readable, _, _ = select.select([self._reports], [], [], _POLL_S)
            if not readable:
                continue
            chunk = os.read(self._reports, 1 << 16)
            if not chunk:   # the process ended before it reported
                return self._lost(spec, started)
            line += chunk
        return dict(json.loads(line))

    def _lost(self, spec: TaskSpec, started: float) -> dict[str, Any]:
        try:
            code = self._proc.wait(30)
            why = exit_cause(code)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            why = "it stopped answering and was killed"
        report = RankReport(False, rank=0, trial=spec.trial, error=f"trial {spec.trial_name or spec.trial}: {why} "
                            "before returning a result", tail=output_tail(spec, self._raw),
                            duration=round(time.monotonic() - started, 3), cause=PROCESS)
        return report.to_wire()

    def close(self) -> None:
        """End the process (it ends by itself once its job pipe closes) and remove its folder."""
        for fd in (self._jobs, self._reports):
            try:
                os.close(fd)
            except OSError:
                pass
        try:
            self._proc.wait(10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait(10)
        shutil.rmtree(self._dir, ignore_errors=True)


def slot_task(fn: Callable[..., Any], spec: TaskSpec) -> Callable[[Iterator[int]], Iterator[dict[str, Any]]]:
    """The function Spark runs in each slot task (its partition holds its slot number): the reports of the
    jobs it ran, each also sent to the driver as soon as it ends."""

    def run_slot(partition: Iterator[int]) -> Iterator[dict[str, Any]]:
        for slot in partition:
            yield from _serve(fn, spec, slot)

    return run_slot


def _serve(fn: Callable[..., Any], spec: TaskSpec, slot: int) -> Iterator[dict[str, Any]]:
    if spec.channel_address is None:
        raise ClusterError("a slot task needs the driver's channel")
    channel = TaskChannel.connect(spec.channel_address, spec.secret)
    if channel is None:
        raise ClusterError(f"slot task {slot} cannot reach the driver at {spec.channel_address[0]}:"
                           f"{spec.channel_address[1]}; check the network_interface setting")
    worker: WorkerProcess | None = None
    try:
        worker = WorkerProcess(fn, spec)   # started before the first job: it loads while the others start
        channel.send(to_wire(Ready(slot, socket.gethostname(), os.getpid())))
        while (job := _next_job(channel)) is not None:
            job_spec = dataclasses.replace(spec, run_dir=job.run_dir, trial=job.trial, trial_name=job.trial_name)
            if worker is not None and not worker.alive():   # the last trial ended its process
                worker.close()
                worker = None
            worker = worker or WorkerProcess(fn, spec)
            report = worker.run(job_spec, job.kwargs)
            channel.send(to_wire(Finished(RankReport.from_wire(report))))
            yield report
    finally:
        if worker is not None:
            worker.close()
        channel.close()


def _next_job(channel: TaskChannel) -> Assign | None:
    """The driver's next job for this slot; None once it says Stop or is gone."""
    while True:
        try:
            message = decode(channel.inbox.get(timeout=_POLL_S))
        except queue.Empty:
            if channel.ended.is_set() and channel.inbox.empty():
                return None
            continue
        if isinstance(message, Assign):
            return message
        if isinstance(message, Stop):
            return None


def _run_jobs(fn: Callable[..., Any], spec: TaskSpec, jobs_fd: int, reports_fd: int, home: str) -> None:
    """The worker's loop: run each job read from the job pipe, write its report to the report pipe."""
    from hopsml.launcher.task.function import run_function

    with os.fdopen(jobs_fd, "r", encoding="utf-8") as jobs, os.fdopen(reports_fd, "w", encoding="utf-8") as reports:
        for n, line in enumerate(jobs):
            job = json.loads(line)
            # a working directory of its own per trial, as a child of its own had
            work = os.path.join(home, f"work-{n}")
            os.mkdir(work)
            os.chdir(work)
            job_spec = dataclasses.replace(spec, run_dir=job["run_dir"], trial=job["trial"],
                                           trial_name=job["trial_name"])
            report = run_function(fn, unpack_arguments(job["kwargs"]), job_spec, rank=0, world_size=1,
                                  write_metrics=True, native_output=True)
            os.chdir(home)
            shutil.rmtree(work, ignore_errors=True)
            reports.write(json.dumps(report, default=str) + "\n")
            reports.flush()
    sys.stdout.flush()
    sys.stderr.flush()


def main(argv: list[str]) -> None:
    """The worker as a fresh Python (where it cannot be forked): read the function, then the job loop."""
    payload_path, secret_fd, jobs_fd, reports_fd = argv[1], int(argv[2]), int(argv[3]), int(argv[4])
    home = os.path.dirname(payload_path)
    _watch_parent(os.getppid(), home)
    faulthandler.enable(all_threads=False)
    secret = b""
    while chunk := os.read(secret_fd, 4096):
        secret += chunk
    os.close(secret_fd)
    with open(payload_path, "rb") as f:
        fn, spec = pickle.load(f)
    os.remove(payload_path)
    _run_jobs(fn, dataclasses.replace(spec, secret=secret), jobs_fd, reports_fd, home)
    os._exit(0)  # frameworks' server threads must not keep the process alive


if __name__ == "__main__":
    main(sys.argv)
