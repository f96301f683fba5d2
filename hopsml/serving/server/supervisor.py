"""The server process of one serving: binds the port, runs `instances` instance processes on it,
restarts a crashed one (recording when and why), and records its pids, port and state in the project.

Started by `start()` in a session of its own, so that it outlives the notebook (as a serving outlives
it on Hopsworks): `hopsml.serving.server.supervisor.main()` with the serving's name as its argument with the root
and project in HOPSML_ROOT and HOPSML_PROJECT, its output going to the serving's log. It reports to the
starter once, on the pipe whose descriptor is in HOPSML_SERVING_READY_FD: one JSON line, Running (with the
port) or Failed (why). SIGTERM stops it: the instances get SIGTERM, then SIGKILL after a grace period, and
the state Stopped.

SIGHUP reloads the definition in place (a canary added, promoted or rolled back, another version, other scripts or
instances): the new definition's instances start beside the running ones on the same socket, and once all are ready
the old ones drain (they answer what they hold, then end), so the port stays and no connection is refused. The
state's `reloads` counts the reloads done, with `reload_error` saying why the last one failed (the new instances
could not load: they are stopped and the old ones serve on).

An instance that keeps crashing is given up on alone: its healthy siblings go on answering, the state names it
(`failing`, and the reason of a Running serving), and it is tried again after `RETRY_GIVEN_UP_S`; the serving
fails only when no instance is left. The log that every process here writes to (opened by the starter, in
append mode) is rotated by size: copied to `<log>.1` and truncated in place (logrotate's copytruncate), since
the instances hold it open.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any

from hopsml import config, hdfs, layout
from hopsml.errors import StorageError
from hopsml.fs import Storage
from hopsml.model import registry
from hopsml.processes import Proc
from hopsml.serving import autoscale
from hopsml.serving import definition as defs
from hopsml.serving.instance.inference_log import LOG_ENV, LogOptions
from hopsml.serving.instance.serve import SPEC_ENV, InstanceSpec
from hopsml.serving.server import state as states

log = logging.getLogger(__name__)

READY_FD_ENV = "HOPSML_SERVING_READY_FD"
START_TIMEOUT_S = 300.0
STOP_GRACE_S = 5.0
RESTART_WINDOW_S = 60.0
MAX_RESTARTS_IN_WINDOW = 10     # crashes of one instance within the window before it is given up on
# An instance that crashes this many times in a row without becoming ready again is given up on: with the
# back-off (5 s at most) crashes at once would otherwise come slower than MAX_RESTARTS_IN_WINDOW a minute.
MAX_CRASHES_IN_A_ROW = 5
RETRY_GIVEN_UP_S = 300.0        # an instance given up on is started again after this long (the cause may pass)
LOG_CHECK_S = 0.5               # how often the log's size is checked for rotation
# the settings that the server's processes read (passed to them in HOPSML_* variables by the starter)
SERVER_SETTINGS = ("serving_max_connections", "serving_max_headers", "serving_max_header_bytes",
                   "serving_max_url_bytes", "serving_max_head_bytes", "serving_request_timeout_s",
                   "serving_log_max_bytes", "serving_log_backups")
LOG_MODE = 0o600
# How often a running server checks that its definition still exists: one whose project was deleted stops.
ORPHAN_CHECK_S = 5.0
ORPHAN_CHECK_REMOTE_S = 60.0
INSTANCE_MODULE = "hopsml.serving.instance"   # run with -m: a program's __main__ (see there)


class Stop(Exception):
    """SIGTERM or SIGINT arrived."""


@dataclass
class Instance:
    """One instance process and what the supervisor watches it by."""

    index: int
    popen: subprocess.Popen[bytes]
    ready_r: int
    pidfd: int
    ready: bool = False
    failure: str | None = None
    draining: bool = False      # scaled in: answering what it holds, then ending (not a crash)
    restarts: list[float] = field(default_factory=list)


@dataclass
class Rollover:
    """A reload under way: the new instances starting, then the old ones draining."""

    new: set[int]
    old: set[int]
    before: tuple[Any, ...]          # the definition and resolved files to go back to if the new ones fail
    deadline: float
    lost: set[int] = field(default_factory=set)   # old instances that crashed meanwhile (restarted on failure)
    draining: bool = False


def private_file(path: str, flags: int) -> int:
    """An `open` opener: the file readable by its owner only (an existing one is narrowed too); a symbolic link
    planted at `path` is refused (OSError ELOOP), never followed to append to or narrow another file."""
    fd = os.open(path, flags | os.O_NOFOLLOW, LOG_MODE)
    os.fchmod(fd, LOG_MODE)
    return fd


def rotate_log(path: str, max_bytes: int, backups: int) -> bool:
    """When `path` is over `max_bytes`: shift `<path>.1..` up (the last dropped), copy it to `<path>.1` and
    truncate it in place, so that the processes appending to it write on at its start. A line written during the
    copy may be lost, as with logrotate's copytruncate. True if it rotated."""
    try:
        if os.path.islink(path) or os.path.getsize(path) <= max_bytes:
            return False
    except OSError:
        return False
    for number in range(backups - 1, 0, -1):
        older = f"{path}.{number}"
        if os.path.exists(older):
            os.replace(older, f"{path}.{number + 1}")
    with open(path, "r+b", opener=lambda p, f: os.open(p, f | os.O_NOFOLLOW)) as source, \
            open(f"{path}.1", "wb", opener=private_file) as copy:
        shutil.copyfileobj(source, copy, 1 << 20)
        source.truncate(0)
    return True


