"""Create, start, stop, query and delete servings: the work behind hops' `serving` functions.

Everything is read from the project each time (definition, server state, the processes behind it), so a
new kernel or the CLI sees and controls what an earlier one started.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from hopsml import config, execution_notes, layout
from hopsml.errors import HopsmlError
from hopsml.fs import Storage
from hopsml.model import registry
from hopsml.processes import Proc, wait_gone, wait_port_closed
from hopsml.records import BrokenRecordError, inside
from hopsml.serving import definition as defs
from hopsml.serving.definition import (
    Batching,
    Canary,
    InferenceLog,
    Models,
    MovedOptionError,
    Scaling,
    ServingDefinition,
    ServingError,
    ServingNotFound,
)
from hopsml.serving.instance import inference_log
from hopsml.serving.server import state as states
from hopsml.serving.server.supervisor import (
    READY_FD_ENV,
    SERVER_SETTINGS,
    START_TIMEOUT_S,
    STOP_GRACE_S,
    private_file,
    script_rel,
)

log = logging.getLogger(__name__)

LOG_TAIL_LINES = 20
START_LOCK = ".start.lock"
RELOAD_POLL_S = 0.05     # how often a reload's end is looked for in the server's state
# -c, not -m: the package is imported first either way, and runpy warns about a module run twice
SUPERVISOR_MAIN = "import sys; from hopsml.serving.server.supervisor import main; sys.exit(main())"
# Runs the command in its argv in a session of its own, prints its pid and exits; output goes to the log (fd 2).
LAUNCHER = ("import os, subprocess, sys; fd = int(os.environ['" + READY_FD_ENV + "']); "
            "print(subprocess.Popen(sys.argv[1:], pass_fds=(fd,), start_new_session=True, "
            "stdin=subprocess.DEVNULL, stdout=2, stderr=2).pid)")


class Status(str):
    """A serving's status as hops returns it ('Running', 'Stopped', ...), with `reason` and `log_tail`
    when it is 'Failed'."""

    reason: str | None
    log_tail: str

    def __new__(cls, value: str, reason: str | None = None, log_tail: str = "") -> Status:
        out = super().__new__(cls, value)
        out.reason = reason
        out.log_tail = log_tail
        return out


@dataclass
class KafkaTopic:
    """hops' kafka_topic_dto, as recorded: hopsml runs no Kafka."""

    name: str | None
    num_partitions: int
    num_replicas: int


@dataclass
class Serving:
    """A serving as hops' `Serving` object shows it, plus what the local server records."""

    id: int
    name: str
    model_path: str
    model_name: str
    model_version: int
    artifact_version: int | str | None
    predictor: str | None
    transformer: str | None
    model_server: str
    serving_tool: str
    requested_instances: int
    available_instances: int
    available_transformer_instances: int | None
    predictor_resource_config: dict[str, Any] | None
    creator: str
    created: str
    status: Status
    kafka_topic_dto: KafkaTopic
    batching_enabled: bool
    inference_logging: str | None
    host: str
    port: int | None
    internal_ips: list[str]
    internal_port: str | None
    internal_path: str | None
    restarts: list[states.Restart] = field(default_factory=list)
    log: str = ""
    failing_instances: list[states.Restart] = field(default_factory=list)   # given up on after crashing
    canary_version: int | None = None
    canary_traffic_percent: int = 0
    scaling: list[states.ScaleStep] = field(default_factory=list)   # an autoscaled serving's last steps
    min_instances: int | None = None    # set when the serving scales with load (between these bounds)
    max_instances: int | None = None
    scale_target: float | None = None


def _where(settings: config.Settings | None) -> tuple[Storage, str, config.Settings]:
    settings = settings or config.load()
    return Storage(settings.root), settings.project, settings


