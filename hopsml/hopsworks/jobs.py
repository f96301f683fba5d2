"""hopsworks' job API (`project.get_job_api()`) over hopsml's named jobs:

    job_api = project.get_job_api()
    config = job_api.get_configuration("PYSPARK")
    config["appPath"] = "Resources/my_app.py"
    config["defaultArgs"] = "--days 7"
    job = job_api.create_job("my_spark_job", config)
    execution = job.run()

The configuration is hopsworks' dict: `appPath`, `defaultArgs`, `jobType` (PYSPARK, or PYTHON for a job without
Spark), the Spark properties (`spark.*` keys, and `properties`: more of them as 'k=v' lines). hopsworks' other
keys (memory of the application master, queues, ...) are accepted and kept with the job, unused. As on
hopsworks, `create_job` replaces the definition of a job that exists (its executions stay), and `get_job`
returns None for a job that does not (hopsml.jobs.get_job raises JobError naming it).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hopsml import config as settings_module
from hopsml import jobs
from hopsml.errors import JobError
from hopsml.hopsworks.absent import refusal
from hopsml.jobs.definition import JOB_TYPES, PYSPARK, parse_spark_conf

_CONFIG_TYPES = {"PYSPARK": "sparkJobConfiguration", "SPARK": "sparkJobConfiguration",
                 "PYTHON": "pythonJobConfiguration"}
_OWN_KEYS = ("appPath", "defaultArgs", "jobType", "properties")


class Job(jobs.Job):
    """A job as hopsworks' job API returns it: hopsml's Job, and hopsworks' schedule members, which hopsml does not
    offer (a schedule is an Airflow DAG's, or cron's), each refused by name."""

    @classmethod
    def of(cls, job: jobs.Job) -> Job:
        """hopsml's job `job` under the hopsworks SDK's Job names."""
        return cls(job.definition, job.settings)

    @property
    def job_schedule(self) -> None:
        """hopsworks' schedule of the job: None, as for a job without one (hopsml schedules none)."""
        return None

    schedule = refusal("Job.schedule")
    unschedule = refusal("Job.unschedule")
    resume_schedule = refusal("Job.resume_schedule")
    pause_schedule = refusal("Job.pause_schedule")


class JobApi:
    """The project's jobs under hopsworks' names."""

    def __init__(self, settings: settings_module.Settings) -> None:
        self.settings = settings

    def __repr__(self) -> str:
        return f"JobApi({self.settings.project!r})"

    def get_configuration(self, type: str = PYSPARK) -> dict[str, Any]:  # noqa: A002 - hopsworks' name
        """A default configuration for a job of `type` (PYSPARK, SPARK or PYTHON), to fill in and give to
        `create_job`. (A SPARK job of a jar is not run by hopsml; its configuration is PYSPARK's.)"""
        kind = str(type).upper()
        if kind not in _CONFIG_TYPES:
            raise JobError(f"job type {type!r}: hopsml runs PYSPARK and PYTHON jobs (a .py script or a notebook); "
                           "DOCKER, FLINK and jar (SPARK) jobs are not supported")
        job_type = PYSPARK if kind == "SPARK" else kind
        config: dict[str, Any] = {"type": _CONFIG_TYPES[kind], "jobType": job_type, "appPath": "", "defaultArgs": ""}
        if job_type == PYSPARK:
            config.update({"spark.executor.instances": 1, "spark.executor.cores": 1, "spark.executor.memory": 1024,
                           "properties": ""})
        return config

    def create_job(self, name: str, config: Mapping[str, Any]) -> Job:
        """Create the job `name` from hopsworks' configuration `config`, or replace the definition of the job of
        that name (hopsworks' create-or-update); its app is `config["appPath"]`."""
        if not isinstance(config, Mapping):
            raise JobError(f"job {name!r}: config must be a dict such as get_configuration('PYSPARK') returns, not "
                           f"{type(config).__name__}", job=name)
        app = config.get("appPath")
        if not app:
            raise JobError(f"job {name!r}: config has no appPath; set config['appPath'] to the .py or .ipynb the job "
                           "runs (a local path, or one in the project such as Resources/app.py)", job=name)
        job_type = str(config.get("jobType") or PYSPARK).upper()
        if job_type == "SPARK":
            job_type = PYSPARK
        if job_type not in JOB_TYPES:
            raise JobError(f"job {name!r}: jobType {config.get('jobType')!r} is not one hopsml runs; use "
                           f"{' or '.join(JOB_TYPES)}", job=name)
        return Job.of(jobs.create_job(name, str(app), args=str(config.get("defaultArgs") or ""),
                               spark_conf=spark_properties(config), overwrite=True, settings=self.settings,
                               job_type=job_type,
                               extra_config={k: v for k, v in config.items()
                                             if k not in _OWN_KEYS and not str(k).startswith("spark.")}))

    def get_job(self, name: str) -> Job | None:
        """The job `name`, None when the project has none such (as hopsworks returns)."""
        return Job.of(jobs.get_job(name, self.settings)) if self.exists(name) else None

    def get_jobs(self) -> list[Job]:
        """Every job of the project, by name."""
        return [Job.of(job) for job in jobs.get_jobs(self.settings)]

    def exists(self, name: str) -> bool:
        """Whether the project has a job named `name`."""
        return jobs.job_exists(name, self.settings)


def spark_properties(config: Mapping[str, Any]) -> dict[str, str]:
    """The Spark settings of a hopsworks configuration: its `spark.*` keys with a value, and the 'k=v' lines of
    `properties`. hopsworks gives memory in MiB as a bare number, which Spark reads as MiB too.

    >>> spark_properties({"appPath": "a.py", "spark.executor.memory": 2048, "spark.yarn.dist.files": "",
    ...                   "properties": "spark.sql.shuffle.partitions=8\\nspark.eventLog.enabled=true"})
    {'spark.executor.memory': '2048', 'spark.sql.shuffle.partitions': '8', 'spark.eventLog.enabled': 'true'}
    """
    conf: dict[str, Any] = {str(key): value for key, value in config.items()
                            if str(key).startswith("spark.") and value not in (None, "")}
    for line in str(config.get("properties") or "").splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip():
            conf[key.strip()] = value.strip()
    return parse_spark_conf(conf)
