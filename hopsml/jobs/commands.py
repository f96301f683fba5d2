"""The job commands of the ``hopsml`` CLI: ``jobs create|list|show|run|logs|stop|delete``.

``add_commands(subparsers)`` adds them to the CLI's parser; ``run(args, settings)`` runs the one that was
parsed and returns the text to print. A run that fails raises JobError with its last log lines, so the command
exits with status 1.
"""

from __future__ import annotations

import argparse
import shlex
from typing import Any

from hopsml import config
from hopsml.cli_tables import format_fields, format_table, printable
from hopsml.errors import JobError
from hopsml.jobs.definition import JOB_TYPES, PYSPARK
from hopsml.jobs.execution import Execution, describe_produced
from hopsml.jobs.job import Job, create_job, get_job, scan_jobs
from hopsml.records import BROKEN, BrokenRecordError
from hopsml.redact import redact_words

COMMANDS = ("jobs",)
EXECUTION_COLUMNS = ("id", "state", "final_status", "exit", "start", "duration_s", "args", "produced")


def add_commands(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    jobs = subparsers.add_parser("jobs", help="named jobs (a script or notebook run under spark-submit) and their "
                                              "executions")
    actions = jobs.add_subparsers(dest="jobs_action", required=True)
    create = actions.add_parser("create", help="create a job that runs APP (.py under spark-submit, .ipynb in a "
                                               "fresh kernel)")
    create.add_argument("name", help="the new job's name (a folder under Jobs/)")
    create.add_argument("app", help="a .py script or .ipynb notebook (a local path, or one in the project such as "
                                    "Resources/app.py)")
    create.add_argument("--args", default=None, help="default arguments, split as a shell would: --args \"--lr 0.1\" "
                                                     "(a single word starting with '-': --args=--verbose)")
    create.add_argument("--spark-conf", nargs="*", action="extend", default=[], metavar="KEY=VALUE",
                        help="Spark settings, e.g. spark.executor.memory=2g (spark.master=... picks the master); "
                             "repeatable: --spark-conf a=1 --spark-conf b=2 keeps both")
    create.add_argument("--type", dest="job_type", type=str.upper, choices=JOB_TYPES, default=PYSPARK,
                        help="PYSPARK: under spark-submit (default); PYTHON: by this Python alone, no JVM")
    create.add_argument("--description", default="", help="what the job does, shown by 'jobs show'")
    create.add_argument("--overwrite", action="store_true", help="replace an existing job's definition (its "
                                                                 "executions stay)")
    actions.add_parser("list", help="the project's jobs with their newest execution")
    show = actions.add_parser("show", help="a job and its executions")
    show.add_argument("name", help="the job's name, as in 'hopsml jobs list'")
    runner = actions.add_parser("run", help="run a job: prints the execution's id and state, and on failure its "
                                            "last log lines (exit status 1)")
    runner.add_argument("name", help="the job's name, as in 'hopsml jobs list'")
    runner.add_argument("--args", default=None, help="arguments instead of the job's default ones")
    runner.add_argument("--no-wait", action="store_true", help="return once it runs; follow it with 'jobs show'")
    runner.add_argument("--timeout", type=float, help="seconds to wait; then it is stopped and the command fails")
    runner.add_argument("--exclusive", action="store_true", help="refuse to start while an execution of the job runs")
    logs = actions.add_parser("logs", help="print an execution's stdout log (or --stderr)")
    logs.add_argument("name", help="the job's name, as in 'hopsml jobs list'")
    logs.add_argument("execution", nargs="?", type=int, help="the execution's id (default: the newest)")
    logs.add_argument("--stderr", action="store_true", help="the stderr log instead")
    stop = actions.add_parser("stop", help="stop a running execution (recorded KILLED)")
    stop.add_argument("name", help="the job's name, as in 'hopsml jobs list'")
    stop.add_argument("execution", type=int, help="the execution's id, as in 'hopsml jobs show'")
    delete = actions.add_parser("delete", help="delete a job and its executions' records and logs")
    delete.add_argument("name", help="the job's name, as in 'hopsml jobs list'")


def run(args: argparse.Namespace, settings: config.Settings) -> str:
    action = args.jobs_action
    if action == "create":
        job = create_job(args.name, args.app, args=args.args, spark_conf=args.spark_conf,
                         description=args.description, overwrite=args.overwrite, settings=settings,
                         job_type=args.job_type)
        return f"job {job.name!r} created: {job.kind} {job.app_path} ({job.job_type})"
    if action == "list":
        return jobs_list(settings)
    if action == "show":
        return job_show(settings, args.name)
    if action == "run":
        return job_run(settings, args.name, args.args, not args.no_wait, args.timeout, args.exclusive)
    if action == "logs":
        job = get_job(args.name, settings)
        execution = job.get_execution(args.execution) if args.execution else job.get_last_execution()
        if execution is None:
            raise JobError(f"job {job.name!r} has no executions yet: 'hopsml jobs run {job.name}'", job=job.name)
        return execution.log("stderr" if args.stderr else "stdout").rstrip("\n")
    if action == "stop":
        execution = get_job(args.name, settings).get_execution(args.execution).stop()
        return f"execution {execution.id} of job {args.name!r}: {execution.state} ({execution.final_status})"
    get_job(args.name, settings).delete()
    return f"job {args.name!r} deleted"


def _row(execution: Execution) -> dict[str, Any]:
    return {"id": execution.id, "state": execution.state, "final_status": execution.final_status,
            "exit": execution.exit_code, "start": (execution.start or "")[:19].replace("T", " ") or None,
            "duration_s": execution.duration_s, "args": shlex.join(redact_words(execution.args)) or None,
            "produced": ", ".join(describe_produced(p) for p in execution.produced) or None}


def jobs_list(settings: config.Settings) -> str:
    rows: list[dict[str, Any]] = []
    for name, job in scan_jobs(settings):
        if not isinstance(job, Job):
            rows.append({"name": name, "state": BROKEN, "app": job.reason})
            continue
        scanned = job.scan_executions()
        number, last = scanned[0] if scanned else (None, None)
        if isinstance(last, BrokenRecordError):
            rows.append({"name": job.name, "kind": job.kind, "type": job.job_type, "app": job.app_path,
                         "last": number, "state": BROKEN, "start": None})
            continue
        rows.append({"name": job.name, "kind": job.kind, "type": job.job_type, "app": job.app_path,
                     "last": last.id if last else None, "state": last.state if last else None,
                     "start": (last.start or "")[:19].replace("T", " ") if last else None})
    if not rows:
        return f"no jobs in project {settings.project!r}: create one with 'hopsml jobs create NAME APP.py'"
    return format_table(rows, ("name", "kind", "type", "app", "last", "state", "start"), uncut=("app",))


def job_show(settings: config.Settings, name: str) -> str:
    job = get_job(name, settings)
    head = format_fields([("name", job.name), ("app", job.app_path), ("kind", job.kind), ("type", job.job_type),
                          ("args", " ".join(redact_words(job.default_args))), ("spark conf", ", ".join(
                              f"{k}={v}" for k, v in job.spark_conf.items())), ("description", job.description),
                          ("created", job.created), ("creator", job.creator)])
    scanned = job.scan_executions()
    if not scanned:
        return f"{head}\n\nno executions yet: 'hopsml jobs run {printable(job.name)}'"
    executions = [e for _, e in scanned if isinstance(e, Execution)]
    rows = [_row(e) if isinstance(e, Execution) else {"id": number, "state": BROKEN, "produced": e.reason}
            for number, e in scanned]
    table = format_table(rows, EXECUTION_COLUMNS, uncut=("produced",))
    problems = [f"  {e.id}: {printable(e.error)}" for e in executions if e.error and not e.success][:5]
    return f"{head}\n\n{table}" + ("\n\n" + "\n".join(problems) if problems else "")


def job_run(settings: config.Settings, name: str, arguments: str | None, wait: bool, timeout: float | None,
            exclusive: bool) -> str:
    execution = get_job(name, settings).run(arguments, await_termination=wait, timeout=timeout, exclusive=exclusive)
    said = f"execution {execution.id} of job {name!r}: {execution.state} ({execution.final_status})"
    if execution.exit_code is not None:
        said += f", exit code {execution.exit_code}"
    if execution.done:
        said += f", {execution.duration_s} s"
        produced = ", ".join(describe_produced(p) for p in execution.produced)
        if produced:
            said += f"\nproduced: {produced}"
        execution.raise_for_status()
    return said