# --- reading -------------------------------------------------------------------------------------------
def log_path(settings: config.Settings, project: str, name: str) -> str:
    """The serving's log: in the project's Logs dataset under a local root, else under the log_dir setting."""
    storage = Storage(settings.root)
    local = storage.local_path(layout.ServingDir.of(project, name).log)
    if local is None:
        local = os.path.join(os.path.expanduser(settings.log_dir), "serving", project, f"{name}.log")
    return local


def recorded_log(settings: config.Settings, project: str, name: str, st: states.ServerState) -> str:
    """The log server.json names when it lies inside the project's folder or the log_dir setting; a path that
    leads elsewhere is refused (a hand-edited record must not show another file's tail) for the serving's own."""
    own = log_path(settings, project, name)
    if not st.log:
        return own
    found = inside(st.log, [Storage(settings.root).local_path(layout.project_dir(project)), settings.log_dir])
    if found is None:
        log.warning("serving %s: server.json names the log %r, outside the project and the log_dir setting; "
                    "showing %s instead", name, st.log, own)
        return own
    return found


def log_tail(path: str, lines: int = LOG_TAIL_LINES) -> str:
    """The last `lines` lines of a log file ('' when there is none, or when a symbolic link stands at its path:
    someone else's file is never shown as the serving's log)."""
    try:
        with open(path, "rb", opener=lambda p, f: os.open(p, f | os.O_NOFOLLOW)) as stream:
            stream.seek(0, os.SEEK_END)
            stream.seek(max(0, stream.tell() - 64 * 1024))
            text = stream.read().decode("utf-8", errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


def status_of(settings: config.Settings, project: str, name: str, st: states.ServerState) -> Status:
    """The truthful status: the recorded state, checked against the supervisor's process."""
    path = recorded_log(settings, project, name, st)
    supervisor = st.supervisor_proc
    alive = supervisor is not None and supervisor.alive()
    if st.state in (states.STARTING, states.RUNNING, states.STOPPING) and not alive:
        reason = (f"the server process (pid {supervisor.pid if supervisor else '?'}) is gone without stopping the "
                  "serving (killed, or the machine restarted); start it again")
        return Status(states.FAILED, reason, log_tail(path))
    if st.state == states.FAILED:
        return Status(states.FAILED, st.reason, log_tail(path))
    if st.state == states.RUNNING and st.failing:   # serving on its healthy instances; the reason names the others
        return Status(states.RUNNING, st.reason)
    return Status(st.state)


def _view(settings: config.Settings, project: str, d: ServingDefinition) -> Serving:
    storage = Storage(settings.root)
    st = states.read(storage, project, d.name)
    status = status_of(settings, project, d.name, st)
    running = status in (states.RUNNING, states.STARTING)
    host = "127.0.0.1" if d.host in ("0.0.0.0", "") else ("::1" if d.host == "::" else d.host)
    return Serving(id=d.id, name=d.name, model_path=d.model_path, model_name=d.model_name,
                   model_version=d.model_version, artifact_version=d.artifact_version, predictor=d.predictor,
                   transformer=d.transformer, model_server=d.model_server, serving_tool=d.serving_tool,
                   requested_instances=st.wanted if d.autoscaled and running else d.instances,
                   available_instances=st.available if running else 0,
                   available_transformer_instances=(st.available if running else 0) if d.transformer else None,
                   predictor_resource_config=d.predictor_resource_config, creator=d.creator, created=d.created,
                   status=status,
                   kafka_topic_dto=KafkaTopic(None if d.topic_name in (None, "NONE") else d.topic_name,
                                              d.num_partitions, d.num_replicas),
                   batching_enabled=d.batching_enabled, inference_logging=d.inference_logging, host=d.host,
                   port=st.port if running else None, internal_ips=[host] if running else [],
                   internal_port=str(st.port) if running else None,
                   internal_path=f"/v1/models/{d.name}" if running else None, restarts=list(st.restarts),
                   log=recorded_log(settings, project, d.name, st),
                   failing_instances=list(st.failing) if running else [], canary_version=d.canary_version,
                   canary_traffic_percent=d.canary_traffic_percent, scaling=list(st.scaling),
                   **_scaling_of(d))


def _scaling_of(d: ServingDefinition) -> dict[str, Any]:
    if not d.autoscaled:
        return {}
    low, high = d.scaling_bounds
    return {"min_instances": low, "max_instances": high, "scale_target": d.scale_target}


def get_all(settings: config.Settings | None = None) -> list[Serving]:
    """Every serving that can be read; one whose serving.json cannot is left out with a warning naming it and
    why (`hopsml serving list` shows it as BROKEN), so one bad record does not hide the others."""
    servings = []
    for name, found in scan_all(settings):
        if isinstance(found, BrokenRecordError):
            log.warning("serving %r left out: %s", name, found)
        else:
            servings.append(found)
    return servings


def scan_all(settings: config.Settings | None = None) -> list[tuple[str, Serving | BrokenRecordError]]:
    """Every serving by name, or why its serving.json cannot be read: listings show it as BROKEN and go on."""
    storage, project, settings = _where(settings)
    return [(name, d if isinstance(d, BrokenRecordError) else _view(settings, project, d))
            for name, d in defs.scan(storage, project)]


def get(serving_name: str, settings: config.Settings | None = None) -> Serving:
    """The serving, or ServingNotFound naming those that exist."""
    storage, project, settings = _where(settings)
    return _view(settings, project, defs.read(storage, project, serving_name))


# --- creating ------------------------------------------------------------------------------------------
def _check_model(storage: Storage, project: str, name: str, version: int,
                 settings: config.Settings) -> registry.ModelVersion:
    """The registry version, or a ServingError naming the models or versions that exist."""
    try:
        return registry.get_model(name, version, settings=settings)
    except registry.ModelNotFoundError as exc:
        raise ServingError(f"cannot serve {name!r} version {version}: {exc}") from None


def create_or_update(serving_name: str, model_path: str, model_server: str | None = None, model_version: int = 1,
                     artifact_version: int | str | None = None, predictor: str | None = None,
                     transformer: str | None = None, kserve: bool | None = None, batching_enabled: bool = False,
                     topic_name: str | None = "CREATE", num_partitions: int = 1, num_replicas: int = 1,
                     inference_logging: str | None = "ALL", instances: int = 1,
                     transformer_instances: int | None = None, predictor_resource_config: dict[str, Any] | None = None,
                     *, host: str | None = None, port: int | None = None, max_body_bytes: int | None = None,
                     batching: Batching | None = None, canary: Canary | None = None, scaling: Scaling | None = None,
                     models: Models | None = None, inference_log: InferenceLog | None = None,
                     settings: config.Settings | None = None, **moved: object) -> Serving:
    """Define (or redefine) a serving. A running one takes the new definition in place, answering throughout on
    the same port: the new instances start beside the old ones, which drain once the new are ready (a canary
    added, promoted or rolled back, another version, other scripts, batching or instance count); a change of host,
    port, autoscaling or models restarts it.

    hops' parameters come first, in hops' order; then hopsml's: `host` and `port` to listen on (127.0.0.1 and any
    free port by default), `max_body_bytes` (larger requests get 413), and its extensions in small groups
    (definition.py says what each field does):

    * `batching=Batching(max_batch_size=, batch_timeout_micros=, max_enqueued_batches=)`: TF Serving's knobs, used
      with `batching_enabled=True`;
    * `canary=Canary(version=, traffic_percent=)`: another version served beside `model_version` (the stable one),
      taking `traffic_percent` of the requests that name no version (10 by default); `promote`, `rollback` and
      `canary_gate` end it (canary.py);
    * `scaling=Scaling(min_instances=, max_instances=, target=, window_s=)`: the serving scales between the bounds
      with its load (autoscale.py); `min_instances=0` scales to zero. Without it the serving runs `instances`;
    * `models=Models(names=[...], max_loaded=, max_memory_mb=)`: other registered models the instances answer for
      too, every version of each, loaded on first request and evicted least recently used (multiplex.py);
    * `inference_log=InferenceLog(roll_seconds=, roll_bytes=, queue=)`: how the inference log writes its files.

    A group's field left None, or a group not given, keeps the serving's previous value (or the default)."""
    unknown = [keyword for keyword in moved if defs.moved_option(keyword) is None]
    if unknown:
        raise TypeError(f"create_or_update() got an unexpected keyword argument {unknown[0]!r}")
    if moved:
        raise MovedOptionError("create_or_update() takes hopsml's extensions in groups (hopsml.serving.Batching, "
                               "Canary, Scaling, Models, InferenceLog): "
                               + "; ".join(str(defs.moved_option(keyword)) for keyword in moved))
    groups: dict[str, defs.OptionGroup | None] = {"batching": batching, "canary": canary, "scaling": scaling,
                                                  "models": models, "inference_log": inference_log}
    for kind in defs.OPTION_GROUPS:
        given = groups[kind.KEYWORD]
        if given is not None and not isinstance(given, kind):
            example = "Models(names=[...])" if kind is Models else f"{kind.__name__}(...)"
            raise MovedOptionError(f"create_or_update: {kind.KEYWORD}= takes hopsml.serving.{example}, not "
                                   f"{given!r}")
    storage, project, settings = _where(settings)
    defs.check_name(serving_name)
    if transformer is not None and kserve is None:
        kserve = True  # as hops does: transformers came with KServe
    if kserve and batching_enabled:
        raise ServingError("batching_enabled=True cannot be combined with KServe (kserve=True or a transformer), "
                           "as on Hopsworks; drop one")
    name, version = defs.parse_model_path(model_path, project, model_version)
    if version is None:
        raise ServingError("model_version must be a whole number from 1 up, not None")
    if isinstance(version, bool) or not isinstance(version, int):
        raise ServingError(f"model_version must be a whole number from 1 up, not {version!r}")
    mv = _check_model(storage, project, name, version, settings)
    if model_server is None:
        model_server = defs.PYTHON
    if model_server not in defs.MODEL_SERVERS:
        raise ServingError(f"model_server {model_server!r} is not supported; "
                           f"use one of {', '.join(defs.MODEL_SERVERS)}")
    old = None
    if storage.exists(layout.ServingDir.of(project, serving_name).definition):
        old = defs.read(storage, project, serving_name)
    previous = old.to_dict() if old is not None else {}
    if previous.get("model_name") != name or previous.get("canary_version") == mv.version:
        previous.pop("canary_version", None)          # a canary of another model, or the one now stable: gone
        previous.pop("canary_traffic_percent", None)
    extensions: dict[str, Any] = {"max_body_bytes": max_body_bytes}
    for group in groups.values():
        extensions.update(group.to_record() if group is not None else {})
    if canary is not None and canary.version is not None:
        _check_model(storage, project, name, canary.version, settings)
        if canary.traffic_percent is None and previous.get("canary_version") is None:
            extensions["canary_traffic_percent"] = 10
    made: dict[str, Any] = {"creator": old.creator, "created": old.created} if old is not None else {}
    d = ServingDefinition(
        name=serving_name, model_path=layout.model_versions_dir(project, name), model_name=name,
        model_version=mv.version, model_server=model_server,
        id=old.id if old is not None else defs.next_id(storage, project), artifact_version=artifact_version,
        predictor=predictor, transformer=transformer,
        serving_tool=defs.SERVING_TOOL_KSERVE if kserve else defs.SERVING_TOOL_DEFAULT,
        batching_enabled=batching_enabled, topic_name=topic_name, num_partitions=num_partitions,
        num_replicas=num_replicas, inference_logging=inference_logging, instances=instances,
        transformer_instances=transformer_instances, predictor_resource_config=predictor_resource_config,
        host=host if host is not None else previous.get("host", defs.DEFAULT_HOST),
        port=port if port is not None else previous.get("port", 0),
        **_kept(previous, extensions),
        **made)
    for script in (predictor, transformer):
        where = script_rel(storage, project, d, script) if script is not None else None
        if where is not None and not storage.exists(where):
            raise ServingError(f"the script {script!r} does not exist at {storage.uri(where)}; give a file name in the "
                               "model's version folder or a project path such as 'Resources/predictor.py'")
    was_running = old is not None and get_status(serving_name, settings) in (states.RUNNING, states.STARTING)
    if was_running and old is not None and _reload(serving_name, old, d, storage, project, settings):
        execution_notes.note("serving", name=serving_name, model=name, version=mv.version)
        log.info("serving %s reloaded in place for model %s version %d", serving_name, name, mv.version)
        return get(serving_name, settings)
    if was_running:
        stop(serving_name, settings=settings)
    defs.write(storage, project, d)
    execution_notes.note("serving", name=serving_name, model=name, version=mv.version)
    log.info("serving %s %s for model %s version %d", serving_name, "updated" if old else "created", name,
             mv.version)
    if was_running:
        start(serving_name, settings=settings)
    return get(serving_name, settings)


def _reload(serving_name: str, old: ServingDefinition, new: ServingDefinition, storage: Storage, project: str,
            settings: config.Settings) -> bool:
    """Take `new` into the running serving without a restart (supervisor.py: its instances start beside the old
    ones on the same port, which drain once they are ready), waiting until the old ones have ended. False, with
    nothing written, when it must restart instead (a change of port, host or autoscaling, or a server that
    cannot reload); ServingError, with the old definition put back, when the new instances cannot load."""
    why = defs.restart_needed(old, new)
    with _start_lock(settings, project, serving_name):
        st = states.read(storage, project, serving_name)
        supervisor = st.supervisor_proc
        if why is not None or st.state != states.RUNNING or st.reloads is None or supervisor is None \
                or not supervisor.alive():
            log.info("serving %s restarts to take its new definition%s", serving_name, f" ({why})" if why else "")
            return False
        done = st.reloads
        defs.write(storage, project, new)
        supervisor.signal(signal.SIGHUP)
        deadline = time.monotonic() + START_TIMEOUT_S + STOP_GRACE_S + 30
        while True:
            st = states.read(storage, project, serving_name)
            if st.reloads is not None and st.reloads > done:
                break
            if not supervisor.alive() or time.monotonic() > deadline:
                defs.write(storage, project, old)
                raise ServingError(f"serving {serving_name!r} did not take its new definition "
                                   f"({'its server ended' if not supervisor.alive() else 'it took too long'}); the "
                                   f"definition is back as it was. Last lines of {st.log}:\n{log_tail(st.log)}")
            time.sleep(RELOAD_POLL_S)
    if st.reload_error is not None:
        defs.write(storage, project, old)
        raise ServingError(f"serving {serving_name!r} could not take its new definition and serves on as before: "
                           f"{st.reload_error}. Last lines of {st.log}:\n{log_tail(st.log)}")
    return True


def _kept(previous: dict[str, Any], given: dict[str, Any]) -> dict[str, Any]:
    """The extensions given (serving.json keys: max_body_bytes and the groups' fields), else the previous
    definition's values; those of neither keep their defaults."""
    keys = {"max_body_bytes"} | {key for group in defs.OPTION_GROUPS for key in group.RECORD.values()}
    return {key: given[key] if given.get(key) is not None else previous[key] for key in keys
            if given.get(key) is not None or key in previous}


# --- running -------------------------------------------------------------------------------------------
def start(serving_name: str, *, timeout_s: float = 300.0, settings: config.Settings | None = None) -> Serving:
    """Start the serving's server (detached: it outlives this process) and wait until every instance
    answers, or fail with the reason and the log's last lines. Starting a running serving does nothing; two
    processes starting it at once get one server (the second waits for the first and finds it running)."""
    storage, project, settings = _where(settings)
    defs.read(storage, project, serving_name)
    with _start_lock(settings, project, serving_name):
        return _start(serving_name, timeout_s, storage, project, settings)


def start_lock_path(settings: config.Settings, project: str, serving_name: str) -> str:
    """The file `start` locks: `Serving/<name>/.start.lock` under a local root. HDFS and S3 have no lock a
    process can hold, and a serving's server runs on the host that starts it, so under those roots it is a file
    on this host, under the log_dir setting beside the serving's log, named after the serving folder's URI
    (without options or credentials)."""
    storage = Storage(settings.root)
    rel = layout.ServingDir.of(project, serving_name).path
    folder = storage.local_path(rel)
    if folder is not None:
        return os.path.join(folder, START_LOCK)
    key = hashlib.sha256(storage.uri(rel).encode()).hexdigest()[:32]
    return os.path.join(os.path.expanduser(settings.log_dir), "serving", "locks", f"{key}.lock")


@contextmanager
def _start_lock(settings: config.Settings, project: str, serving_name: str) -> Iterator[None]:
    """An exclusive lock (flock) on `start_lock_path` while a process checks and starts the serving, so two
    starts at once give one server."""
    path = start_lock_path(settings, project, serving_name)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "a") as handle:  # not inherited: Popen closes other fds
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _start(serving_name: str, timeout_s: float, storage: Storage, project: str, settings: config.Settings) -> Serving:
    d = defs.read(storage, project, serving_name)
    current = get_status(serving_name, settings)
    if current in (states.RUNNING, states.STARTING):
        log.info("serving %s is already %s", serving_name, current)
        return get(serving_name, settings)
    _check_model(storage, project, d.model_name, d.model_version, settings)
    for script in (d.predictor, d.transformer):
        where = script_rel(storage, project, d, script) if script is not None else None
        if where is not None and not storage.exists(where):
            raise ServingError(f"the script {script!r} of serving {serving_name!r} no longer exists at "
                               f"{storage.uri(where)}; put it back or redefine the serving")
    path = log_path(settings, project, serving_name)
    inference_log.private_folder(os.path.dirname(path))   # the logs hold what clients sent: the user's alone
    states.write(storage, project, serving_name, states.ServerState(state=states.STARTING, host=d.host, log=path,
                                                                    started=states.now()))
    ready_r, ready_w = os.pipe()
    env = {**os.environ, "HOPSML_ROOT": settings.root, "HOPSML_PROJECT": project, READY_FD_ENV: str(ready_w),
           **({"HOPSML_ONLINE_STORE": settings.online_store} if settings.online_store else {}),
           "HOPSML_SERVING_LOG": path,
           **{config.ENV_PREFIX + name.upper(): str(getattr(settings, name)) for name in SERVER_SETTINGS}}
    env.pop(inference_log.LOG_ENV, None)
    if d.logs_inferences:
        folder = inference_log.inference_log_path(settings, project, serving_name)
        inference_log.private_folder(folder)
        env[inference_log.LOG_ENV] = inference_log.LogOptions(
            folder=folder, mode=d.inference_logging or "ALL", serving=d.name, model_name=d.model_name,
            model_version=d.model_version, roll_bytes=d.inference_log_roll_bytes,
            roll_seconds=float(d.inference_log_roll_seconds), queue_size=d.inference_log_queue,
            max_bytes=settings.inference_log_max_bytes, max_age_s=settings.inference_log_max_age_s,
            max_record_bytes=settings.inference_log_max_record_bytes).to_env()
    try:
        log_file = open(path, "ab", opener=private_file)
    except OSError as exc:
        states.write(storage, project, serving_name, states.ServerState(state=states.FAILED, host=d.host, log=path,
                                                                        reason=f"cannot open its log {path}: {exc}"))
        raise ServingError(f"serving {serving_name!r}: cannot open its log {path} ({exc.strerror or exc}); "
                           + ("a symbolic link stands there: remove it (hopsml never follows one)"
                              if os.path.islink(path) else "check that folder")) from None
    with log_file:
        log_file.write(f"--- {states.now()} starting serving {serving_name}\n".encode())
        log_file.flush()
        # a launcher starts the supervisor and exits at once: the supervisor is nobody's child here, so no
        # zombie stays in this process when it ends, whenever that is
        launcher = subprocess.Popen([sys.executable, "-S", "-c", LAUNCHER, sys.executable, "-c", SUPERVISOR_MAIN,
                                     serving_name], env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                    stderr=log_file, pass_fds=(ready_w,), cwd=os.path.dirname(path))
    os.close(ready_w)
    try:
        out, _ = launcher.communicate()
        if launcher.returncode != 0 or not out.strip().isdigit():
            raise ServingError(f"cannot start the server of serving {serving_name!r}: its launcher exited with "
                               f"{launcher.returncode}. Last lines of {path}:\n{log_tail(path)}")
        supervisor = Proc.of(int(out))
        try:
            report = _read_report(ready_r, timeout_s)
        except BaseException:  # Ctrl-C in the notebook while it starts: it is not left starting on its own
            _abort(serving_name, supervisor, settings)
            raise
    finally:
        os.close(ready_r)
    if report is None and supervisor.alive():
        _abort(serving_name, supervisor, settings)
        raise ServingError(f"serving {serving_name!r} did not start within {timeout_s:.0f} s; it was stopped. "
                           f"Last lines of {path}:\n{log_tail(path)}")
    if report is None or report.get("state") != states.RUNNING:
        wait_gone(supervisor, STOP_GRACE_S + 10)
        _port_released(serving_name, states.read(storage, project, serving_name).port)
        st = get_status(serving_name, settings)
        reason = (report or {}).get("reason") or st.reason or "the server process ended"
        raise ServingError(f"serving {serving_name!r} failed to start: {reason}. Last lines of {path}:\n"
                           f"{log_tail(path)}")
    log.info("serving %s running on %s:%s", serving_name, d.host, report.get("port"))
    return get(serving_name, settings)


