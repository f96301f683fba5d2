"""The experiment record (experiment.json) and the driver-side run that keeps it true.

An `ExperimentRun` is a context manager: leaving the block marks the record FINISHED, an exception
FAILED (with the error and traceback), Ctrl-C KILLED. While it runs, its driver writes a heartbeat
(`.heartbeat`, every `heartbeat_s`); a RUNNING record whose heartbeat is older than `lost_after_s`
belongs to a driver that was killed, and is shown as LOST until `mark_lost` records that. Every
update rewrites experiment.json atomically, so a reader sees the old record or the new one, never
half of one. A record that cannot be read (not a JSON object, cut short, wrong field types, a newer
format) is reported as a `BrokenRecord` with the reason instead of hiding or breaking the listing
of the others.
"""

from __future__ import annotations

import dataclasses
import getpass
import hashlib
import logging
import os
import threading
import time
import traceback as traceback_module
import weakref
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import Enum
from types import TracebackType
from typing import Any, Literal

from hopsml import config, execution_notes, layout, skeleton
from hopsml.clock import utc_now as _now
from hopsml.errors import ExperimentFailed, ExperimentNotFoundError, HopsmlError, ResourceNotFoundError, StorageError
from hopsml.fs import Storage
from hopsml.layout import ExperimentDir
from hopsml.records import BROKEN, BrokenRecordError, Shape
from hopsml.records import read_record as read_guarded
from hopsml.redact import public_conf
from hopsml.tracking import versioning
from hopsml.tracking.heartbeat import Heartbeat, age_text, iso, last_beat

log = logging.getLogger(__name__)
_claim_lock = threading.Lock()

FORMAT_VERSION = 1   # of experiment.json; records without the field are version 1
HEARTBEAT = ".heartbeat"   # in the experiment folder, rewritten by the driver while the run is RUNNING


class State(str, Enum):
    RUNNING = "RUNNING"
    FINISHED = "FINISHED"
    FAILED = "FAILED"
    KILLED = "KILLED"
    EARLY_STOPPED = "EARLY_STOPPED"
    LOST = "LOST"    # RUNNING, but its driver stopped beating (killed, host lost): it will never finish


class ExperimentType(str, Enum):
    EXPERIMENT = "EXPERIMENT"
    DISTRIBUTED_TRAINING = "DISTRIBUTED_TRAINING"
    PARALLEL_EXPERIMENTS = "PARALLEL_EXPERIMENTS"




@dataclass
class ExperimentRecord:
    """Everything experiment.json holds; `extra` carries what a particular verb adds."""

    id: str
    name: str
    app_id: str
    run_id: int
    type: str = ExperimentType.EXPERIMENT.value
    state: str = State.RUNNING.value
    description: str | None = None
    user: str = field(default_factory=lambda: config.value("user") or getpass.getuser())
    module: str | None = None
    function: str | None = None
    start: str = field(default_factory=_now)
    finished: str | None = None
    duration: float | None = None
    logdir: str | None = None
    executors: int = 1
    gpus_per_executor: int = 0
    metric_key: str | None = None
    metric: Any = None
    hyperparameters: dict[str, Any] = field(default_factory=dict)
    direction: str | None = None
    optimization_key: str | None = None
    results: Any = None
    program: str | None = None
    environment: str | None = None
    python_environment: dict[str, Any] | None = None  # fingerprint, and the archive shipped to the executors
    seed: int | None = None  # the run's seed; `seeds`: the generators rank 0 (or a trial) seeded from it
    seeds: dict[str, int] = field(default_factory=dict)
    resources: list[str] = field(default_factory=list)
    modules: list[dict[str, str]] = field(default_factory=list)  # the user's own modules shipped: path, sha256
    git: dict[str, Any] | None = None
    versions: dict[str, Any] = field(default_factory=dict)
    spark_conf: dict[str, str] = field(default_factory=dict)
    error: str | None = None
    traceback: str | None = None
    output_tail: str | None = None
    heartbeat_s: float | None = None
    rerun_of: str | None = None  # the experiment this one reran (hopsml experiments rerun)
    rerun_differences: list[str] | None = None  # what differed from that one's datasets and versions (--force)
    reproduced: dict[str, Any] | None = None  # a rerun's verdict: the recorded and the new metric, and if equal
    format_version: int = FORMAT_VERSION
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        for key in _ONLY_WHEN_SET:   # a rerun's fields: absent from the records of other runs
            if data[key] is None:
                del data[key]
        data.update(data.pop("extra"))
        return {"format_version": data.pop("format_version"), **data}

    @classmethod
    def from_dict(cls, data: object) -> ExperimentRecord:
        """The record in `data`, or BrokenRecordError saying what is wrong with it."""
        if not isinstance(data, dict):
            kind = "null" if data is None else _JSON_TYPES.get(type(data), type(data).__name__)
            raise BrokenRecordError(f"experiment.json holds a JSON {kind}, not an object")
        version = data.get("format_version", 1)
        if not isinstance(version, int) or isinstance(version, bool) or version < 1:
            raise BrokenRecordError(f"experiment.json has an invalid format_version {version!r}")
        if version > FORMAT_VERSION:
            raise BrokenRecordError(f"experiment.json has format_version {version}, newer than the {FORMAT_VERSION} "
                                    "this hopsml reads: upgrade hopsml to read it")
        missing = [name for name in _REQUIRED if name not in data]
        if missing:
            raise BrokenRecordError(f"experiment.json lacks {', '.join(map(repr, missing))}")
        for name, types in _FIELD_TYPES.items():
            value = data.get(name)
            if value is not None and (not isinstance(value, types) or isinstance(value, bool) and bool not in types):
                raise BrokenRecordError(f"experiment.json field {name!r} is a {type(value).__name__}: {value!r:.60}")
        names = {f.name for f in dataclasses.fields(cls)} - {"extra"}
        return cls(**{k: v for k, v in data.items() if k in names},
                   extra={k: v for k, v in data.items() if k not in names})


