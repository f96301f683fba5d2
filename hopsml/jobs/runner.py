"""The runner of one execution: a small process of its own (`python -m hopsml.jobs.runner`, its instructions on
stdin) that starts the job's app, waits for it and records how it ended.

It detaches at once (a second fork, its own session), so whoever started it may go on or exit; it closes its
stdout when the execution's record says RUNNING, which is how the starting process knows it is under way. The
app runs in a process group of its own with the kernel's parent-death signal set, so a runner killed with
SIGKILL takes the app's leader with it. While the app runs the runner beats a heartbeat, and ends the app's group
(SIGTERM, then SIGKILL after a grace period) when

* it is told to stop (SIGTERM, as `Execution.stop` sends): the execution is KILLED;
* it has an owner (the process that awaits the run: `job.run(await_termination=True)`) and that process ends
  first, however it ended: the execution is LOST (final status FAILED), since nothing awaits it any more.

The app's stdout and stderr reach `stdout.log` and `stderr.log` through pipes the runner reads, line by line with
the job's secrets redacted (log_redaction.py); its secret Spark settings reach spark-submit in a private properties
file (hopsml/cluster/private_conf.py), never on a command line.

The owner is watched through a pidfd on its process, not a parent-death signal, which Linux sends when the
*thread* that forked ends (a caller's worker thread would kill a run that its process still awaits).
"""

from __future__ import annotations

import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import traceback
from typing import Any

from hopsml import execution_notes, layout
from hopsml.cluster import private_conf
from hopsml.errors import HopsmlError
from hopsml.fs import Storage
from hopsml.jobs import log_redaction
from hopsml.jobs.execution import FAILED, FINAL_STATUS, FINISHED, KILLED, LOST, RUNNING, now
from hopsml.jobs.launch import APP, PROPERTIES, STAGING
from hopsml.processes import Proc, parent_death_hook, start_time
from hopsml.tracking.heartbeat import Heartbeat

PUMP_JOIN_S = 10.0   # for the logs' last lines once the app ended
_STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