def _abort(serving_name: str, supervisor: Proc, settings: config.Settings) -> None:
    """Stop a serving whose supervisor may not have recorded itself yet (it is signalled directly)."""
    if supervisor.signal(signal.SIGTERM) and not wait_gone(supervisor, STOP_GRACE_S + 10):
        _kill_group(supervisor)
    stop(serving_name, settings=settings)


def _kill_group(supervisor: Proc) -> None:
    """SIGKILL the supervisor's process group (its instances are in it) and wait for the supervisor."""
    if supervisor.alive():
        try:
            os.killpg(supervisor.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    wait_gone(supervisor, 10)


def _read_report(fd: int, timeout_s: float) -> dict[str, Any] | None:
    """The supervisor's one-line report, or None when it ended or the time ran out without one."""
    import select

    deadline = time.monotonic() + timeout_s
    data = b""
    while b"\n" not in data:
        left = deadline - time.monotonic()
        if left <= 0:
            return None
        readable, _, _ = select.select([fd], [], [], left)
        if not readable:
            return None
        chunk = os.read(fd, 4096)
        if not chunk:
            return None
        data += chunk
    return json.loads(data.split(b"\n", 1)[0])


def stop(serving_name: str, *, settings: config.Settings | None = None) -> None:
    """Stop the server and every instance, from this or any other process; nothing is left listening."""
    storage, project, settings = _where(settings)
    defs.read(storage, project, serving_name)
    st = states.read(storage, project, serving_name)
    supervisor = st.supervisor_proc
    if supervisor is not None and supervisor.signal(signal.SIGTERM):
        if not wait_gone(supervisor, STOP_GRACE_S + 10):
            log.warning("serving %s: the server (pid %d) did not stop; killing its process group", serving_name,
                        supervisor.pid)
            _kill_group(supervisor)
    for proc in st.instance_procs():  # the supervisor stops them; these are left only if it was killed
        if proc.signal(signal.SIGKILL):
            wait_gone(proc, 10)
    _port_released(serving_name, st.port)
    st = states.read(storage, project, serving_name)
    if st.state != states.STOPPED or st.supervisor is not None:
        failed = st.state == states.FAILED
        states.write(storage, project, serving_name,
                     states.ServerState(state=states.FAILED if failed else states.STOPPED,
                                        reason=st.reason if failed else None, host=st.host,
                                        restarts=st.restarts, log=st.log, instances=[None] * len(st.instances)))
    log.info("serving %s stopped", serving_name)


def _port_released(serving_name: str, port: int) -> None:
    if port and not wait_port_closed(port, 10.0):
        log.warning("serving %s is stopped, but something still listens on its port %d: another program took it",
                    serving_name, port)


def delete(serving_name: str, *, settings: config.Settings | None = None) -> None:
    """Stop the serving if it runs and remove its definition and state (its log stays in Logs/)."""
    storage, project, settings = _where(settings)
    defs.read(storage, project, serving_name)
    stop(serving_name, settings=settings)
    storage.delete(layout.ServingDir.of(project, serving_name).path)
    log.info("serving %s deleted", serving_name)


def get_inference_log(serving_name: str, settings: config.Settings | None = None) -> str | None:
    """The folder of the serving's inference log (Parquet files; hops' Kafka topic), None when it logs nothing."""
    storage, project, settings = _where(settings)
    d = defs.read(storage, project, serving_name)
    return inference_log.inference_log_path(settings, project, serving_name) if d.logs_inferences else None


def get_status(serving_name: str, settings: config.Settings | None = None) -> Status:
    """The serving's status as hops gives it ('Running', 'Stopped', 'Starting', 'Failed'), read from its server's
    state: with the reason and the log's last lines when it failed."""
    storage, project, settings = _where(settings)
    defs.read(storage, project, serving_name)
    return status_of(settings, project, serving_name, states.read(storage, project, serving_name))


# --- inference -----------------------------------------------------------------------------------------
def make_inference_request(serving_name: str, data: object, verb: str = ":predict", *, timeout_s: float = 60.0,
                           settings: config.Settings | None = None) -> Any:
    """POST `data` to the serving's `/v1/models/<name><verb>` and return the decoded JSON answer; a list is
    sent as {"instances": data}. An error answer raises ServingError with the server's message."""
    serving = get(serving_name, settings)
    if serving.status != states.RUNNING or not serving.internal_ips:
        raise ServingError(f"serving {serving_name!r} is {serving.status}, not Running"
                           f"{': ' + serving.status.reason if serving.status.reason else ''}; start it with "
                           f"hopsml.serving.start({serving_name!r})")
    if not verb.startswith(":"):
        verb = ":" + verb
    body = {"instances": data} if isinstance(data, list) else data
    host = serving.internal_ips[0]
    url = f"http://{'[' + host + ']' if ':' in host else host}:{serving.internal_port}/v1/models/{serving_name}{verb}"
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            return json.loads(response.read())
    except urllib.error.HTTPError as exc:
        text = exc.read().decode("utf-8", errors="replace")
        try:
            message = json.loads(text).get("error", text)
        except (ValueError, AttributeError):
            message = text
        raise InferenceError(f"serving {serving_name!r} answered {exc.code}: {message}", exc.code) from None
    except (urllib.error.URLError, OSError) as exc:
        raise ServingError(f"cannot reach serving {serving_name!r} at {url}: {exc}; check "
                           f"hopsml.serving.get_status({serving_name!r})") from None


class InferenceError(ServingError):
    """The serving answered an inference request with an error; `status` is the HTTP status."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


__all__ = ["Batching", "Canary", "HopsmlError", "InferenceError", "InferenceLog", "KafkaTopic", "Models",
           "MovedOptionError", "Scaling", "Serving", "ServingError", "ServingNotFound", "Status",
           "create_or_update", "delete", "get", "get_all", "get_inference_log", "get_status", "make_inference_request",
           "start", "stop"]