_ONLY_WHEN_SET = ("rerun_of", "rerun_differences", "reproduced")
_JSON_TYPES = {list: "list", str: "string", int: "number", float: "number", bool: "boolean"}
_REQUIRED = ("id", "name", "app_id", "run_id")
_FIELD_TYPES: dict[str, tuple[type, ...]] = {
    "id": (str,), "name": (str,), "app_id": (str,), "run_id": (int,), "type": (str,), "state": (str,),
    "user": (str,), "start": (str,), "finished": (str,), "duration": (int, float), "module": (str,),
    "function": (str,), "description": (str,), "hyperparameters": (dict,), "executors": (int,),
    "gpus_per_executor": (int,), "error": (str,), "traceback": (str,), "direction": (str,),
    "heartbeat_s": (int, float), "rerun_of": (str,), "rerun_differences": (list,), "reproduced": (dict,)}
_SHAPE = Shape("experiment.json")   # its fields are checked by ExperimentRecord.from_dict


@dataclass
class BrokenRecord:
    """An experiment folder whose record cannot be read, and why: what `experiments list` shows."""

    id: str
    reason: str
    state: str = BROKEN
    start: str = ""
    run_id: int = 0


def public_spark_conf(pairs: Iterable[tuple[str, str]]) -> dict[str, str]:
    """Spark settings worth recording: secrets (by name or by shape) left out, and credentials taken out of
    URIs (``s3a://key:secret@bucket/...``)."""
    return {k: str(v) for k, v in public_conf(dict(pairs)).items()}


def claim_run_dir(storage: Storage, project: str, app_id: str) -> ExperimentDir:
    """The next free `<app_id>_<run_id>` directory, created exclusively so ids never collide."""
    prefix = f"{app_id}_"
    with _claim_lock:
        taken = [layout.parse_experiment_id(p.rsplit("/", 1)[-1])[1]
                 for p in storage.ls(layout.experiments_dir(project))
                 if p.rsplit("/", 1)[-1].startswith(prefix) and p.rsplit("/", 1)[-1][len(prefix):].isdigit()]
        run_id = max(taken, default=0) + 1
        while True:
            exp = ExperimentDir.of(project, app_id, run_id)
            if storage.claim_dir(exp.path):
                return exp
            run_id += 1