class Runner:
    """One execution's app, from its start to its recorded end."""

    def __init__(self, spec: dict[str, Any]) -> None:
        self.spec = spec
        self.storage = Storage(spec["root"])
        self.dir = layout.JobDir.of(spec["project"], spec["job"]).execution(spec["id"])
        self.local = self.storage.local_path(self.dir.path)
        self.staging = self.local or tempfile.mkdtemp(prefix=f"hopsml-job-{spec['job']}-{spec['id']}-")
        os.makedirs(self.staging, exist_ok=True)
        self.notes = os.path.join(self.staging, layout.EXECUTION_NOTES)
        self.record: dict[str, Any] = self.storage.read_json(self.dir.record)
        self.child: subprocess.Popen[bytes] | None = None
        self.pumps: list[log_redaction.Pump] = []
        self.heartbeat: Heartbeat | None = None
        self._last_sync = time.monotonic()
        self.ready_fd: int | None = None   # the starting process's pipe: closed once the record says RUNNING

    def ready(self) -> None:
        """Let the starting process go on: it reads our stdout to its end."""
        if self.ready_fd is not None:
            os.close(self.ready_fd)
            self.ready_fd = None

    # --- the record -------------------------------------------------------------------------------------
    def save(self, **fields: object) -> None:
        self.record.update(fields)
        self.storage.write_json(self.dir.record, self.record)

    def finish(self, state: str, **fields: object) -> None:
        """Record the end: state, final status, end time, what the app produced; copy the logs (remote roots)."""
        self.sync()
        started = self.record.get("start")
        end = now()
        self.save(state=state, final_status=FINAL_STATUS[state], end=end, produced=execution_notes.read(self.notes),
                  duration_s=_seconds_between(started, end), **fields)
        if self.heartbeat is not None:
            self.heartbeat.stop(remove=True)
        private_conf.remove(self._private)
        if self.local is None:
            shutil.rmtree(self.staging, ignore_errors=True)

    def sync(self) -> None:
        """On a remote root: copy the logs, the notes and a notebook's output from the local staging folder."""
        self._last_sync = time.monotonic()
        if self.local is not None:
            return
        for name in (layout.EXECUTION_STDOUT, layout.EXECUTION_STDERR, layout.EXECUTION_NOTES,
                     layout.EXECUTION_NOTEBOOK):
            path = os.path.join(self.staging, name)
            if os.path.isfile(path):
                try:
                    self.storage.upload(path, layout.join(self.dir.path, name))
                except HopsmlError as exc:
                    print(f"hopsml: could not copy {name} to the root: {exc}", file=sys.stderr)

    # --- the app ----------------------------------------------------------------------------------------
    def app_path(self) -> str:
        """A local path of the app (one inside a remote project is copied into the staging folder first), after
        keeping a copy of it beside the record (`program.py|ipynb`): what this execution ran."""
        app = self.spec["app"]
        program = self.dir.program(app["suffix"])
        if app["in_project"]:
            rel = layout.join(layout.project_dir(self.spec["project"]), app["path"])
            local = self.storage.local_path(rel) or self.storage.download(
                rel, os.path.join(self.staging, os.path.basename(app["path"])))
        else:
            local = app["path"]
        self.storage.upload(local, program)
        return local

    def start_child(self) -> None:
        app = self.app_path()
        words: list[str] = []
        for word in self.spec["command"]:
            if word == PROPERTIES:
                words += ["--properties-file", self._properties()]
            else:
                words.append(app if word == APP else self.staging if word == STAGING else word)
        env = {**self.spec["env"], execution_notes.ENV: self.notes}
        die_with_runner = parent_death_hook(os.getpid())

        def own_group_and_die_with_runner() -> None:   # in the child, before exec
            os.setpgid(0, 0)   # a group of its own, which stop() ends as a whole
            die_with_runner()   # the kernel ends it when the runner dies

        cwd = self.staging if self.spec["cwd"] == STAGING else self.spec["cwd"]
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        try:
            self.child = subprocess.Popen(words, cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                                          stdout=out_w, stderr=err_w, preexec_fn=own_group_and_die_with_runner)
        except BaseException:
            for fd in (out_r, err_r):
                os.close(fd)
            raise
        finally:
            os.close(out_w)
            os.close(err_w)
        known = self.spec.get("redact", [])
        self.pumps = [log_redaction.Pump(out_r, os.path.join(self.staging, layout.EXECUTION_STDOUT), known),
                      log_redaction.Pump(err_r, os.path.join(self.staging, layout.EXECUTION_STDERR), known)]

    def _properties(self) -> str:
        """A private folder outside the project with the Spark defaults spark-submit would have read (a
        --properties-file replaces them) and the job's secret settings (private_conf.py); removed when the runner
        ends."""
        env = self.spec["env"]
        defaults = os.path.join(env.get("SPARK_CONF_DIR") or os.path.join(env.get("SPARK_HOME", ""), "conf"),
                                "spark-defaults.conf")
        master = env.get("HOPSML_MASTER", "")
        self._private = private_conf.write(self.spec.get("secret_conf", {}), defaults,
                                           local_master=master.startswith("local"))
        return os.path.join(self._private, private_conf.PROPERTIES)

    _private: str | None = None

    def end_group(self, grace_s: float, child_fd: int) -> None:
        """SIGTERM to the app's process group; SIGKILL to what is left after `grace_s` (or at once after the
        leader ended)."""
        assert self.child is not None
        _signal_group(self.child.pid, signal.SIGTERM)
        select.select([child_fd], [], [], grace_s)
        _signal_group(self.child.pid, signal.SIGKILL)

    # --- the whole run --------------------------------------------------------------------------------------
    def run(self) -> int:
        wake_r, wake_w = os.pipe()
        os.set_blocking(wake_w, False)
        signal.set_wakeup_fd(wake_w)
        for signum in _STOP_SIGNALS:
            signal.signal(signum, lambda *_: None)   # the wakeup fd says which; the loop below acts
        owner_fd, owner_gone = _watch(self.spec.get("owner"))
        try:
            self.start_child()
        except (OSError, HopsmlError) as exc:
            self.save(start=now())
            self.finish(FAILED, error=f"the app did not start: {type(exc).__name__}: {exc}")
            return 1
        assert self.child is not None
        self.save(state=RUNNING, start=now(), host=socket.gethostname(), runner=Proc.of(os.getpid()).to_dict(),
                  child=Proc.of(self.child.pid).to_dict(), heartbeat_s=self.spec["heartbeat_s"])
        self.heartbeat = Heartbeat(self.storage, self.dir.heartbeat, self.spec["heartbeat_s"])
        self.ready()

        child_fd = os.pidfd_open(self.child.pid)
        watched = [child_fd, wake_r] + ([owner_fd] if owner_fd is not None else [])
        ending: tuple[str, str] | None = ("LOST", owner_gone) if owner_gone else None
        while ending is None:
            ready, _, _ = select.select(watched, [], [], self.spec["sync_s"])
            if child_fd in ready:
                break
            if wake_r in ready:
                signals = os.read(wake_r, 64)
                ending = (KILLED, f"stopped (signal {signal.Signals(signals[-1]).name} to its runner)")
            elif owner_fd is not None and owner_fd in ready:
                owner = self.spec["owner"]
                ending = (LOST, f"the process that awaited it (pid {owner['pid']} on {socket.gethostname()}) ended "
                                "before it did, so it was stopped: nothing would have followed it")
            if time.monotonic() - self._last_sync >= self.spec["sync_s"]:
                self.sync()
        if ending is not None:
            self.end_group(self.spec["grace_s"], child_fd)
        # what the app left behind in its group; before the leader is reaped, so its pid (the group's id) is
        # still taken and cannot name another process's group
        _signal_group(self.child.pid, signal.SIGKILL)
        code = self.child.wait()
        for pump in self.pumps:
            pump.join(PUMP_JOIN_S)   # a process outside the group may still hold the pipe: the log is then cut
        if ending is not None:
            state, why = ending
            self.finish(state, exit_code=code, **({"lost_reason": why} if state == LOST else {"error": why}))
        elif code == 0:
            self.finish(FINISHED, exit_code=0)
        else:
            self.finish(FAILED, exit_code=code,
                        error=f"the app ended by signal {-code}" if code < 0 else f"the app exited with code {code}")
        return 0


