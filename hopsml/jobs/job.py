"""Named jobs: create, find and run them (hopsworks' `project.get_job_api()` and Job names).

    from hopsml import jobs
    job = jobs.create_job("nightly", "pipelines/nightly.py", args="--days 7",
                          spark_conf={"spark.executor.memory": "2g"})
    execution = job.run()                    # waits; job.run(await_termination=False) returns at once
    execution.success, execution.exit_code, execution.produced
    out, err = execution.download_logs()

A job is kept in the project (`Jobs/<name>/job.json`), each run in `Jobs/<name>/executions/<id>/`.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import os
from collections.abc import Mapping, Sequence
from typing import Any, Generic, TypeVar, overload

from hopsml import config, layout
from hopsml.errors import InvalidNameError, JobError, StorageError
from hopsml.fs import Storage
from hopsml.jobs import launch
from hopsml.jobs.definition import PYSPARK, JobDefinition, job_kind, parse_args, parse_spark_conf, resolve_app
from hopsml.jobs.execution import LIVE, Execution
from hopsml.records import BrokenRecordError, Shape, read_record
from hopsml.redact import HIDDEN, is_secret, redact_value

T = TypeVar("T")


class _FromDefinition(property, Generic[T]):
    """A Job attribute that is a field of its definition, read each time (`save` rewrites some of them); a list or
    a dict comes as a copy, so a caller's change does not reach job.json. A property, so the reference lists it."""

    def __init__(self, field: str, doc: str | None = None) -> None:
        def read(job: Job) -> object:
            return copy.copy(getattr(job.definition, field))

        read.__doc__ = doc
        super().__init__(read, doc=doc)

    @overload
    def __get__(self, job: None, owner: type, /) -> _FromDefinition[T]: ...

    @overload
    def __get__(self, job: object, owner: type | None = None, /) -> T: ...

    def __get__(self, job: object, owner: type | None = None, /) -> T | _FromDefinition[T]:
        value: T | _FromDefinition[T] = super().__get__(job, owner)
        return value


