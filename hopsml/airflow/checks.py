"""What the provider's sensors and its job operator ask of the project, without Airflow: has a job execution
finished, has a feature group a new commit, is a dataset complete, a model version there, a serving in a state.

Each check returns None while the answer is "not yet", else the reference a sensor pushes to XCom; a state that
can never turn into the awaited one (a failed execution, a failed serving) raises.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from hopsml import config, layout
from hopsml.airflow import assets
from hopsml.airflow.steps import Step, StepError
from hopsml.errors import HopsmlError
from hopsml.fs import Storage
from hopsml.jobs import Execution, Job, get_job, job_exists

log = logging.getLogger(__name__)

LOG_TAIL_LINES = 40


class ExecutionFailed(HopsmlError, RuntimeError):
    """A job execution ended without success; the message carries its log's last lines, `ref` the execution."""

    def __init__(self, message: str, ref: Mapping[str, Any] | None = None) -> None:
        super().__init__(message)
        self.ref = dict(ref or {})


def execution_ref(execution: Execution) -> dict[str, Any]:
    """What a task passes on about an execution: ids, states and what it produced (names, never data)."""
    return {"job": execution.job_name, "execution_id": execution.id, "state": execution.state,
            "final_status": execution.final_status, "exit_code": execution.exit_code,
            "produced": [dict(p) for p in (execution.produced or [])]}


def check_finished(execution: Execution, lines: int = LOG_TAIL_LINES) -> dict[str, Any]:
    """The reference of a finished execution; ExecutionFailed with its log tail when it did not succeed."""
    if not execution.success:
        raise ExecutionFailed(f"execution {execution.id} of job {execution.job_name!r} ended {execution.state} "
                              f"({execution.final_status}, exit code {execution.exit_code}); the last lines of "
                              f"its log:\n{execution.log_tail(lines)}", execution_ref(execution))
    return execution_ref(execution)


def start_job(settings: config.Settings, job_name: str, args: str | Sequence[str] | None = None) -> Execution:
    """A new execution of job `job_name`, not awaited. `exclusive` refuses a second one while one runs, so a
    retried task never runs the job twice at once."""
    return _job(settings, job_name).run(args=args, await_termination=False, exclusive=True)


def run_job(settings: config.Settings, job_name: str, args: str | Sequence[str] | None, timeout_s: float
            ) -> dict[str, Any]:
    """Run job `job_name` owned by this process and wait for its end, up to `timeout_s`: if the task is killed
    (its worker too, by SIGKILL), the job's runner stops the app and records the execution LOST, so no run
    goes on without its task; `exclusive`, so a retried task never runs beside its killed try. The reference of
    the execution that succeeded; ExecutionFailed with its log's last lines otherwise (also past `timeout_s`,
    the run stopped)."""
    job = _job(settings, job_name)
    try:
        execution = job.run(args=args, await_termination=True, timeout=timeout_s, exclusive=True)
    except HopsmlError as exc:   # JobError: stopped at the deadline, or another run of the job is going on
        number = getattr(exc, "execution", None)
        raise ExecutionFailed(str(exc), {"job": job_name, "execution_id": number} if number else None) from None
    return check_finished(execution)


def _job(settings: config.Settings, job_name: str) -> Job:
    """Job `job_name`; a missing one is a StepError naming it (no retry can make it appear)."""
    if not job_exists(job_name, settings):
        raise StepError(f"no job {job_name!r} in project {settings.project!r}; create it first (hopsml jobs create "
                        f"{job_name} APP) or fix the name")
    return get_job(job_name, settings)


def await_job(execution: Execution, timeout_s: float) -> dict[str, Any]:
    """Wait up to `timeout_s` for `execution`; a run past it is stopped and fails with what it logged."""
    try:
        execution.await_termination(timeout=timeout_s)
    except HopsmlError:   # still running at the deadline: stopped below
        pass
    execution.refresh()
    if execution.success is None:
        tail = execution.log_tail(LOG_TAIL_LINES)
        execution.stop()
        raise ExecutionFailed(f"execution {execution.id} of job {execution.job_name!r} was still {execution.state} "
                              f"after {timeout_s:g} s and was stopped; raise timeout_s if it needs longer. The last "
                              f"lines of its log:\n{tail}")
    return check_finished(execution)


def job_step(settings: config.Settings, ref: Mapping[str, Any]) -> Step:
    """The Assets a finished execution changed: the job's own, and one per object it reports it produced."""
    events: list[tuple[str, dict[str, Any]]] = [(assets.job(settings.project, ref["job"]),
                                                 {"execution_id": ref["execution_id"]})]
    for produced in ref.get("produced", []):
        uri = assets.of_produced(settings.project, produced)
        if uri is not None:
            events.append((uri, {k: v for k, v in produced.items() if isinstance(v, (str, int, float, bool))}))
    return Step(dict(ref), events)


