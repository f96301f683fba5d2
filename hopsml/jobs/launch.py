"""Starting an execution: the command that runs the job's app, a new execution id, its first record, and the
runner process that takes it from there (runner.py).

A PYSPARK job's script runs as `spark-submit --master M [--conf k=v ...] APP args...`, the path a user's job
takes on a cluster (its secret settings, by name or by shape, go in a properties file only the user can read,
made by the runner beside the Spark defaults and removed when the app ends, never on the command line); M is the
job's `spark.master`, else the `master` setting. On a cluster master the project's
packed environment goes with it (`hopsml env pack`, the `ship_environment` setting), unless the job chose the
executors' Python itself (spark.archives, spark.pyspark.python); on a local master the executors run this Python.
A PYTHON job's script runs as `python APP args...`, no JVM. A notebook runs in a fresh kernel
(notebook.py); a PYSPARK notebook's Spark session gets the job's settings through PYSPARK_SUBMIT_ARGS and
hopsml's own settings (HOPSML_MASTER, HOPSML_SPARK_CONF).
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import socket
import subprocess
import sys
import time
from typing import Any

from hopsml import config, layout
from hopsml.errors import JobError
from hopsml.fs import Storage
from hopsml.jobs.definition import PYSPARK, JobDefinition, now
from hopsml.jobs.execution import INITIALIZING, LIVE, STOP_GRACE_S, Execution
from hopsml.processes import Proc
from hopsml.redact import is_secret, redact_conf, secret_parts

START_TIMEOUT_S = 120.0   # for the runner to record RUNNING (a Python start, a copy of the app, one fork)
# Words of the command (and the folder) the runner fills in: the app's local path, its staging folder, and
# --properties-file with the secret settings (runner.py). JSON-safe, since they travel in the runner's spec.
APP = {"placeholder": "app"}
STAGING = {"placeholder": "staging"}
PROPERTIES = {"placeholder": "properties"}
# Variables of the calling process that would mislead the job's: a spark-submit or notebook around the caller.
_NOT_INHERITED = ("PYSPARK_GATEWAY_PORT", "PYSPARK_GATEWAY_SECRET", "PYSPARK_SUBMIT_ARGS", "JPY_SESSION_NAME",
                  "JPY_PARENT_PID", "HOPSML_EXECUTION_NOTES", "HOPSML_LOG_TAG")


def spark_submit() -> str:
    """The spark-submit of this Python's pyspark (the venv's bin/), else $SPARK_HOME's, else the one on PATH."""
    beside = os.path.join(os.path.dirname(sys.executable), "spark-submit")
    if os.access(beside, os.X_OK):
        return beside
    home = os.environ.get("SPARK_HOME")
    if home and os.access(os.path.join(home, "bin", "spark-submit"), os.X_OK):
        return os.path.join(home, "bin", "spark-submit")
    found = shutil.which("spark-submit")
    if found:
        return found
    raise JobError("no spark-submit found beside this Python, under $SPARK_HOME or on PATH: install pyspark in this "
                   "environment (pip install pyspark) or set SPARK_HOME")


def _is_local(master: str) -> bool:
    return master == "local" or master.startswith(("local[", "local-cluster["))


