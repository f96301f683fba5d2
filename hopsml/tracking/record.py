"""The experiment record (experiment.json) and the driver-side run that keeps it true.

An `ExperimentRun` is a context manager: leaving the block marks the record FINISHED, an exception
FAILED (with the error and traceback), Ctrl-C KILLED. Every update rewrites experiment.json
atomically, so a reader sees the old record or the new one, never half of one.
"""

from __future__ import annotations

import dataclasses
import getpass
import logging
import os
import threading
import time
import traceback as traceback_module
from dataclasses import dataclass, field
from datetime import datetime, timezone
from enum import Enum
from typing import Any, Iterable

from hopsml import layout
from hopsml.errors import ExperimentFailed, ExperimentNotFoundError, ResourceNotFoundError, StorageError
from hopsml.fs import Storage
from hopsml.layout import ExperimentDir
from hopsml.tracking import versioning

log = logging.getLogger(__name__)
_claim_lock = threading.Lock()


class State(str, Enum):
    RUNNING = "RUNNING"
    FINISHED = "FINISHED"
    FAILED = "FAILED"
    KILLED = "KILLED"
    EARLY_STOPPED = "EARLY_STOPPED"


class ExperimentType(str, Enum):
    EXPERIMENT = "EXPERIMENT"
    DISTRIBUTED_TRAINING = "DISTRIBUTED_TRAINING"
    PARALLEL_EXPERIMENTS = "PARALLEL_EXPERIMENTS"


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


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
    user: str = field(default_factory=lambda: os.environ.get("HOPSML_USER") or getpass.getuser())
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
    resources: list[str] = field(default_factory=list)
    git: dict[str, Any] | None = None
    versions: dict[str, Any] = field(default_factory=dict)
    spark_conf: dict[str, str] = field(default_factory=dict)
    error: str | None = None
    traceback: str | None = None
    output_tail: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data.update(data.pop("extra"))
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "ExperimentRecord":
        names = {f.name for f in dataclasses.fields(cls)} - {"extra"}
        return cls(**{k: v for k, v in data.items() if k in names},
                   extra={k: v for k, v in data.items() if k not in names})


_SECRET_WORDS = ("secret", "password", "token", "credential", "key")


def public_spark_conf(pairs: Iterable[tuple[str, str]]) -> dict[str, str]:
    """Spark settings worth recording, with anything that looks like a secret left out."""
    return {k: v for k, v in sorted(pairs) if not any(word in k.lower() for word in _SECRET_WORDS)}


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

    @property
    def id(self) -> str:
        return self.record.id

    @property
    def logdir(self) -> str:
        return self.storage.uri(self.dir.path)

    @classmethod
    def start(cls, storage: Storage, project: str, app_id: str, *, name: str, fn: Any = None,
              versioned_resources: Iterable[str] | None = None, spark_conf: dict[str, str] | None = None,
              spark_version: str | None = None, **fields: Any) -> "ExperimentRun":
        """Claim the directory, write the RUNNING record, and version program, resources, environment."""
        layout.validate_name(name, "experiment name")
        resources = [os.path.abspath(os.path.expanduser(p)) for p in (versioned_resources or [])]
        missing = [p for p in resources if not os.path.exists(p)]
        if missing:
            raise ResourceNotFoundError(f"versioned resource(s) not found: {', '.join(missing)}; "
                                        "pass paths of existing local files or folders")
        exp_dir = claim_run_dir(storage, project, app_id)
        record = ExperimentRecord(id=exp_dir.id, name=name, app_id=app_id,
                                  run_id=layout.parse_experiment_id(exp_dir.id)[1],
                                  module=getattr(fn, "__module__", None),
                                  function=getattr(fn, "__qualname__", None),
                                  logdir=storage.uri(exp_dir.path),
                                  spark_conf=public_spark_conf((spark_conf or {}).items()),
                                  versions=versioning.stack_versions(spark_version), **fields)
        run = cls(storage, exp_dir, record)
        run.save()
        run._version(resources, fn)
        run.save()
        return run

    def _version(self, resources: list[str], fn: Any) -> None:
        program = versioning.find_program(fn)
        if program:
            suffix = ".ipynb" if program.endswith(".ipynb") else ".py"
            self.storage.upload(program, self.dir.program(suffix))
            self.record.program = program
        for path in resources:
            name = os.path.basename(path.rstrip(os.sep))
            self.storage.upload(path, self.dir.resource(name))
            self.record.resources.append(name)
        self.storage.write_text(self.dir.environment, versioning.environment_yaml())
        self.record.environment = layout.ENVIRONMENT
        self.record.git = versioning.git_info(program)

    def save(self) -> None:
        self.storage.write_json(self.dir.record, self.record.to_dict())

    def finish(self, state: State = State.FINISHED, **fields: Any) -> None:
        for key, value in fields.items():
            if hasattr(self.record, key) and key != "extra":
                setattr(self.record, key, value)
            else:
                self.record.extra[key] = value
        self.record.state = state.value
        self.record.finished = _now()
        self.record.duration = round(time.monotonic() - self._t0, 3)
        self.save()

    def __enter__(self) -> "ExperimentRun":
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
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


def read_record(storage: Storage, project: str, exp_id: str) -> ExperimentRecord:
    exp_dir = ExperimentDir.from_id(project, exp_id)
    if not storage.exists(exp_dir.record):
        raise ExperimentNotFoundError(f"no experiment {exp_id!r} in project {project!r} under "
                                      f"{storage.uri()}; 'hopsml experiments list' shows the ids")
    return ExperimentRecord.from_dict(storage.read_json(exp_dir.record))


def list_records(storage: Storage, project: str) -> list[ExperimentRecord]:
    """Every readable experiment of a project, newest first."""
    records = []
    for path in storage.ls(layout.experiments_dir(project)):
        record_path = layout.join(path, layout.RECORD)
        try:
            records.append(ExperimentRecord.from_dict(storage.read_json(record_path)))
        except (StorageError, ValueError, TypeError):
            continue  # a directory still being claimed, or not an experiment
    return sorted(records, key=lambda r: (r.start, r.run_id), reverse=True)