class Job:
    """One named job of a project (hopsworks' Job)."""

    def __init__(self, definition: JobDefinition, settings: config.Settings) -> None:
        self.definition = definition
        self.settings = settings
        self.storage = Storage(settings.root)
        self.dir = layout.JobDir.of(settings.project, definition.name)

    def __repr__(self) -> str:
        return f"Job({self.name!r}, {self.job_type!r})"

    # The definition's fields under hopsworks' names, read through (lists and dicts as copies).
    name: _FromDefinition[str] = _FromDefinition("name")
    app_path: _FromDefinition[str] = _FromDefinition("app_path")
    kind: _FromDefinition[str] = _FromDefinition("kind", "'python' (a script) or 'notebook'.")
    job_type: _FromDefinition[str] = _FromDefinition(
        "job_type", "PYSPARK (under spark-submit) or PYTHON (no JVM), as hopsworks names job types.")
    default_args: _FromDefinition[list[str]] = _FromDefinition("default_args")
    spark_conf: _FromDefinition[dict[str, str]] = _FromDefinition(
        "spark_conf", "The job's Spark settings as they may be shown: the secret ones (hopsml.redact's rule) "
        "redacted; their values are read from secrets.json only to run the job.")
    description: _FromDefinition[str] = _FromDefinition("description")
    created: _FromDefinition[str] = _FromDefinition("created")
    creation_time: _FromDefinition[str] = _FromDefinition("created", "When the job was created (hopsworks' name).")
    creator: _FromDefinition[str] = _FromDefinition("creator")

    @property
    def config(self) -> dict[str, Any]:
        """The job's configuration as hopsworks writes it: appPath, defaultArgs, jobType and the Spark settings."""
        return {**self.definition.config, "jobType": self.job_type, "appPath": self.app_path,
                "defaultArgs": " ".join(_quoted(self.default_args)), **self.spark_conf}

    # --- running --------------------------------------------------------------------------------------------
    def run(self, args: str | Sequence[str] | None = None, await_termination: bool = True,
            timeout: float | None = None, *, exclusive: bool = False) -> Execution:
        """Run the job once: a new execution with `args` (a list, or a string split as a shell would; None: the
        job's default arguments). With `await_termination` this process waits for the end and returns the ended
        execution (see `success`; a failed run is returned, not raised), and if this process ends first the run is
        stopped and recorded LOST; `timeout` seconds without an end stop it (KILLED) and raise JobError. Without,
        it returns the RUNNING execution at once, and the run goes on by itself. `exclusive` refuses to start
        while another execution of the job is running (by default runs may overlap, as on hopsworks)."""
        words = parse_args(args)
        execution = launch.start(self._with_secrets(), self.default_args if words is None else words, self.settings,
                                 owned=await_termination, exclusive=exclusive)
        if not await_termination:
            return execution
        try:
            return execution.await_termination(timeout)
        except JobError:
            execution.stop()
            raise JobError(f"execution {execution.id} of job {self.name!r} did not end within {timeout:g} s and "
                           f"was stopped ({execution.state})", job=self.name, execution=execution.id,
                           log_tail=execution.log_tail()) from None
        except BaseException:   # KeyboardInterrupt: the awaited run ends with its caller
            execution.stop()
            raise

    def get_executions(self) -> list[Execution]:
        """Every execution of the job, newest first."""
        found = []
        for number in sorted(self._ids(), reverse=True):
            try:
                found.append(self.get_execution(number))
            except JobError:
                continue   # claimed moments ago, its record not yet written
        return found

    def scan_executions(self) -> list[tuple[int, Execution | BrokenRecordError]]:
        """Every execution newest first, or why its record cannot be read: listings show it as BROKEN (one claimed
        moments ago, its record not yet written, is left out)."""
        found: list[tuple[int, Execution | BrokenRecordError]] = []
        for number in sorted(self._ids(), reverse=True):
            try:
                found.append((number, self.get_execution(number)))
            except JobError as exc:
                if self.storage.exists(self.dir.execution(number).record):
                    found.append((number, BrokenRecordError(str(exc), reason=exc.reason)))
        return found

    def get_execution(self, execution_id: int) -> Execution:
        """Execution `execution_id` (1, 2, 3, ... per job); JobError naming it when the job has none such."""
        number = layout.validate_execution_id(execution_id)
        return Execution.load(self.storage, self.settings.project, self.name, number, self.settings.lost_after_s)

    def get_last_execution(self) -> Execution | None:
        """The newest execution, None before the first run."""
        executions = self.get_executions()
        return executions[0] if executions else None

    def get_state(self) -> str:
        """The state of the newest execution (INITIALIZING, RUNNING, FINISHED, FAILED, KILLED, LOST)."""
        return self._last().state

    def get_final_state(self) -> str:
        """The final status of the newest execution: UNDEFINED while it runs, then SUCCEEDED, FAILED or KILLED."""
        return self._last().final_status

    def _last(self) -> Execution:
        last = self.get_last_execution()
        if last is None:
            raise JobError(f"job {self.name!r} has no executions yet: run it with job.run() or "
                           f"'hopsml jobs run {self.name}'", job=self.name)
        return last

    def _ids(self) -> list[int]:
        return [int(rel.rsplit("/", 1)[-1]) for rel in self.storage.ls(self.dir.executions)
                if rel.rsplit("/", 1)[-1].isdigit() and int(rel.rsplit("/", 1)[-1]) > 0]

    # --- keeping it ---------------------------------------------------------------------------------------
    def save(self, secrets: Mapping[str, str] | None = None) -> Job:
        """job.json, with the secret Spark settings (hopsml.redact's rule: by name, by shape, inside Java options
        and environment settings) shown redacted and their values kept in secrets.json beside it, mode 0600: job.json
        is read by whoever reads the project. `secrets`: the values of settings the definition shows redacted
        already (kept from secrets.json when a job is replaced)."""
        if secrets is None and self._secret_keys():   # a job read back: its secrets are in secrets.json
            secrets = self._secrets()
        conf = {**self.definition.spark_conf, **(secrets or {})}
        secret = {k: v for k, v in conf.items() if is_secret(k, v)}
        self.definition.spark_conf = {k: str(redact_value(k, v)) if k in secret else v for k, v in conf.items()}
        self.definition.secret_keys = sorted(secret)
        record = self.definition.to_dict()
        if secret:
            local = self.storage.local_path(self.dir.secrets)
            if local is None:
                raise JobError(f"job {self.name!r}: secret Spark settings ({', '.join(sorted(secret))}) are kept "
                               "only under a local root; under an HDFS or S3 root give them in the spark_conf setting "
                               "(HOPSML_SPARK_CONF or conf/hopsml.toml) of the host that runs the job", job=self.name)
            self.storage.makedirs(self.dir.path)
            fd = os.open(local + ".tmp", os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
            with os.fdopen(fd, "w", encoding="utf-8") as out:
                json.dump(secret, out)
            os.chmod(local + ".tmp", 0o600)
            os.replace(local + ".tmp", local)
        elif self.storage.exists(self.dir.secrets):
            self.storage.delete(self.dir.secrets)
        self.storage.write_json(self.dir.record, record)
        return self

    def _secret_keys(self) -> list[str]:
        """The settings whose values are in secrets.json (a job.json written before secret_keys: those shown ***)."""
        if self.definition.secret_keys:
            return list(self.definition.secret_keys)
        if not self.storage.exists(self.dir.secrets):
            return []
        return [k for k, v in self.definition.spark_conf.items() if v == HIDDEN]

    def _secrets(self) -> dict[str, str]:
        """The values of the job's secret settings, from secrets.json (0600, beside job.json)."""
        keys = self._secret_keys()
        if not keys:
            return {}
        local = self.storage.local_path(self.dir.secrets)
        try:
            with open(local or "", encoding="utf-8") as given:
                values = json.load(given)
        except (OSError, ValueError) as exc:
            raise JobError(f"job {self.name!r}: its secret Spark settings cannot be read from "
                           f"{self.storage.uri(self.dir.secrets)} ({exc}); recreate the job with them",
                           job=self.name) from None
        if not isinstance(values, dict) or set(keys) - set(values):
            raise JobError(f"job {self.name!r}: {self.storage.uri(self.dir.secrets)} lacks the values of "
                           f"{', '.join(sorted(set(keys) - set(values if isinstance(values, dict) else {})))}; "
                           "recreate the job with them", job=self.name)
        return {k: str(values[k]) for k in keys}

    def _with_secrets(self) -> JobDefinition:
        """The definition to run: its secret settings with their values."""
        return dataclasses.replace(self.definition, spark_conf={**self.definition.spark_conf, **self._secrets()})

    def delete(self) -> None:
        """Delete the job and its executions' records and logs; refused while one of them runs."""
        running = [e for e in self.get_executions() if e.state in LIVE]
        if running:
            raise JobError(f"job {self.name!r} has a running execution ({running[0].id}): stop it first with "
                           f"'hopsml jobs stop {self.name} {running[0].id}'", job=self.name, execution=running[0].id)
        self.storage.delete(self.dir.path)


def _quoted(words: Sequence[str]) -> list[str]:
    import shlex

    return [shlex.quote(word) for word in words]


def _settings(settings: config.Settings | None) -> config.Settings:
    return settings if settings is not None else config.load()


def create_job(name: str, app_path: str, args: str | Sequence[str] | None = None,
               spark_conf: Mapping[str, Any] | Sequence[str] | None = None, description: str = "",
               overwrite: bool = False, settings: config.Settings | None = None, *, job_type: str = PYSPARK,
               extra_config: Mapping[str, Any] | None = None) -> Job:
    """Create the job `name` that runs `app_path` (a .py script under spark-submit, or an .ipynb notebook in a
    fresh kernel) with default arguments `args` and Spark settings `spark_conf`. An existing job is an error
    unless `overwrite` (its definition is replaced, its executions stay). `job_type` PYTHON runs a script by
    this Python alone, no JVM; `extra_config` keeps further hopsworks settings with the job, unused."""
    settings = _settings(settings)
    storage = Storage(settings.root)
    layout.validate_name(name, "job name")
    jdir = layout.JobDir.of(settings.project, name)
    if not overwrite and storage.exists(jdir.record):
        raise JobError(f"job {name!r} already exists in project {settings.project!r}: pass overwrite=True "
                       f"(--overwrite) to replace its definition, or choose another name", job=name)
    path, in_project = resolve_app(storage, settings.project, app_path)
    definition = JobDefinition(name=name, app_path=path, kind=job_kind(path), job_type=str(job_type).upper(),
                               app_in_project=in_project, default_args=parse_args(args, "args") or [],
                               spark_conf=parse_spark_conf(spark_conf), description=description or "",
                               config=dict(extra_config or {}))
    kept: dict[str, str] = {}
    if overwrite and storage.exists(jdir.record):
        before = Job(_read_definition(storage, jdir), settings)
        definition.created = before.created
        # a value given as the job showed it (job.config read, changed and given back, as on hopsworks) keeps the
        # secret it stands for
        unchanged = [k for k in before._secret_keys() if definition.spark_conf.get(k) == before.spark_conf[k]]
        if unchanged:
            kept = {k: v for k, v in before._secrets().items() if k in unchanged}
    return Job(definition, settings).save(kept)


def get_job(name: str, settings: config.Settings | None = None) -> Job:
    """The job `name`; JobError naming it (and the jobs there are) when the project has none such."""
    settings = _settings(settings)
    storage = Storage(settings.root)
    jdir = layout.JobDir.of(settings.project, name)
    if not storage.exists(jdir.record):
        known = ", ".join(job.name for job in get_jobs(settings)) or "none"
        raise JobError(f"no job {name!r} in project {settings.project!r} (its jobs: {known}); create it with "
                       f"'hopsml jobs create {name} APP.py' or jobs.create_job", job=name)
    return Job(_read_definition(storage, jdir), settings)


def get_jobs(settings: config.Settings | None = None) -> list[Job]:
    """Every job of the project, by name."""
    settings = _settings(settings)
    storage = Storage(settings.root)
    found = []
    for rel in storage.ls(layout.jobs_dir(settings.project)):
        try:
            jdir = layout.JobDir.of(settings.project, rel.rsplit("/", 1)[-1])
        except InvalidNameError:
            continue
        if storage.exists(jdir.record):
            found.append(Job(_read_definition(storage, jdir), settings))
    return sorted(found, key=lambda job: job.name)   # scan_jobs: the ones that cannot be read, too


def job_exists(name: str, settings: config.Settings | None = None) -> bool:
    """Whether the project has a job named `name`."""
    settings = _settings(settings)
    return Storage(settings.root).exists(layout.JobDir.of(settings.project, name).record)


JOB_SHAPE = Shape("job.json", required=("name", "app_path", "kind"),
                  types={"name": (str,), "app_path": (str,), "kind": (str,), "default_args": (list,),
                         "spark_conf": (dict,), "config": (dict,),
                         "secret_keys": (list,)})


def scan_jobs(settings: config.Settings | None = None) -> list[tuple[str, Job | BrokenRecordError]]:
    """Every job by name, or why its job.json cannot be read: listings show it as BROKEN and go on."""
    settings = _settings(settings)
    storage = Storage(settings.root)
    found: list[tuple[str, Job | BrokenRecordError]] = []
    for rel in storage.ls(layout.jobs_dir(settings.project)):
        try:
            jdir = layout.JobDir.of(settings.project, rel.rsplit("/", 1)[-1])
        except InvalidNameError:
            continue
        if storage.exists(jdir.record):
            try:
                found.append((jdir.name, Job(_read_definition(storage, jdir), settings)))
            except JobError as exc:
                found.append((jdir.name, BrokenRecordError(str(exc), reason=exc.reason)))
            except InvalidNameError as exc:   # a record written by hand or another tool: listed, not fatal
                found.append((jdir.name, BrokenRecordError(str(exc), reason=f"its name is refused: {exc}")))
    return sorted(found, key=lambda pair: pair[0])


def _read_definition(storage: Storage, jdir: layout.JobDir) -> JobDefinition:
    try:
        data = read_record(storage, jdir.record, JOB_SHAPE)
    except BrokenRecordError as exc:
        raise JobError(f"job {jdir.name!r} cannot be read: {exc}", job=jdir.name, reason=exc.reason) from None
    except StorageError as exc:
        raise JobError(f"cannot read job {jdir.name!r} ({storage.uri(jdir.record)}): {exc}", job=jdir.name) from None
    return JobDefinition.from_dict(data, storage.uri(jdir.record))