def plan(job: JobDefinition, args: list[str], settings: config.Settings, storage: Storage) -> dict[str, Any]:
    """The command, environment and folder the job's app runs with (what the runner is told)."""
    master = job.spark_conf.get("spark.master") or settings.master
    conf = {key: value for key, value in job.spark_conf.items() if key != "spark.master"}
    secret = {key: value for key, value in conf.items() if is_secret(key, value)}
    public = {key: value for key, value in conf.items() if key not in secret}
    env = {key: value for key, value in os.environ.items() if key not in _NOT_INHERITED}
    bin_dir = os.path.dirname(sys.executable)
    env.update({"PATH": os.pathsep.join(p for p in (bin_dir, env.get("PATH")) if p), "PYTHONUNBUFFERED": "1",
                "HOPSML_ROOT": settings.root, "HOPSML_PROJECT": settings.project, "HOPSML_JOB_NAME": job.name,
                "HOPSML_LOG_DIR": os.path.abspath(os.path.expanduser(settings.log_dir))})
    if job.job_type == PYSPARK:
        env["PYSPARK_DRIVER_PYTHON"] = sys.executable
        env["HOPSML_MASTER"] = master
        if _is_local(master):
            from hopsml.cluster.session import conf_dir

            env.setdefault("PYSPARK_PYTHON", sys.executable)
            env.setdefault("SPARK_CONF_DIR", conf_dir())
            if master.startswith("local"):
                env.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    if job.kind == "notebook":
        command: list[Any] = [sys.executable, "-m", "hopsml.jobs.notebook", APP, STAGING, *args]
        if job.job_type == PYSPARK:
            # the JVM the kernel's session starts takes these words on its command line: the secret settings
            # reach that session through HOPSML_SPARK_CONF (hopsml's session sets them over the gateway)
            words = ["--master", master] + [w for k, v in public.items() for w in ("--conf", f"{k}={v}")]
            env["PYSPARK_SUBMIT_ARGS"] = " ".join(shlex.quote(word) for word in [*words, "pyspark-shell"])
            env["HOPSML_SPARK_CONF"] = json.dumps({**settings.spark_conf, **conf})
    elif job.job_type == PYSPARK:
        shipped: list[str] = []
        chosen = {"spark.archives", "spark.pyspark.python"} & set(conf)
        if not _is_local(master) and settings.ship_environment and not chosen:
            from hopsml.cluster import shipping

            shipped = shipping.pack(storage, settings.project).submit_args()
        name = [] if "spark.app.name" in conf else ["--name", job.name]
        command = [spark_submit(), "--master", master, *name,
                   *[w for k, v in public.items() for w in ("--conf", f"{k}={v}")], *([PROPERTIES] if secret else []),
                   *shipped, APP, *args]
    else:
        command = [sys.executable, APP, *args]
    return {"command": command, "env": env, "master": master if job.job_type == PYSPARK else None,
            "secret_conf": secret if job.job_type == PYSPARK and job.kind != "notebook" else {}}


def shown_command(command: list[Any], app: str, job: JobDefinition) -> list[str]:
    """The command as the record shows it: the app by its path, secret Spark settings hidden."""
    hidden = redact_conf(job.spark_conf)
    shown = []
    for word in command:
        if word == APP:
            shown.append(app)
        elif word == PROPERTIES:
            secrets = sum(1 for key, value in job.spark_conf.items() if is_secret(key, value))
            shown += ["--properties-file", f"<the Spark defaults and {secrets} secret settings>"]
        elif word == STAGING:
            shown.append(layout.EXECUTION_NOTEBOOK)
        elif isinstance(word, str) and "=" in word and word.split("=", 1)[0] in hidden:
            key = word.split("=", 1)[0]
            shown.append(f"{key}={hidden[key]}")
        else:
            shown.append(str(word))
    return shown


def claim(storage: Storage, jdir: layout.JobDir) -> layout.ExecutionDir:
    """The next execution id of the job, taken by creating its folder (exclusive on local disks), so two runs
    started at once never share one."""
    taken = [int(name) for name in _ids(storage, jdir)]
    number = max(taken, default=0) + 1
    while not storage.claim_dir(jdir.execution(number).path):
        number += 1
    return jdir.execution(number)


def _ids(storage: Storage, jdir: layout.JobDir) -> list[str]:
    return [rel.rsplit("/", 1)[-1] for rel in storage.ls(jdir.executions)
            if rel.rsplit("/", 1)[-1].isdigit() and int(rel.rsplit("/", 1)[-1]) > 0]


def live_before(storage: Storage, project: str, job: str, number: int, lost_after_s: float) -> list[Execution]:
    """The executions of `job` with a lower id than `number` that are still INITIALIZING or RUNNING (a folder
    claimed moments ago, its record not yet written, counts as INITIALIZING)."""
    jdir = layout.JobDir.of(project, job)
    found = []
    for other in sorted(int(name) for name in _ids(storage, jdir)):
        if other >= number:
            continue
        edir = jdir.execution(other)
        if not storage.exists(edir.record):
            info = storage.info(edir.path)
            if info.mtime is not None and time.time() - info.mtime.timestamp() < lost_after_s:
                found.append(Execution(storage, project, job, other, {"state": INITIALIZING,
                                                                      "submission_time": now()}, lost_after_s))
            continue
        execution = Execution.load(storage, project, job, other, lost_after_s)
        if execution.state in LIVE:
            found.append(execution)
    return found