def _seconds_between(start: str | None, end: str) -> float | None:
    from hopsml.jobs.execution import epoch

    first, last = epoch(start), epoch(end)
    return None if first is None or last is None else round(last - first, 3)


def _signal_group(pgid: int, signum: int) -> None:
    try:
        os.killpg(pgid, signum)
    except (ProcessLookupError, PermissionError):
        pass


def _watch(owner: dict[str, int] | None) -> tuple[int | None, str]:
    """A pidfd that becomes readable when the owner ends, and why it is gone already ('' while it lives)."""
    if not owner:
        return None, ""
    try:
        fd = os.pidfd_open(owner["pid"])
    except OSError:
        return None, f"the process that awaited it (pid {owner['pid']}) had ended before it started"
    if start_time(owner["pid"]) != owner["started"]:
        os.close(fd)
        return None, f"the process that awaited it (pid {owner['pid']}) had ended before it started"
    return fd, ""


def main() -> int:
    """Read the instructions, detach, run. The first process exits at once; the second runs the execution."""
    spec = json.loads(sys.stdin.buffer.read())
    if os.fork():
        os._exit(0)
    os.setsid()
    ready_fd = os.dup(1)
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    os.dup2(devnull, 1)
    runner: Runner | None = None
    try:
        runner = Runner(spec)
        runner.ready_fd = ready_fd
        log_fd = os.open(os.path.join(runner.staging, "runner.log"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(log_fd, 2)
        os.close(log_fd)
        return runner.run()
    except BaseException:   # noqa: BLE001 - whatever ended the runner goes into the record, not into the void
        text = traceback.format_exc()
        print(text, file=sys.stderr)
        if runner is not None:
            try:
                if runner.child is not None and runner.child.poll() is None:
                    _signal_group(runner.child.pid, signal.SIGKILL)
                runner.finish(FAILED, error=f"the job's runner failed: {text.strip().splitlines()[-1]}",
                              runner_traceback=text)
            except BaseException:   # noqa: BLE001 - readers will show it LOST from the runner's pid
                print(traceback.format_exc(), file=sys.stderr)
        return 1
    finally:
        if runner is not None:
            runner.ready()
        elif ready_fd is not None:
            os.close(ready_fd)


if __name__ == "__main__":
    sys.exit(main())
