"""Airflow 3 sensors on hopsml's objects: a job execution finished, a feature group got a commit, a dataset is
complete, a model version appeared, a serving reached a state. Each pokes one function of `checks.py` and pushes
what it found to XCom; each has a timeout (a day unless given) and pokes in `reschedule` mode by default, so a
long wait holds no worker slot."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseSensorOperator, PokeReturnValue
from airflow.sdk.exceptions import AirflowFailException

from hopsml import config
from hopsml.airflow import checks, steps

if TYPE_CHECKING:
    from airflow.sdk import Context

DAY_S = 24 * 3600.0


class HopsmlSensor(BaseSensorOperator):
    """The base of hopsml's sensors: the project (`root`, `project`, else the environment), a check per poke."""

    def __init__(self, *, root: str | None = None, project: str | None = None, **kwargs: Any) -> None:
        self.root, self.project = root, project
        kwargs.setdefault("timeout", DAY_S)
        kwargs.setdefault("poke_interval", 30)
        kwargs.setdefault("mode", "reschedule")
        kwargs.setdefault("multiple_outputs", True)
        super().__init__(**kwargs)

    def check(self, settings: config.Settings) -> dict[str, Any] | None:
        raise NotImplementedError

    def poke(self, context: Context) -> PokeReturnValue:
        settings = steps.settings_for(self.root, self.project)
        try:
            found = self.check(settings)
        except (steps.StepError, checks.ExecutionFailed, LookupError, ValueError) as exc:
            raise AirflowFailException(f"{self.task_id}: {exc}") from exc
        return PokeReturnValue(is_done=found is not None, xcom_value=found)


class JobExecutionSensor(HopsmlSensor):
    """Done when the execution `execution_id` of job `job_name` (its newest when None) succeeded; fails at once
    with its log tail when it did not."""

    template_fields: Sequence[str] = ("job_name", "execution_id")

    def __init__(self, *, job_name: str, execution_id: int | str | None = None, **kwargs: Any) -> None:
        self.job_name, self.execution_id = job_name, execution_id
        super().__init__(**kwargs)

    def check(self, settings: config.Settings) -> dict[str, Any] | None:
        return checks.execution_done(settings, self.job_name, self.execution_id)


class FeatureGroupCommitSensor(HopsmlSensor):
    """Done when feature group `name` has a commit after `after_commit` (any commit when None)."""

    template_fields: Sequence[str] = ("after_commit",)

    def __init__(self, *, name: str, version: int = 1, after_commit: int | str | None = None, **kwargs: Any) -> None:
        self.name, self.version, self.after_commit = name, int(version), after_commit
        super().__init__(**kwargs)

    def check(self, settings: config.Settings) -> dict[str, Any] | None:
        return checks.group_commit(settings, self.name, self.version, self.after_commit)


class DatasetSensor(HopsmlSensor):
    """Done when dataset `name` is complete."""

    template_fields: Sequence[str] = ("name",)

    def __init__(self, *, name: str, **kwargs: Any) -> None:
        self.name = name
        super().__init__(**kwargs)

    def check(self, settings: config.Settings) -> dict[str, Any] | None:
        return checks.dataset_ready(settings, self.name)


class ModelVersionSensor(HopsmlSensor):
    """Done when model `name` has version `min_version` or a later one."""

    template_fields: Sequence[str] = ("min_version",)

    def __init__(self, *, name: str, min_version: int | str = 1, **kwargs: Any) -> None:
        self.name, self.min_version = name, min_version
        super().__init__(**kwargs)

    def check(self, settings: config.Settings) -> dict[str, Any] | None:
        return checks.model_version(settings, self.name, int(self.min_version))


class ServingStateSensor(HopsmlSensor):
    """Done when serving `serving_name` is in `state` ('Running', 'Stopped'); fails when it failed instead."""

    def __init__(self, *, serving_name: str, state: str = "Running", **kwargs: Any) -> None:
        self.serving_name, self.state = serving_name, state
        super().__init__(**kwargs)

    def check(self, settings: config.Settings) -> dict[str, Any] | None:
        return checks.serving_state(settings, self.serving_name, self.state)


class CanaryRequestsSensor(HopsmlSensor):
    """Done when the serving's canary `canary_version` has answered `min_requests` requests since `since` (the
    canary's deployment, usually ``canary.output["since"]``): the clients' own traffic, never made up here. Past
    `timeout_s` it fails, saying how many came and what to do."""

    template_fields: Sequence[str] = ("canary_version", "since")

    def __init__(self, *, serving_name: str, canary_version: int | str, min_requests: int = 50,
                 since: str | None = None,
                 timeout_s: float = 3600.0, **kwargs: Any) -> None:
        self.serving_name, self.canary_version, self.min_requests = serving_name, canary_version, int(min_requests)
        self.since, self.timeout_s = since, float(timeout_s)
        kwargs.setdefault("poke_interval", 15)
        kwargs.setdefault("timeout", self.timeout_s + 3600)   # the check's own timeout speaks first, clearly
        super().__init__(**kwargs)

    def check(self, settings: config.Settings) -> dict[str, Any] | None:
        return checks.canary_requests(settings, self.serving_name, int(self.canary_version), self.min_requests,
                                      str(self.since) if self.since not in (None, "", "None") else None,
                                      self.timeout_s)


class HopsworksJobSuccessSensor(JobExecutionSensor):
    """Hopsworks' name and arguments (project_name, execution_id), for DAGs that move over."""

    def __init__(self, *, job_name: str, project_name: str | None = None, execution_id: int | str | None = None,
                 hopsworks_conn_id: str | None = None, project_id: int | None = None, **kwargs: Any) -> None:
        del hopsworks_conn_id, project_id
        super().__init__(job_name=job_name, execution_id=execution_id,
                         project=kwargs.pop("project", None) or project_name, **kwargs)