def exit_reason(returncode: int) -> str:
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        return f"killed by {name}"
    return f"exited with code {returncode}"


class Supervisor:
    """Runs the instances of one serving until told to stop."""

    def __init__(self, storage: Storage, project: str, definition: defs.ServingDefinition, log_path: str,
                 ready_fd: int | None, settings: config.Settings | None = None) -> None:
        self.settings = settings or config.load(environ={})   # defaults of the serving_* limits
        self.log_path = log_path
        self.storage = storage
        self.project = project
        self.definition = definition
        self.ready_fd = ready_fd
        self.state = states.ServerState(state=states.STARTING, host=definition.host, started=states.now(),
                                        supervisor=Proc.of(os.getpid()).to_dict(), log=log_path,
                                        instances=[None] * definition.scaling_bounds[1])
        self.instances: dict[int, Instance] = {}
        low, high = definition.scaling_bounds
        self.slots = high       # instance indexes 0 .. max_instances - 1
        self.wanted = max(low, 1) if definition.autoscaled else definition.instances
        self.state.wanted = self.wanted
        self.load_fd: int | None = None
        self.reader: autoscale.LoadReader | None = None
        self.autoscaler: autoscale.Autoscaler | None = None
        # the steps whose new instances are not all ready yet (a burst can take a second step before the first's are)
        self.starting_steps: list[tuple[states.ScaleStep, float, set[int]]] = []
        if definition.autoscaled:
            self.load_fd = autoscale.make_load_file(high)
            self.reader = autoscale.LoadReader(self.load_fd, high)
            self.autoscaler = autoscale.Autoscaler(autoscale.Policy(low, high, float(definition.scale_target),
                                                                    float(definition.scale_window_s)),
                                                   time.monotonic())
        self.selector = selectors.DefaultSelector()
        self.sock: socket.socket | None = None
        self.model_dir = ""
        self.downloaded: str | None = None
        self.orphaned = False  # its definition was deleted: nothing is written back into the project
        self.predictor: str | None = None
        self.transformer: str | None = None
        self.signal_r, signal_w = os.pipe()
        os.set_blocking(signal_w, False)
        signal.set_wakeup_fd(signal_w)
        for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(signum, lambda *_: None)  # the wakeup fd carries it
        self.rollover: Rollover | None = None
        self.reload_asked = False
        self.state.reloads = 0
        self.selector.register(self.signal_r, selectors.EVENT_READ, "signal")

    # --- records -------------------------------------------------------------------------------------
    def save(self) -> None:
        if self.orphaned:
            return
        self.state.available = sum(1 for i in self.instances.values() if i.ready)
        states.write(self.storage, self.project, self.definition.name, self.state)

    def report(self, message: dict[str, object]) -> None:
        """Tell the starter (once); it may be gone, which is fine."""
        if self.ready_fd is None:
            return
        try:
            os.write(self.ready_fd, (json.dumps(message) + "\n").encode())
        except OSError:
            pass
        os.close(self.ready_fd)
        self.ready_fd = None

    # --- the model's files ---------------------------------------------------------------------------
    def resolve_files(self) -> None:
        """Local paths of the model version and the scripts (downloaded when the root is remote), and the
        canary version's when the serving has one (a script named by file name is its version's own)."""
        d = self.definition
        self.model_dir = self._model_dir(d.model_version)
        self.predictor = self._script(d.predictor, d.model_version, self.model_dir)
        self.transformer = self._script(d.transformer, d.model_version, self.model_dir)
        self.canary: dict[str, Any] | None = None
        self.catalog: dict[str, Any] | None = None
        if d.models is not None:
            self.catalog = self.model_catalog()
        if d.canary_version is not None:
            folder = self._model_dir(d.canary_version)
            self.canary = {"version": d.canary_version, "percent": d.canary_traffic_percent, "model_dir": folder,
                           "predictor": self._script(d.predictor, d.canary_version, folder),
                           "transformer": self._script(d.transformer, d.canary_version, folder)}

    def model_catalog(self) -> dict[str, Any]:
        """What a serving of several models may load, by the name its requests use (the serving's own model by the
        serving's name): each version's local files (downloaded at the start from a remote root), and the default
        version (the serving's model_version; the newest of another model)."""
        d = self.definition
        catalog: dict[str, Any] = {}
        for served, model in [(d.name, d.model_name), *((m, m) for m in d.models or [])]:
            numbers = [mv.version for mv in registry.versions(model, settings=None)]
            own = model == d.model_name
            versions = {}
            for number in numbers:
                folder = self._model_dir(number, model)
                versions[str(number)] = {"model_dir": folder,
                                         "predictor": self._script(d.predictor, number, folder) if own else None,
                                         "transformer": self._script(d.transformer, number, folder) if own else None}
            catalog[served] = {"default": d.model_version if own else max(numbers), "versions": versions}
        return catalog

    def _model_dir(self, version: int, model: str | None = None) -> str:
        d = self.definition
        mv = registry.get_model(model or d.model_name, version, settings=None)
        local = self.storage.local_path(layout.model_dir(self.project, mv.name, mv.version))
        if local is None:  # HDFS or S3: a private copy, removed when the server ends
            if self.downloaded is None:
                self.downloaded = tempfile.mkdtemp(prefix=f"hopsml-serving-{d.name}-")
            local = registry.download_model(mv.name, mv.version, local_dir=self.downloaded)
        return local

    def _script(self, path: str | None, version: int, model_dir: str) -> str | None:
        if path is None:
            return None
        # the definition as if `version` were stable alone (a canary's own script is looked up in its folder)
        as_version = dataclasses.replace(self.definition, model_version=version, canary_version=None,
                                         canary_traffic_percent=0)
        rel = script_rel(self.storage, self.project, as_version, path)
        local = self.storage.local_path(rel)
        if local is not None:
            return local
        target = os.path.join(model_dir, ".scripts", os.path.basename(rel))
        return self.storage.download(rel, target)

    # --- instances -----------------------------------------------------------------------------------
    def bind(self) -> None:
        host = self.definition.host
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, self.definition.port))
        sock.listen(1024)
        sock.set_inheritable(True)
        self.sock = sock
        self.state.port = sock.getsockname()[1]

    def spawn(self, index: int) -> Instance:
        if self.sock is None:
            raise RuntimeError("internal: an instance was started before the port was bound")
        ready_r, ready_w = os.pipe()
        # One intra-op thread per instance: instances are the parallelism. Measured with a TorchScript MLP
        # (64-256-256-10) and 64 clients on a busy 2-core host: 151 req/s with cpu_count threads, 2627 with 1.
        threads = 1
        spec = InstanceSpec(name=self.definition.name, version=self.definition.model_version, index=index,
                            model_dir=self.model_dir, predictor=self.predictor, transformer=self.transformer,
                            socket_fd=self.sock.fileno(), ready_fd=ready_w, supervisor=os.getpid(),
                            max_body_bytes=self.definition.max_body_bytes, threads=threads,
                            batching=(dataclasses.asdict(self.definition.batching_options)
                                      if self.definition.batching_enabled else None),
                            limits=self.http_limits(), canary=self.canary,
                            load_fd=self.load_fd, models=self.catalog, max_models=self.definition.max_loaded_models,
                            max_models_bytes=(int(self.definition.max_models_memory_mb * 2**20)
                                              if self.definition.max_models_memory_mb is not None else None))
        # DEPLOYMENT_NAME: as a Hopsworks deployment's predictor has it (hsml's model.get_feature_view() reads it)
        env = {**os.environ, SPEC_ENV: spec.to_env(), "DEPLOYMENT_NAME": self.definition.name}
        env.pop(READY_FD_ENV, None)
        if self.reader is not None:
            self.reader.clear(index)
        fds = (self.sock.fileno(), ready_w) + ((self.load_fd,) if self.load_fd is not None else ())
        popen = subprocess.Popen([sys.executable, "-m", INSTANCE_MODULE], env=env, stdin=subprocess.DEVNULL,
                                 pass_fds=fds, cwd=self.model_dir)
        os.close(ready_w)
        instance = Instance(index, popen, ready_r, os.pidfd_open(popen.pid))
        self.selector.register(ready_r, selectors.EVENT_READ, ("ready", index))
        self.selector.register(instance.pidfd, selectors.EVENT_READ, ("exit", index))
        self.instances[index] = instance
        self.state.instances[index] = Proc.of(popen.pid).to_dict()
        log.info("instance %d started (pid %d)", index, popen.pid)
        return instance

    def http_limits(self) -> dict[str, float]:
        """What one request and one instance may hold (http_server.Limits), from the settings."""
        s = self.settings
        return {"max_headers": s.serving_max_headers, "max_header_bytes": s.serving_max_header_bytes,
                "max_url_bytes": s.serving_max_url_bytes, "max_head_bytes": s.serving_max_head_bytes,
                "request_timeout_s": s.serving_request_timeout_s, "max_connections": s.serving_max_connections}

    def rotate(self) -> None:
        if not self.log_path:
            return
        try:
            if rotate_log(self.log_path, self.settings.serving_log_max_bytes, self.settings.serving_log_backups):
                log.info("log rotated (over %d bytes)", self.settings.serving_log_max_bytes)
        except OSError as exc:
            log.warning("cannot rotate the log %s: %s", self.log_path, exc)

    def forget(self, instance: Instance) -> None:
        for fd in (instance.ready_r, instance.pidfd):
            try:
                self.selector.unregister(fd)
            except (KeyError, ValueError):
                pass
            os.close(fd)

    def on_ready(self, index: int) -> None:
        instance = self.instances[index]
        message = os.read(instance.ready_r, 4096)
        if message[:1] == b"R":
            instance.ready = True
            log.info("instance %d ready", index)
            self.note_started(index)
        elif message[:1] == b"F":
            instance.failure = message[1:].decode("utf-8", errors="replace")
        self.selector.unregister(instance.ready_r)

    def on_exit(self, index: int) -> str:
        """Reap a crashed instance; returns why it ended (with what it said, if it could not load the model)."""
        instance = self.instances[index]
        returncode = instance.popen.wait()
        if instance.ready_r in self.selector.get_map():
            self.on_ready(index)  # what it wrote before it ended
        del self.instances[index]
        self.forget(instance)
        self.state.instances[index] = None
        reason = f"instance {index} (pid {instance.popen.pid}) {exit_reason(returncode)}"
        if instance.failure is not None:
            reason += f": {instance.failure}"
        log.warning("%s", reason)
        return reason

    # --- the loop ------------------------------------------------------------------------------------
    def events(self, timeout: float | None) -> list[tuple[str, int]]:
        out: list[tuple[str, int]] = []
        for key, _ in self.selector.select(timeout):
            if key.data == "signal":
                got = set(os.read(self.signal_r, 64))
                if got - {signal.SIGHUP}:
                    raise Stop()
                self.reload_asked = True
                continue
            kind, index = key.data
            out.append((kind, index))
        return out

    # --- scaling -------------------------------------------------------------------------------------
    def serving_count(self, pending: dict[int, float], given_up: dict[int, str]) -> int:
        """Instances that serve or are about to: running and not draining, or waiting to be restarted."""
        return sum(1 for i in self.instances.values() if not i.draining) + \
            sum(1 for i in pending if i not in given_up and i not in self.instances)

    def scale(self, pending: dict[int, float], given_up: dict[int, str]) -> None:
        """Read the load and take the autoscaler's step, if it wants one."""
        assert self.reader is not None and self.autoscaler is not None
        now = time.monotonic()
        self.autoscaler.observe(now, *self.reader.read(now))
        current = self.serving_count(pending, given_up)
        wanted, why = self.autoscaler.wanted(current, now)
        if wanted != current:
            self.step_to(wanted, why, pending, given_up)

    def step_to(self, wanted: int, why: str, pending: dict[int, float], given_up: dict[int, str]) -> None:
        """Start instances in free slots, or drain the newest ones (they answer what they hold, then end)."""
        assert self.autoscaler is not None
        now = time.monotonic()
        current = self.serving_count(pending, given_up)
        step = states.ScaleStep(states.now(), current, wanted, why)
        self.state.scaling = (self.state.scaling + [step])[-50:]
        log.info("scaling from %d to %d instance(s): %s", current, wanted, why)
        if wanted > current:
            free = [i for i in range(self.slots) if i not in self.instances and i not in pending and i not in given_up]
            started = set(free[:wanted - current])
            for index in started:
                self.spawn(index)
            self.starting_steps.append((step, now, started))
        else:
            for index in sorted(pending, reverse=True):   # a restart not yet made is the cheapest to drop
                if current > wanted and index not in given_up and index not in self.instances:
                    del pending[index]
                    current -= 1
            for index in sorted(self.instances, reverse=True):
                instance = self.instances[index]
                if current > wanted and not instance.draining:
                    instance.draining = True
                    instance.popen.send_signal(signal.SIGUSR1)   # the instance drains (http_server.serve)
                    current -= 1
        self.wanted = self.state.wanted = wanted
        self.autoscaler.changed(now)
        if wanted == 0 and self.sock is not None:   # the next connection wakes the serving (it waits in the backlog)
            self.selector.register(self.sock, selectors.EVENT_READ, ("wake", -1))
        self.save()

    def wake(self, pending: dict[int, float], given_up: dict[int, str]) -> None:
        """A connection arrived at zero instances: start one (the client waits in the backlog: the cold start)."""
        assert self.sock is not None and self.autoscaler is not None
        self.selector.unregister(self.sock)
        self.step_to(max(self.autoscaler.policy.min_instances, 1), "a connection arrived at zero instances",
                     pending, given_up)

    def note_started(self, index: int) -> None:
        """An instance became ready: when it was the last of a scaling step's, the step records how long it took."""
        for step, began, waiting in list(self.starting_steps):
            waiting.discard(index)
            if not waiting:
                step.ready_s = round(time.monotonic() - began, 3)
                self.starting_steps.remove((step, began, waiting))
                log.info("scaled to %d instance(s): ready after %.2f s", step.after, step.ready_s)

    def retire(self, index: int) -> None:
        """A drained instance ended."""
        instance = self.instances.pop(index)
        returncode = instance.popen.wait()
        self.forget(instance)
        self.state.instances[index] = None
        log.info("instance %d (pid %d) drained and ended (%s)", index, instance.popen.pid, exit_reason(returncode))

    def start(self) -> None:
        """Start every instance and wait until all are ready; a crash during start fails the serving."""
        deadline = time.monotonic() + START_TIMEOUT_S
        for index in range(self.wanted):
            self.spawn(index)
        self.save()
        while not all(i.ready for i in self.instances.values()):
            left = deadline - time.monotonic()
            if left <= 0:
                raise RuntimeError(f"the instances were not ready within {START_TIMEOUT_S:.0f} s (loading the "
                                   "model takes this long?)")
            for kind, index in self.events(left):
                if kind == "ready":
                    self.on_ready(index)
                else:
                    raise RuntimeError(f"{self.on_exit(index)} while loading the model")
        self.state.state = states.RUNNING
        self.save()
        log.info("serving %s: %d instance(s) on %s:%d", self.definition.name, len(self.instances),
                 self.definition.host, self.state.port)
        self.report({"state": states.RUNNING, "port": self.state.port})

    def serve(self) -> None:
        """Restart crashed instances until SIGTERM (or the serving's definition is deleted). An instance that
        crashes more than MAX_RESTARTS_IN_WINDOW times in a minute, or MAX_CRASHES_IN_A_ROW times without becoming
        ready, is given up on (tried again after RETRY_GIVEN_UP_S) while the others serve; when every instance is
        given up on, the serving fails."""
        pending: dict[int, float] = {}  # index -> when to restart it
        history: dict[int, list[float]] = {}   # index -> its crashes within the window
        in_a_row: dict[int, int] = {}   # index -> crashes since it was last ready
        given_up: dict[int, str] = {}   # index -> why
        every = ORPHAN_CHECK_S if self.storage.local_path() is not None else ORPHAN_CHECK_REMOTE_S
        next_check = time.monotonic() + every
        next_rotation = time.monotonic()
        next_scale = time.monotonic() + autoscale.TICK_S if self.autoscaler is not None else float("inf")
        while True:
            if self.reload_asked and self.rollover is None:
                self.reload_asked = False
                self.begin_reload(pending)
            if self.rollover is not None and time.monotonic() > self.rollover.deadline:
                self.overdue(pending)
            wake = min([next_check, next_rotation, next_scale, *pending.values(),
                        *([self.rollover.deadline] if self.rollover is not None else [])])
            timeout = max(0.0, wake - time.monotonic())
            if time.monotonic() >= next_rotation:
                next_rotation = time.monotonic() + LOG_CHECK_S
                self.rotate()
            if time.monotonic() >= next_check:
                next_check = time.monotonic() + every
                if self.definition_gone():
                    log.warning("serving %s: its definition is gone (deleted with its project?): stopping",
                                self.definition.name)
                    self.orphaned = True
                    raise Stop()
            if time.monotonic() >= next_scale:
                next_scale = time.monotonic() + autoscale.TICK_S
                self.scale(pending, given_up)
            for kind, index in self.events(timeout):
                if kind == "wake":
                    self.wake(pending, given_up)
                    continue
                if kind == "exit" and self.instances[index].draining:
                    self.retire(index)
                    self.rolled_over()
                    self.save()
                    continue
                if self.rollover is not None and kind == "exit" and index in self.rollover.new:
                    self.abort_reload(self.on_exit(index) + " while loading the new definition", pending)
                    continue
                if self.rollover is not None and kind == "exit" and index in self.rollover.old:
                    log.warning("%s during a reload: the new instances take over", self.on_exit(index))
                    self.rollover.old.discard(index)
                    self.rollover.lost.add(index)
                    self.rolled_over()
                    continue
                if kind == "ready":
                    self.on_ready(index)
                    if self.rollover is not None and index in self.rollover.new:
                        self.rolled_over()
                    if self.instances[index].ready:
                        in_a_row[index] = 0
                        if given_up.pop(index, None) is not None:
                            log.info("instance %d is ready again after it was given up on", index)
                            self.note_failing(given_up)
                    self.save()
                    continue
                reason = self.on_exit(index)
                now = time.monotonic()
                in_a_row[index] = in_a_row.get(index, 0) + 1
                crashes = history[index] = [t for t in history.get(index, []) if now - t < RESTART_WINDOW_S] + [now]
                why = None
                if in_a_row[index] > MAX_CRASHES_IN_A_ROW:
                    why = f"crashed {in_a_row[index]} times in a row without becoming ready"
                elif len(crashes) > MAX_RESTARTS_IN_WINDOW:
                    why = f"crashed {len(crashes)} times within {RESTART_WINDOW_S:.0f} s"
                if why is None:
                    self.state.restarts.append(states.Restart(index, states.now(), reason))
                    pending[index] = now + min(5.0, 0.1 * 2 ** (len(crashes) - 1))
                else:
                    given_up[index] = f"{reason}; instance {index} {why}, so it is not restarted for " \
                                      f"{RETRY_GIVEN_UP_S:.0f} s: see the log"
                    log.error("%s", given_up[index])
                    in_a_row[index], history[index] = 0, []
                    if len(given_up) >= max(self.wanted, 1):
                        raise RuntimeError("every instance crashed too often: " + "; ".join(
                            given_up[i] for i in sorted(given_up)))
                    pending[index] = now + RETRY_GIVEN_UP_S
                    self.note_failing(given_up)
                self.save()
            for index, when in list(pending.items()):
                if when <= time.monotonic():
                    del pending[index]
                    self.spawn(index)
                    log.info("instance %d restarted (restart %d)", index, len(self.state.restarts))
                    self.save()

    # --- reloads ------------------------------------------------------------------------------------
    def resolved(self) -> tuple[Any, ...]:
        return (self.definition, self.model_dir, self.predictor, self.transformer, self.canary, self.catalog,
                os.environ.get(LOG_ENV))

    def restore(self, before: tuple[Any, ...]) -> None:
        (self.definition, self.model_dir, self.predictor, self.transformer, self.canary, self.catalog,
         logged) = before
        if logged is not None:
            os.environ[LOG_ENV] = logged

    def begin_reload(self, pending: dict[int, float]) -> None:
        """Read the definition again and start its instances beside the running ones (SIGHUP)."""
        before = self.resolved()
        try:
            new = defs.read(self.storage, self.project, self.definition.name)
            why = defs.restart_needed(self.definition, new)
            if why is not None:
                raise RuntimeError(f"the new definition changes {why}: restart the serving to take it")
            self.definition = new
            self.resolve_files()
            if os.environ.get(LOG_ENV):   # the instances log the requests as the new stable version's
                options = LogOptions.from_env(os.environ[LOG_ENV])
                os.environ[LOG_ENV] = dataclasses.replace(
                    options, mode=new.inference_logging or options.mode, model_version=new.model_version,
                    roll_bytes=new.inference_log_roll_bytes, roll_seconds=float(new.inference_log_roll_seconds),
                    queue_size=new.inference_log_queue).to_env()
        except Exception as exc:  # noqa: BLE001 (any failure is the reload's recorded reason; the old ones serve on)
            self.restore(before)
            self.reloaded(str(exc) if isinstance(exc, RuntimeError) else f"{type(exc).__name__}: {exc}")
            return
        old = {i for i, instance in self.instances.items() if not instance.draining}
        lost = {i for i in pending if i not in self.instances}
        for index in lost:   # a crashed old instance waiting for its restart: the new ones replace it
            del pending[index]
        free = [i for i in range(len(self.instances) + len(lost) + new.instances) if i not in self.instances
                and i not in lost][:new.instances]
        self.state.instances += [None] * (max(free) + 1 - len(self.state.instances))
        self.rollover = Rollover(set(free), old, before, time.monotonic() + START_TIMEOUT_S, lost)
        log.info("reloading: version %d%s on %d new instance(s) beside %d", new.model_version,
                 f" with canary version {new.canary_version}" if new.canary_version is not None else "", len(free),
                 len(old))
        for index in free:
            self.spawn(index)
        self.save()

    def rolled_over(self) -> None:
        """Once every new instance is ready, drain the old ones; once they have ended, the reload is done."""
        roll = self.rollover
        if roll is None:
            return
        if not roll.draining and all(self.instances[i].ready for i in roll.new if i in self.instances):
            roll.draining = True
            for index in roll.old:
                if index in self.instances:
                    self.instances[index].draining = True
                    self.instances[index].popen.send_signal(signal.SIGUSR1)   # answers what it holds, then ends
            from hopsml.serving.instance.http_server import (
                DRAIN_IDLE_S,  # here: importing hopsml.serving loads no server
            )

            roll.deadline = time.monotonic() + STOP_GRACE_S + DRAIN_IDLE_S + 5
            self.wanted = self.state.wanted = self.definition.instances
            self.slots = max(self.slots, len(self.state.instances))
            log.info("reload: the new instances are ready; draining the %d old one(s)", len(roll.old))
        if roll.draining and not any(i in self.instances for i in roll.old):
            self.rollover = None
            self.reloaded(None)

    def overdue(self, pending: dict[int, float]) -> None:
        """A reload past its deadline: new instances that never became ready are given up, old ones that do not
        end after draining are killed (their exits end the reload)."""
        roll = self.rollover
        if roll is None:
            return
        if not roll.draining:
            self.abort_reload(f"the new instances were not ready within {START_TIMEOUT_S:.0f} s", pending)
            return
        for index in roll.old:
            if index in self.instances and self.instances[index].popen.poll() is None:
                log.warning("instance %d did not end after draining: killed", index)
                self.instances[index].popen.kill()
        roll.deadline = time.monotonic() + 10

    def abort_reload(self, reason: str, pending: dict[int, float]) -> None:
        """The new instances could not load: stop them and serve on with the old definition."""
        roll = self.rollover
        if roll is None:
            return
        for index in roll.new:
            instance = self.instances.pop(index, None)
            if instance is None:
                continue
            instance.popen.kill()
            instance.popen.wait()
            self.forget(instance)
            self.state.instances[index] = None
        self.restore(roll.before)
        for index in roll.lost:
            pending[index] = time.monotonic()
        self.rollover = None
        log.error("reload failed, serving on as before: %s", reason)
        self.reloaded(reason)

    def reloaded(self, error: str | None) -> None:
        self.state.reloads = (self.state.reloads or 0) + 1
        self.state.reload_error = error
        self.save()

    def note_failing(self, given_up: dict[int, str]) -> None:
        """Record the instances given up on: the state's `failing` list, and the reason of the Running serving."""
        self.state.failing = [states.Restart(i, states.now(), given_up[i]) for i in sorted(given_up)]
        self.state.reason = (f"{len(given_up)} of {self.wanted} instances failing: "
                             + "; ".join(given_up[i] for i in sorted(given_up))) if given_up else None

    def definition_gone(self) -> bool:
        """Whether the serving's definition was deleted; a root that cannot be reached now does not count."""
        try:
            return not self.storage.exists(layout.ServingDir.of(self.project, self.definition.name).definition)
        except StorageError as exc:
            log.warning("cannot check the serving's definition (%s); serving on", exc)
            return False

    def shutdown(self) -> None:
        """SIGTERM the instances, SIGKILL those still there after the grace period, close the port."""
        for instance in self.instances.values():
            if instance.popen.poll() is None:
                instance.popen.terminate()
        deadline = time.monotonic() + STOP_GRACE_S
        for instance in self.instances.values():
            try:
                instance.popen.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                log.warning("instance %d did not stop within %.0f s: killed", instance.index, STOP_GRACE_S)
                instance.popen.kill()
                instance.popen.wait()
            self.forget(instance)
        self.instances.clear()
        self.state.instances = [None] * self.slots
        if self.reader is not None:
            self.reader.close()
            self.reader = None
        if self.sock is not None:
            self.sock.close()
            self.sock = None

    def run(self) -> int:
        code = 0
        try:
            self.save()
            self.resolve_files()
            self.bind()
            self.start()
            self.serve()
        except Stop:
            log.info("serving %s: stopping", self.definition.name)
            self.state.state = states.STOPPED
        except Exception as exc:  # any failure becomes the serving's recorded reason
            log.exception("serving %s failed", self.definition.name)
            self.state.state = states.FAILED
            self.state.reason = f"{type(exc).__name__}: {exc}" if not isinstance(exc, RuntimeError) else str(exc)
            code = 1
        finally:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second SIGTERM must not cut the clean-up short
            self.shutdown()
            if self.downloaded is not None:
                shutil.rmtree(self.downloaded, ignore_errors=True)
            if self.state.state != states.FAILED:
                self.state.state = states.STOPPED
            self.state.supervisor = None
            self.save()
            self.report({"state": self.state.state, "reason": self.state.reason})
        return code