class ExperimentRun:
    """One experiment as the driver sees it: claims its directory, versions what it ran with,
    and keeps experiment.json in step with what happens."""

    def __init__(self, storage: Storage, exp_dir: ExperimentDir, record: ExperimentRecord) -> None:
        self.storage = storage
        self.dir = exp_dir
        self.record = record
        self._t0 = time.monotonic()
        self._heartbeat: Heartbeat | None = None

    def _start_heartbeat(self, interval_s: float) -> None:
        """Beat until the run finishes, or until this object is dropped without finishing."""
        self._heartbeat = heartbeat = Heartbeat(self.storage, heartbeat_path(self.dir), interval_s)
        weakref.finalize(self, heartbeat.stop)
        self.record.heartbeat_s = interval_s

    @property
    def id(self) -> str:
        return self.record.id

    @property
    def logdir(self) -> str:
        return self.storage.uri(self.dir.path)

    @staticmethod
    def check_arguments(name: str, versioned_resources: Iterable[str] | None) -> list[str]:
        """The name checked and the resources' absolute paths: callers run this before Spark starts too."""
        layout.validate_name(name, "experiment name")
        resources = [os.path.abspath(os.path.expanduser(p)) for p in (versioned_resources or [])]
        missing = [p for p in resources if not os.path.exists(p)]
        if missing:
            raise ResourceNotFoundError(f"versioned resource(s) not found: {', '.join(missing)}; "
                                        "pass paths of existing local files or folders")
        return resources

    @classmethod
    def start(cls, storage: Storage, project: str, app_id: str, *, name: str, fn: object = None,
              versioned_resources: Iterable[str] | None = None, spark_conf: dict[str, str] | None = None,
              spark_version: str | None = None, heartbeat_s: float | None = None,
              modules: Mapping[str, bytes] | None = None, **fields: Any) -> ExperimentRun:
        """Claim the directory, start the heartbeat, write the RUNNING record, and version program,
        resources, the user's own modules that go with the run, and the environment."""
        resources = cls.check_arguments(name, versioned_resources)
        skeleton.ensure(storage, project)
        exp_dir = claim_run_dir(storage, project, app_id)
        record = ExperimentRecord(id=exp_dir.id, name=name, app_id=app_id,
                                  run_id=layout.parse_experiment_id(exp_dir.id)[1],
                                  module=getattr(fn, "__module__", None),
                                  function=getattr(fn, "__qualname__", None),
                                  logdir=storage.uri(exp_dir.path),
                                  spark_conf=public_spark_conf((spark_conf or {}).items()),
                                  versions=versioning.stack_versions(spark_version), **fields)
        run = cls(storage, exp_dir, record)
        run._start_heartbeat(heartbeat_s if heartbeat_s is not None else config.value("heartbeat_s"))
        try:
            run.save()
            execution_notes.note("experiment", id=exp_dir.id, name=name)
            run._version(resources, fn, modules or {})
            run.save()
        except BaseException:
            if run._heartbeat is not None:
                run._heartbeat.stop()  # the record says RUNNING: let it turn LOST rather than look alive
            raise
        return run

    def _version(self, resources: list[str], fn: object, modules: Mapping[str, bytes]) -> None:
        program = versioning.find_program(fn)
        if program:
            suffix = ".ipynb" if program.endswith(".ipynb") else ".py"
            self.storage.upload(program, self.dir.program(suffix))
            self.record.program = program
        elif (history := versioning.kernel_notebook()) is not None:  # a kernel whose notebook file is unknown
            self.storage.write_text(self.dir.program(".ipynb"), history)
            self.record.program = versioning.KERNEL_HISTORY
        for path in resources:
            name = os.path.basename(path.rstrip(os.sep))
            self.storage.upload(path, self.dir.resource(name))
            self.record.resources.append(name)
        for rel, data in sorted(modules.items()):
            rel = rel.replace(os.sep, "/")
            self.storage.write_bytes(self.dir.module(rel), data)
            self.record.modules.append({"path": rel, "sha256": hashlib.sha256(data).hexdigest()})
        self.storage.write_text(self.dir.environment, versioning.environment_yaml())
        self.record.environment = layout.ENVIRONMENT
        self.record.git = versioning.git_info(program)

    def save(self) -> None:
        self.storage.write_json(self.dir.record, self.record.to_dict())

    def finish(self, state: State = State.FINISHED, **fields: object) -> None:
        for key, value in fields.items():
            if hasattr(self.record, key) and key != "extra":
                setattr(self.record, key, value)
            else:
                self.record.extra[key] = value
        self.record.state = state.value
        self.record.finished = _now()
        self.record.duration = round(time.monotonic() - self._t0, 3)
        if self._heartbeat is not None:
            self._heartbeat.stop()
        self.save()
        if self._heartbeat is not None:
            self._heartbeat.stop(remove=True)

    def __enter__(self) -> ExperimentRun:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> Literal[False]:
        if self.record.state != State.RUNNING.value:
            return False  # already finished by the caller
        if exc is None:
            self.finish(State.FINISHED)
        elif isinstance(exc, KeyboardInterrupt):
            self.finish(State.KILLED, error="interrupted by the user (KeyboardInterrupt)")
        elif isinstance(exc, ExperimentFailed):
            self.finish(State.FAILED, error=str(exc).split("\n", 1)[0], traceback=exc.traceback,
                        output_tail=exc.output_tail)
        else:
            self.finish(State.FAILED, error=f"{type(exc).__name__}: {exc}",
                        traceback="".join(traceback_module.format_exception(exc_type, exc, tb)))
        return False


