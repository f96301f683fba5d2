"""One run of a job as every process sees it: `Jobs/<name>/executions/<id>/execution.json`, its logs and what it
produced, with hopsworks' Execution names (`state`, `final_status`, `success`, `await_termination`, `stop`,
`download_logs`).

Who writes the record: the process that starts the run writes it once (INITIALIZING); from then on only the
run's runner process (runner.py) writes it (RUNNING, then the end). A reader that finds the runner gone while
the record still says INITIALIZING or RUNNING shows the execution as LOST (final status FAILED), as
tracking/record.py shows experiments whose driver died: on the runner's host from its pid and start time (and
then records it, ending what the runner left running), elsewhere from its heartbeat.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from hopsml import execution_notes, layout
from hopsml.clock import utc_now as now
from hopsml.errors import JobError, StorageError
from hopsml.fs import Storage
from hopsml.processes import Proc, wait_gone
from hopsml.records import BrokenRecordError, Shape, read_record
from hopsml.tracking.heartbeat import age_text, last_beat

log = logging.getLogger(__name__)

INITIALIZING, RUNNING = "INITIALIZING", "RUNNING"
FINISHED, FAILED, KILLED, LOST = "FINISHED", "FAILED", "KILLED", "LOST"
LIVE = (INITIALIZING, RUNNING)
FINAL_STATUS = {FINISHED: "SUCCEEDED", FAILED: "FAILED", KILLED: "KILLED", LOST: "FAILED"}
UNDEFINED = "UNDEFINED"
STOP_GRACE_S = 10.0        # between SIGTERM and SIGKILL to the job's processes
_POLL_S = 2.0              # longest wait between two reads of the record while awaiting
_TAIL_BYTES = 256 << 10    # read at most this much of a log's end for its last lines




def epoch(stamp: str | None) -> float | None:
    try:
        return datetime.fromisoformat(stamp).timestamp() if stamp else None
    except (TypeError, ValueError):
        return None


def _proc(data: object) -> Proc | None:
    try:
        return Proc.from_dict(data) if data else None
    except (KeyError, TypeError, ValueError):
        return None


class Execution:
    """One execution of a job (hopsworks' Execution): read from its record, refreshed on request."""

    def __init__(self, storage: Storage, project: str, job_name: str, execution_id: int, record: dict[str, Any],
                 lost_after_s: float = 120.0) -> None:
        self.storage, self.project, self._job_name = storage, project, job_name
        self.dir = layout.JobDir.of(project, job_name).execution(execution_id)
        self._record = record
        self.lost_after_s = lost_after_s
        self._derive()

    @classmethod
    def load(cls, storage: Storage, project: str, job_name: str, execution_id: int,
             lost_after_s: float = 120.0) -> Execution:
        """The execution as its record says now; JobError naming it when there is none."""
        edir = layout.JobDir.of(project, job_name).execution(execution_id)
        return cls(storage, project, job_name, edir.id, _read(storage, edir, job_name), lost_after_s)

    def __repr__(self) -> str:
        return f"Execution({self.job_name!r}, {self.id}, {self.state!r}, {self.final_status!r})"

    # --- what it is --------------------------------------------------------------------------------
    @property
    def id(self) -> int:
        return self.dir.id

    @property
    def job_name(self) -> str:
        return self._job_name

    @property
    def record(self) -> dict[str, Any]:
        """The record as read (a copy), with the state shown (LOST where the runner is gone)."""
        return {**self._record, "state": self.state, "final_status": self.final_status}

    @property
    def state(self) -> str:
        """INITIALIZING, RUNNING, FINISHED, FAILED, KILLED or LOST."""
        return self._state

    @property
    def final_status(self) -> str:
        """UNDEFINED while it runs, then SUCCEEDED, FAILED (also when LOST) or KILLED."""
        return FINAL_STATUS.get(self._state, UNDEFINED)

    @property
    def success(self) -> bool | None:
        """True when it finished with exit code 0, False when it failed, was killed or lost; None while it runs."""
        return None if self._state in LIVE else self._state == FINISHED

    @property
    def done(self) -> bool:
        return self._state not in LIVE

    @property
    def exit_code(self) -> int | None:
        """The app's exit status (negative: ended by that signal); None while it runs or when it never ran."""
        return self._record.get("exit_code")

    @property
    def start(self) -> str | None:
        return self._record.get("start") or self._record.get("submission_time")

    @property
    def submission_time(self) -> str | None:
        return self._record.get("submission_time")

    @property
    def end(self) -> str | None:
        return self._record.get("end")

    @property
    def duration_s(self) -> float | None:
        """Seconds from start to end, or so far while it runs."""
        start, end = epoch(self.start), epoch(self.end)
        if start is None:
            return None
        return round((end if end is not None else time.time()) - start, 3)

    @property
    def duration(self) -> int | None:
        """Milliseconds, as hopsworks gives it."""
        seconds = self.duration_s
        return None if seconds is None else int(seconds * 1000)

    @property
    def args(self) -> list[str]:
        return list(self._record.get("args") or [])

    @property
    def user(self) -> str | None:
        return self._record.get("user")

    @property
    def error(self) -> str | None:
        """Why it failed or was lost, where hopsml knows more than the exit code."""
        return self._record.get("lost_reason") or self._record.get("error")

    @property
    def produced(self) -> list[dict[str, Any]]:
        """What it produced, one {"kind": ..., ...} per object: experiments, datasets, feature group commits,
        models, servings; read from its notes while it runs."""
        if self.done and "produced" in self._record:
            return list(self._record["produced"])
        try:
            return execution_notes.parse(self.storage.read_text(self.dir.notes))
        except StorageError:
            return []

    @property
    def stdout_path(self) -> str:
        return self.storage.uri(self.dir.stdout)

    @property
    def stderr_path(self) -> str:
        return self.storage.uri(self.dir.stderr)

    # --- following it ----------------------------------------------------------------------------------
    def refresh(self) -> Execution:
        """Read the record again."""
        self._record = _read(self.storage, self.dir, self.job_name)
        self._derive()
        return self

    def await_termination(self, timeout: float | None = None) -> Execution:
        """Wait until it has ended (FINISHED, FAILED, KILLED or LOST) and return it; JobError naming it when
        `timeout` seconds pass first (it goes on running). A failed end is returned, not raised: see `success`
        and `raise_for_status`."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            self.refresh()
            if self.done:
                return self
            left = _POLL_S if deadline is None else deadline - time.monotonic()
            if left <= 0:
                raise JobError(f"execution {self.id} of job {self.job_name!r} did not end within {timeout:g} s: it "
                               f"is {self.state} (started {self.start}); it goes on running, stop it with "
                               f"'hopsml jobs stop {self.job_name} {self.id}'", job=self.job_name, execution=self.id)
            runner = self._local_runner()
            if runner is not None and runner.alive():
                wait_gone(runner, min(left, _POLL_S))   # wakes as soon as the runner ends
            else:
                time.sleep(min(left, _POLL_S / 4))

    def raise_for_status(self) -> Execution:
        """This execution when it succeeded; JobError with its state, exit code and last log lines otherwise
        (also while it runs)."""
        if self.success:
            return self
        why = f": {self.error}" if self.error else ""
        code = f", exit code {self.exit_code}" if self.exit_code is not None else ""
        raise JobError(f"execution {self.id} of job {self.job_name!r} is {self.state} ({self.final_status}{code})"
                       f"{why}", job=self.job_name, execution=self.id, log_tail=self.log_tail())

    def stop(self, timeout: float | None = None) -> Execution:
        """Stop it (hopsworks' stop): its runner ends the app's processes (SIGTERM, then SIGKILL after
        STOP_GRACE_S) and records it KILLED. Nothing for an execution that has ended."""
        self.refresh()
        if self.done:
            return self
        runner = _proc(self._record.get("runner"))
        if runner is None:
            self._wait_for_runner()
            return self.stop(timeout)
        if self._record.get("host") != socket.gethostname():
            raise JobError(f"execution {self.id} of job {self.job_name!r} runs on host {self._record.get('host')}: "
                           f"stop it there with 'hopsml jobs stop {self.job_name} {self.id}'", job=self.job_name,
                           execution=self.id)
        runner.signal(signal.SIGTERM)
        return self.await_termination(timeout if timeout is not None else STOP_GRACE_S + 60.0)

    def _wait_for_runner(self, timeout_s: float = 60.0) -> None:
        """Until the runner has recorded itself (it does so right after it starts the app)."""
        end = time.monotonic() + timeout_s
        while self.refresh().state == INITIALIZING and not self._record.get("runner"):
            if time.monotonic() > end:
                raise JobError(f"execution {self.id} of job {self.job_name!r} has been INITIALIZING for over "
                               f"{timeout_s:g} s without a runner; it is shown LOST after lost_after_s",
                               job=self.job_name, execution=self.id)
            time.sleep(0.05)

    # --- its logs ---------------------------------------------------------------------------------------
    def download_logs(self, path: str | None = None) -> tuple[str, str]:
        """Copy its stdout and stderr logs into the local folder `path` (default: the working folder) as
        `<job>_<id>_stdout.log` and `..._stderr.log`; returns both paths (a log not written is empty)."""
        folder = os.path.abspath(os.path.expanduser(path or os.getcwd()))
        os.makedirs(folder, exist_ok=True)
        out = []
        for rel, stream in ((self.dir.stdout, "stdout"), (self.dir.stderr, "stderr")):
            local = os.path.join(folder, f"{self.job_name}_{self.id}_{stream}.log")
            if self.storage.exists(rel):
                self.storage.download(rel, local)
            else:
                open(local, "wb").close()
            out.append(local)
        return out[0], out[1]

    def log(self, stream: str = "stdout") -> str:
        """A whole log ('stdout' or 'stderr'); empty when it was not written."""
        rel = self.dir.stdout if stream == "stdout" else self.dir.stderr
        try:
            return self.storage.read_bytes(rel).decode("utf-8", errors="replace")
        except StorageError:
            return ""

    def log_tail(self, lines: int = 40) -> str:
        """The last `lines` lines of stdout.log, then of stderr.log, each under its name (empty logs left out).
        Under spark-submit the app's Python tracebacks are in stdout.log (Spark sends the Python process's
        stderr there), Spark's own messages in stderr.log."""
        parts = []
        for rel, name in ((self.dir.stdout, layout.EXECUTION_STDOUT), (self.dir.stderr, layout.EXECUTION_STDERR)):
            text = tail_lines(self.storage, rel, lines)
            if text.strip():
                parts.append(f"--- {name} (last lines) ---\n{text.rstrip()}")
        return "\n".join(parts)

    # --- LOST ----------------------------------------------------------------------------------------------
    def _local_runner(self) -> Proc | None:
        if self._record.get("host") != socket.gethostname():
            return None
        return _proc(self._record.get("runner"))

    def _derive(self) -> None:
        """The state to show: the recorded one, or LOST where the record says it runs but its runner is gone."""
        state = self._record.get("state", INITIALIZING)
        self._state = state
        if state not in LIVE:
            return
        reason, certain = self._lost_reason()
        if reason is None:
            return
        if certain:
            fresh = _read(self.storage, self.dir, self.job_name)
            if fresh.get("state") not in LIVE:   # the runner recorded the end just before it went
                self._record = fresh
                self._state = fresh["state"]
                return
            self._record_lost(reason)
        self._state = LOST
        self._record = {**self._record, "lost_reason": reason}

    def _lost_reason(self) -> tuple[str | None, bool]:
        """Why a live record's execution is LOST (None while it is alive), and whether that is certain (its
        runner's process is known gone) rather than read from a stopped heartbeat."""
        runner = _proc(self._record.get("runner"))
        if runner is not None and self._record.get("host") == socket.gethostname():
            if runner.alive():
                return None, False
            return (f"its runner (pid {runner.pid} on {self._record.get('host')}) ended without recording an end: "
                    "it was killed, or its host restarted"), True
        now_s = time.time()
        if runner is not None:
            bound = max(self.lost_after_s, 3 * float(self._record.get("heartbeat_s") or 0))
            last = last_beat(self.storage, self.dir.heartbeat) or epoch(self._record.get("start"))
            if last is None or now_s - last <= bound:
                return None, False
            return (f"its runner on {self._record.get('host')} stopped: last heartbeat {age_text(now_s - last)} "
                    f"ago, more than lost_after_s={bound:g}"), False
        submitted = epoch(self._record.get("submission_time"))
        if submitted is None or now_s - submitted <= self.lost_after_s:
            return None, False
        return (f"INITIALIZING for {age_text(now_s - submitted)}: its runner never started (the process that "
                "submitted it was killed?)"), False

    def _record_lost(self, reason: str) -> None:
        """Record a LOST execution whose runner is known gone, and end what it left running (the app's process
        group, when its leader still lives: a runner killed with SIGKILL leaves it)."""
        child = _proc(self._record.get("child"))
        if child is not None:
            left = self._left_behind(child.pid)
            for pid in left:
                try:
                    os.kill(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
            if left:
                reason += f"; its app's processes still running ({', '.join(map(str, left))}) were ended"
        record = {**self._record, "state": LOST, "final_status": FINAL_STATUS[LOST], "lost_reason": reason,
                  "end": self._record.get("end") or now(), "produced": self.produced}
        try:
            self.storage.write_json(self.dir.record, record)
            self._record = record
        except StorageError as exc:
            log.warning("could not record execution %s of job %s as LOST: %s", self.id, self.job_name, exc)


    def _left_behind(self, group: int) -> list[int]:
        """The processes of the app's process group `group` that are still there, known as this execution's by
        their environment (the group id alone could name another group once the app's are all gone)."""
        marks = {f"HOPSML_PROJECT={self.project}".encode(), f"HOPSML_JOB_NAME={self.job_name}".encode(),
                 f"HOPSML_EXECUTION_ID={self.id}".encode()}
        found = []
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = stat.read_bytes().rpartition(b")")[2].split()
                if int(fields[2]) != group or fields[0] == b"Z":
                    continue
                if marks <= set((stat.parent / "environ").read_bytes().split(b"\0")):
                    found.append(int(stat.parent.name))
            except (OSError, ValueError, IndexError):
                continue   # gone meanwhile, or not ours to read
        return sorted(found)


EXECUTION_SHAPE = Shape("execution.json", required=("id", "state"),
                        types={"id": (int,), "state": (str,), "args": (list,), "produced": (list,)})


def _read(storage: Storage, edir: layout.ExecutionDir, job_name: str) -> dict[str, Any]:
    try:
        data = read_record(storage, edir.record, EXECUTION_SHAPE)
    except BrokenRecordError as exc:
        raise JobError(f"the record of execution {edir.id} of job {job_name!r} cannot be read: {exc}",
                       job=job_name, execution=edir.id, reason=exc.reason) from None
    except StorageError:
        if not storage.exists(edir.record):
            raise JobError(f"job {job_name!r} has no execution {edir.id} (no {storage.uri(edir.record)}); "
                           f"'hopsml jobs show {job_name}' lists its executions", job=job_name,
                           execution=edir.id) from None
        raise
    return data


def tail_lines(storage: Storage, rel: str, lines: int) -> str:
    """The last `lines` lines of the file `rel` (empty when there is none), reading only its end."""
    info = storage.info(rel)
    if not info.is_file or lines <= 0:
        return ""
    size = info.size or 0
    with storage.open_input(rel, seekable=True) as handle:
        if size > _TAIL_BYTES:
            handle.seek(size - _TAIL_BYTES)
        data = handle.read()
    text = data.decode("utf-8", errors="replace")
    kept = text.splitlines()[-lines:]
    return "\n".join(kept) + ("\n" if kept else "")


def describe_produced(entry: dict[str, Any]) -> str:
    """One produced object as a short text: 'model mnist:2', 'featuregroup sales:1 commit 3', 'dataset iris'.

    >>> describe_produced({"kind": "featuregroup", "name": "sales", "version": 1, "commit": 3})
    'featuregroup sales:1 commit 3'
    >>> describe_produced({"kind": "experiment", "id": "local-1_2", "name": "mnist"})
    'experiment local-1_2'
    """
    kind = str(entry.get("kind", "?"))
    what = entry.get("id") or entry.get("name") or "?"
    text = f"{kind} {what}"
    if entry.get("version") is not None and not entry.get("id"):
        text += f":{entry['version']}"
    if entry.get("commit") is not None:
        text += f" commit {entry['commit']}"
    return text