def script_rel(storage: Storage, project: str, definition: defs.ServingDefinition, path: str) -> str:
    """A predictor or transformer script as a root-relative path: a bare file name is looked up in the model's
    version folder; any other path is read as `hdfs` reads it (hdfs.root_relative: 'Resources/predict.py',
    '/Projects/p/...', hdfs://..., and what hdfs.project_path() and abs_path() return under any root)."""
    text = path.strip() if isinstance(path, str) else ""
    if not text or text in (".", "..") or text.endswith("/"):
        raise defs.ServingError(f"script path {path!r} must be a file name in the model version or a project path")
    if "/" not in text and ":" not in text:
        return layout.join(layout.model_dir(project, definition.model_name, definition.model_version), text)
    try:
        return hdfs.root_relative(text, storage, project)
    except hdfs.InvalidPathError as exc:
        raise defs.ServingError(f"script path {path!r}: {exc}") from None


def main() -> int:
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format=f"%(asctime)s %(levelname)s supervisor (pid {os.getpid()}) %(name)s: %(message)s")
    name = sys.argv[1]
    ready_fd = int(os.environ.pop(READY_FD_ENV)) if READY_FD_ENV in os.environ else None
    settings = config.load()
    storage = Storage(settings.root)
    definition = defs.read(storage, settings.project, name)
    log_path = os.environ.get("HOPSML_SERVING_LOG", "")
    return Supervisor(storage, settings.project, definition, log_path, ready_fd, settings).run()


if __name__ == "__main__":
    sys.exit(main())