def _load(storage: Storage, record_path: str) -> ExperimentRecord:
    """The record at `record_path`, or BrokenRecordError with the reason it cannot be read (through the one
    guarded reader: size and depth capped, so one bad record cannot take a listing down)."""
    try:
        data = read_guarded(storage, record_path, _SHAPE)
    except StorageError as exc:
        raise BrokenRecordError(f"experiment.json cannot be read: {exc}") from exc
    return ExperimentRecord.from_dict(data)


def read_record(storage: Storage, project: str, exp_id: str) -> ExperimentRecord:
    """The record of one experiment; ExperimentNotFoundError or BrokenRecordError saying what is wrong."""
    exp_dir = ExperimentDir.from_id(project, exp_id)
    if not storage.exists(exp_dir.record):
        if storage.isdir(exp_dir.path):
            reason = _missing_reason(storage, exp_dir.path)
            raise BrokenRecordError(f"experiment {exp_id} is {BROKEN}: {reason}; its folder is "
                                    f"{storage.uri(exp_dir.path)}", reason=reason)
        raise ExperimentNotFoundError(f"no experiment {exp_id!r} in project {project!r} under "
                                      f"{storage.uri()}; 'hopsml experiments list' shows the ids")
    try:
        return _load(storage, exp_dir.record)
    except BrokenRecordError as exc:
        raise BrokenRecordError(f"experiment {exp_id} is {BROKEN}: {exc.reason}. The record is "
                                f"{storage.uri(exp_dir.record)}: repair it by hand, or remove the folder "
                                f"{storage.uri(exp_dir.path)} if the run is of no use", reason=exc.reason) from None


_NO_RECORD = "no experiment.json (the run was claimed but never recorded)"


def _missing_reason(storage: Storage, exp_path: str) -> str:
    """Why a run folder has no record, naming a version a replacement left aside (a write cut off
    between its renames on HDFS, or one whose last step failed)."""
    left = [p for p in storage.ls(exp_path)
            if p.rsplit("/", 1)[-1].startswith((f".{layout.RECORD}.old-", f".{layout.RECORD}.tmp-"))]
    if not left:
        return _NO_RECORD
    return (f"no experiment.json, but a write of it was cut off: rename {storage.uri(sorted(left)[-1])} "
            f"to {layout.RECORD}" + (f" (or one of the {len(left)} versions left there)" if len(left) > 1 else ""))


def scan_records(storage: Storage, project: str) -> list[ExperimentRecord | BrokenRecord]:
    """Every experiment folder of a project, newest first: its record, or why it cannot be read
    (broken ones last)."""
    found: list[ExperimentRecord | BrokenRecord] = []
    for path in storage.ls(layout.experiments_dir(project)):
        name = path.rsplit("/", 1)[-1]
        if name.startswith(".") or not storage.isdir(path):
            continue
        record_path = layout.join(path, layout.RECORD)
        if not storage.exists(record_path):
            found.append(BrokenRecord(name, _missing_reason(storage, path)))
            continue
        try:
            found.append(_load(storage, record_path))
        except BrokenRecordError as exc:
            found.append(BrokenRecord(name, exc.reason))
    return sorted(found, key=lambda r: (r.start or "", r.run_id if isinstance(r.run_id, int) else 0),
                  reverse=True)


