"""What the web view shows of named jobs: the project's jobs with their newest execution, and a page per job with
its definition and executions (state, exit code, times, what each produced, its log's last lines)."""

from __future__ import annotations

import dataclasses
import shlex
from typing import Any

from hopsml import config
from hopsml.errors import HopsmlError, JobError
from hopsml.jobs import Job, get_job
from hopsml.jobs.execution import Execution, describe_produced
from hopsml.jobs.job import scan_jobs
from hopsml.records import BROKEN, BrokenRecordError
from hopsml.redact import redact_conf, redact_words

LOG_LINES = 200   # of a log, on its own page
PAGE_TAIL_LINES = 40   # of the newest execution's logs, on the job's page


def _settings(settings: config.Settings, project: str) -> config.Settings:
    return dataclasses.replace(settings, project=project)


def _time(stamp: str | None) -> str | None:
    return stamp[:19].replace("T", " ") if stamp else None


def job_rows(settings: config.Settings, project: str) -> list[dict[str, Any]]:
    """Every job of the project with its newest execution."""
    rows = []
    for name, job in scan_jobs(_settings(settings, project)):
        if not isinstance(job, Job):
            rows.append({"name": name, "state": BROKEN, "description": job.reason, "broken": True})
            continue
        scanned = job.scan_executions()
        number, last = scanned[0] if scanned else (None, None)
        rows.append({"name": job.name, "kind": job.kind, "type": job.job_type, "app": job.app_path,
                     "description": job.description, "executions": len(scanned), "last_id": number,
                     "state": BROKEN if isinstance(last, BrokenRecordError) else last.state if last else None,
                     "start": _time(last.start) if isinstance(last, Execution) else None})
    return rows


def produced_links(project: str, entry: dict[str, Any]) -> dict[str, Any]:
    """One produced object: its text, and the endpoint and arguments of its page in this view (None: no page)."""
    kind, name = entry.get("kind"), entry.get("name")
    page: tuple[str, dict[str, Any]] | None = None
    if kind == "experiment" and entry.get("id"):
        page = ("run", {"project": project, "exp_id": str(entry["id"])})
    elif kind == "dataset" and name:
        page = ("dataset", {"project": project, "name": str(name)})
    elif kind == "model":
        page = ("models", {"project": project})
    elif kind == "serving" and name:
        page = ("serving", {"project": project, "name": str(name)})
    elif kind == "featuregroup" and name and isinstance(entry.get("version"), int):
        page = ("feature_group", {"project": project, "name": str(name), "version": entry["version"]})
    return {"text": describe_produced(entry), "endpoint": page[0] if page else None, "args": page[1] if page else {}}


def execution_row(project: str, execution: Execution) -> dict[str, Any]:
    return {"id": execution.id, "state": execution.state, "final_status": execution.final_status,
            "exit_code": execution.exit_code, "start": _time(execution.start), "end": _time(execution.end),
            "duration_s": execution.duration_s, "args": shlex.join(redact_words(execution.args)),
            "error": execution.error,
            "user": execution.user, "produced": [produced_links(project, p) for p in execution.produced]}


def job_view(settings: config.Settings, project: str, name: str) -> dict[str, Any]:
    """The job's page: its definition, its executions (newest first), the newest one's last log lines."""
    from hopsml.ui.views import NotFound

    try:
        job = get_job(name, _settings(settings, project))
    except (JobError, HopsmlError) as exc:
        raise NotFound(str(exc)) from None
    scanned = job.scan_executions()
    newest = scanned[0][1] if scanned else None
    # job.spark_conf is redacted already (Job.save); redact_conf again in case a job.json was written by hand
    return {"name": job.name, "app": job.app_path, "kind": job.kind, "type": job.job_type,
            "args": " ".join(redact_words(job.default_args)), "spark_conf": sorted(redact_conf(job.spark_conf).items()),
            "description": job.description, "created": _time(job.created), "creator": job.creator,
            "executions": [execution_row(project, e) if isinstance(e, Execution) else
                           {"id": number, "state": BROKEN, "error": e.reason, "broken": True, "produced": [],
                            "final_status": None, "exit_code": None, "start": None, "end": None, "duration_s": None,
                            "args": "", "user": None}
                           for number, e in scanned],
            "tail": newest.log_tail(PAGE_TAIL_LINES) if isinstance(newest, Execution) else ""}


def log_text(settings: config.Settings, project: str, name: str, execution_id: int, stream: str) -> str:
    """The last LOG_LINES lines of an execution's stdout or stderr log."""
    from hopsml.jobs.execution import tail_lines
    from hopsml.ui.views import NotFound

    if stream not in ("stdout", "stderr"):
        raise NotFound(f"no log {stream!r}: an execution has stdout and stderr")
    try:
        execution = get_job(name, _settings(settings, project)).get_execution(execution_id)
    except (JobError, HopsmlError) as exc:
        raise NotFound(str(exc)) from None
    rel = execution.dir.stdout if stream == "stdout" else execution.dir.stderr
    return tail_lines(execution.storage, rel, LOG_LINES)