def execution_done(settings: config.Settings, job_name: str, execution_id: int | str | None = None
                   ) -> dict[str, Any] | None:
    """None while the execution (the job's newest when `execution_id` is None) runs; its reference once it
    succeeded; ExecutionFailed when it did not."""
    job = _job(settings, job_name)
    if execution_id in (None, ""):
        executions = job.get_executions()
        if not executions:
            raise StepError(f"job {job_name!r} has no execution yet to wait for; run it first "
                            f"(hopsml jobs run {job_name}) or give execution_id")
        execution = executions[0]
    else:
        execution = job.get_execution(int(execution_id))
    execution.refresh()
    return None if execution.success is None else check_finished(execution)


def group_commit(settings: config.Settings, name: str, version: int = 1,
                 after_commit: int | str | None = None) -> dict[str, Any] | None:
    """The newest commit of feature group `name` when there is one after `after_commit` (any with None)."""
    from hopsml.featurestore.store import FeatureStore

    group = FeatureStore(settings).get_feature_group(name, version)
    commits = group.table.commits(limit=1) if group.table.exists() else []
    if not commits or (after_commit not in (None, "") and commits[0].version <= int(after_commit)):
        return None
    return {"featuregroup": name, "version": group.version, "commit": commits[0].version}


def dataset_ready(settings: config.Settings, name: str) -> dict[str, Any] | None:
    """The dataset once it is complete (its job wrote _SUCCESS)."""
    from hopsml.data import dataset as ds

    storage = Storage(settings.root)
    ddir = ds.DatasetDir.of(settings.project, layout.validate_name(name, "dataset name"))
    if not storage.exists(layout.join(ddir.path, layout.DATASET_SUCCESS)):
        return None
    return {"dataset": name, "uri": storage.uri(ddir.path)}


def model_version(settings: config.Settings, name: str, min_version: int = 1) -> dict[str, Any] | None:
    """The newest version of model `name` once it is `min_version` or later."""
    from hopsml.model import registry

    try:
        mv = registry.get_model(name, settings=settings)
    except registry.ModelNotFoundError:
        return None
    return {"model": name, "version": mv.version, "path": mv.path} if mv.version >= int(min_version) else None


def serving_state(settings: config.Settings, serving_name: str, state: str = "Running") -> dict[str, Any] | None:
    """The serving once its status is `state`; a Failed serving, when another state is awaited, raises."""
    from hopsml.serving.control import lifecycle

    serving = lifecycle.get(serving_name, settings)
    status = str(serving.status)
    if status == state:
        return {"serving": serving_name, "status": status, "model": serving.model_name,
                "version": serving.model_version}
    if status == "Failed":
        raise StepError(f"serving {serving_name!r} failed, so it will not become {state}; its log ends:\n"
                        f"{serving.log}")
    return None


def canary_requests(settings: config.Settings, serving_name: str, version: int, min_requests: int,
                    since: str | None = None, timeout_s: float | None = None) -> dict[str, Any] | None:
    """The count of answered requests canary version `version` of the serving logged since `since` (ISO time),
    once there are `min_requests`; None before. Past `timeout_s` after `since` it raises, saying how many came:
    the clients' traffic is what the gate judges, so nothing here sends any."""
    import datetime as dt

    from hopsml.serving.control import lifecycle
    from hopsml.serving.instance import inference_log

    serving = lifecycle.get(serving_name, settings)
    if serving.canary_version != int(version):
        raise StepError(f"serving {serving_name!r} has canary version {serving.canary_version}, not {version}: "
                        "it was promoted or rolled back while the pipeline waited for its requests")
    start = dt.datetime.fromisoformat(since) if since else None
    folder = inference_log.inference_log_path(settings, settings.project, serving_name)
    table = inference_log.read(folder, ["time", "model_version", "status"])
    count = sum(1 for when, v, status in zip(*(table.column(c).to_pylist() for c in ("time", "model_version",
                                                                                       "status")))
                if v == int(version) and status == 200 and (start is None or when >= start))
    if count >= int(min_requests):
        return {"serving": serving_name, "canary": int(version), "requests": count}
    waited = (dt.datetime.now(dt.timezone.utc) - start).total_seconds() if start is not None else 0.0
    if timeout_s is not None and waited > float(timeout_s):
        raise StepError(f"serving {serving_name!r}: canary version {version} answered {count} of the {min_requests} "
                        f"requests the gate waits for in {waited:.0f} s (timeout_s={timeout_s:g}); the canary takes "
                        f"{serving.canary_traffic_percent}% of the serving's requests, so send it traffic, raise its "
                        "share, or lower min_requests; it stays deployed until promoted or rolled back")
    log.info("serving %s: canary version %s has %d of %d requests logged", serving_name, version, count,
             min_requests)
    return None