def list_records(storage: Storage, project: str) -> list[ExperimentRecord]:
    """Every readable experiment of a project, newest first (see scan_records for the broken ones)."""
    return [r for r in scan_records(storage, project) if isinstance(r, ExperimentRecord)]


def heartbeat_path(exp_dir: ExperimentDir) -> str:
    return layout.join(exp_dir.path, HEARTBEAT)


def _start_epoch(rec: ExperimentRecord) -> float | None:
    try:
        return datetime.fromisoformat(rec.start).timestamp()
    except (TypeError, ValueError):
        return None


def lost_reason(storage: Storage, project: str, rec: ExperimentRecord, lost_after_s: float,
                now: float | None = None) -> str | None:
    """Why a RUNNING record is LOST (its driver's heartbeat stopped), or None while it is alive,
    or when it is not RUNNING. The bound is at least three of the run's own heartbeat intervals."""
    if rec.state != State.RUNNING.value:
        return None
    now = time.time() if now is None else now
    bound = max(lost_after_s, 3 * (rec.heartbeat_s or 0))
    last = last_beat(storage, heartbeat_path(ExperimentDir.from_id(project, rec.id)))
    if last is None:
        started = _start_epoch(rec)
        if started is None or now - started <= bound:
            return None
        return f"RUNNING for {age_text(now - started)} without a heartbeat: its driver is gone"
    if now - last <= bound:
        return None
    return (f"its driver stopped: last heartbeat {age_text(now - last)} ago ({iso(last)}), more than "
            f"lost_after_s={bound:g}")


def shown_state(storage: Storage, project: str, rec: ExperimentRecord, lost_after_s: float,
                now: float | None = None) -> tuple[str, str | None]:
    """The state to show and, for LOST, why: a RUNNING record whose heartbeat stopped shows as LOST."""
    reason = lost_reason(storage, project, rec, lost_after_s, now)
    if reason is not None:
        return State.LOST.value, reason
    if rec.state == State.LOST.value:
        return rec.state, rec.error
    return rec.state, None


def mark_lost(storage: Storage, project: str, exp_id: str, lost_after_s: float, *, force: bool = False
              ) -> ExperimentRecord:
    """Record a RUNNING experiment whose heartbeat stopped as LOST; `force` also one that still beats."""
    rec = read_record(storage, project, exp_id)
    if rec.state != State.RUNNING.value:
        raise HopsmlError(f"experiment {exp_id} is {rec.state}, not RUNNING: there is nothing to mark")
    reason = lost_reason(storage, project, rec, lost_after_s)
    last = last_beat(storage, heartbeat_path(ExperimentDir.from_id(project, exp_id)))
    if reason is None:
        if not force:
            age = f"its last heartbeat is {age_text(time.time() - last)} old" if last else "it started recently"
            raise HopsmlError(f"experiment {exp_id} looks alive ({age}, lost_after_s={lost_after_s:g}); wait, "
                              "or pass --force if you know its driver is gone")
        reason = "marked LOST by hand while its heartbeat was still recent"
    rec.state = State.LOST.value
    rec.error = reason
    end = last if last is not None else time.time()
    rec.finished = iso(end)
    started = _start_epoch(rec)
    rec.duration = round(end - started, 3) if started is not None else None
    storage.write_json(ExperimentDir.from_id(project, exp_id).record, rec.to_dict())
    return rec


def lost_ids(storage: Storage, project: str, lost_after_s: float) -> list[str]:
    """Ids of the experiments that are LOST: recorded so, or RUNNING with a stopped heartbeat."""
    return [rec.id for rec in list_records(storage, project)
            if shown_state(storage, project, rec, lost_after_s)[0] == State.LOST.value]


def remove_lost(storage: Storage, project: str, exp_id: str, lost_after_s: float) -> None:
    """Delete the folder of a LOST experiment; any other state is refused with what it is."""
    rec = read_record(storage, project, exp_id)
    state, _ = shown_state(storage, project, rec, lost_after_s)
    if state != State.LOST.value:
        raise HopsmlError(f"experiment {exp_id} is {state}, not LOST: only LOST runs are cleaned; remove "
                          f"{storage.uri(ExperimentDir.from_id(project, exp_id).path)} by hand if it is of no use")
    storage.delete(ExperimentDir.from_id(project, exp_id).path)