def start(job: JobDefinition, args: list[str], settings: config.Settings, *, owned: bool,
          exclusive: bool = False) -> Execution:
    """Start an execution of `job` with `args` and return it once its runner has recorded it RUNNING (or its
    end, when the app could not start). `owned`: this process awaits it, and the runner stops it (LOST) should
    this process end first."""
    storage = Storage(settings.root)
    jdir = layout.JobDir.of(settings.project, job.name)
    planned = plan(job, args, settings, storage)   # a missing spark-submit or a failed pack fails before an id
    edir = claim(storage, jdir)
    if exclusive:
        running = [e for e in live_before(storage, settings.project, job.name, edir.id, settings.lost_after_s)
                   if not _ending(e)]
        if running:
            storage.delete(edir.path)
            ids = ", ".join(f"{e.id} ({e.state}, started {e.start})" for e in running)
            raise JobError(f"job {job.name!r} is already running (execution {ids}) and this run was exclusive: "
                           f"wait for it, or stop it with 'hopsml jobs stop {job.name} {running[0].id}'",
                           job=job.name, execution=running[0].id)
    planned["env"]["HOPSML_EXECUTION_ID"] = str(edir.id)
    me = Proc.of(os.getpid())
    record = {"id": edir.id, "job_name": job.name, "project": settings.project, "state": INITIALIZING,
              "final_status": "UNDEFINED", "submission_time": now(), "args": args, "user": job_user(settings),
              "job_type": job.job_type, "kind": job.kind, "app_path": job.app_path, "master": planned["master"],
              "command": shown_command(planned["command"], job.app_path, job),
              "submitted_by": {"host": socket.gethostname(), **me.to_dict()}, "awaited": owned}
    storage.write_json(edir.record, record)
    spec = {"root": settings.root, "project": settings.project, "job": job.name, "id": edir.id,
            "command": planned["command"], "env": planned["env"], "secret_conf": planned["secret_conf"],
            "cwd": STAGING if job.kind == "notebook" else _workdir(job),
            "app": {"path": job.app_path, "in_project": job.app_in_project,
                    "suffix": os.path.splitext(job.app_path)[1].lower()},
            "owner": me.to_dict() if owned else None, "heartbeat_s": settings.heartbeat_s,
            "sync_s": settings.sync_interval_s, "grace_s": STOP_GRACE_S,
            "redact": sorted({part for conf in (settings.spark_conf, job.spark_conf) for key, value in conf.items()
                              for part in secret_parts(str(key), value)})}
    said = _spawn_runner(spec, job.name, edir.id)
    execution = Execution.load(storage, settings.project, job.name, edir.id, settings.lost_after_s)
    if execution.state == INITIALIZING:
        raise JobError(f"execution {edir.id} of job {job.name!r}: its runner ended without recording a start"
                       + (f": {said}" if said else f"; see {storage.uri(layout.join(edir.path, 'runner.log'))}"),
                       job=job.name, execution=edir.id)
    return execution


def _ending(execution: Execution) -> bool:
    """Whether a running execution is being ended because the process that awaited it is gone (a retried task
    whose worker was killed): its runner stops it within the grace period, so wait for that, bounded."""
    owner = execution.record.get("submitted_by") or {}
    if not execution.record.get("awaited") or owner.get("host") != socket.gethostname():
        return False
    try:
        if Proc.from_dict(owner).alive():
            return False
    except (KeyError, TypeError, ValueError):
        return False
    try:
        execution.await_termination(STOP_GRACE_S + 30.0)
    except JobError:
        return False
    return True


def job_user(settings: config.Settings) -> str:
    import getpass

    return settings.user or getpass.getuser()


def _workdir(job: JobDefinition) -> str:
    """A script's folder (a local app), as when one runs `spark-submit app.py` there; else the user's home. (A
    notebook's kernel starts in the notebook's folder; the process that drives it, in the execution's folder, so
    that no module beside the notebook shadows the ones it imports.)"""
    return os.path.dirname(job.app_path) if not job.app_in_project else os.path.expanduser("~")


def _spawn_runner(spec: dict[str, Any], job: str, execution_id: int) -> str:
    """Start the runner and wait until it says the execution runs (it closes its stdout then); what it wrote
    to stderr before it detached (a reason it could not start)."""
    process = subprocess.Popen([sys.executable, "-m", "hopsml.jobs.runner"], stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, close_fds=True,
                               cwd=os.path.abspath(os.sep))   # no module of the app's folder shadows the runner's
    try:
        _, err = process.communicate(json.dumps(spec).encode(), timeout=START_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        process.kill()
        process.communicate()
        raise JobError(f"execution {execution_id} of job {job!r}: its runner did not start within "
                       f"{START_TIMEOUT_S:g} s (a very busy machine?); the execution is shown LOST after "
                       "lost_after_s", job=job, execution=execution_id) from None
    return err.decode(errors="replace").strip()[-3000:]
