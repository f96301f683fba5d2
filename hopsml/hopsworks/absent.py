"""The hopsworks SDK's members that hopsml does not offer: each raises one NotOfferedError that names the member
and says what to use instead, rather than an AttributeError that says nothing. The feature store's own refusals
(Kafka, OpenSearch, storage connectors, feature monitoring) are in hopsml.featurestore.absent; ALL holds both."""

from __future__ import annotations

from collections.abc import Callable
from typing import NoReturn

from hopsml.featurestore import absent as featurestore_absent

_SCHEDULE = "a schedule lives in the Airflow DAG (or crontab) that runs the job"

# member -> what to use instead ("" when hopsml has nothing in its place)
INSTEAD = {
    "Project.get_kafka_api": "hopsml has no Kafka: a feature group is written by fg.insert(df), and a serving's "
                             "inference log is kept by hopsml itself (InferenceLogger)",
    "Project.get_opensearch_api": "hopsml has no OpenSearch (nor embedding indexes in feature groups)",
    "Project.get_flink_cluster_api": "hopsml runs Spark and Python jobs (project.get_job_api())",
    "Project.get_git_api": "work with git in the project's folder directly",
    "Project.get_environment_api": "hopsml runs in the Python environment it is installed in; each experiment "
                                   "records it (conda.yml)",
    "hopsworks.get_secrets_api": "hopsml keeps no secrets store: give a program its secrets in environment "
                                 "variables (a job's secrets: job.save(secrets={...}), see docs/jobs.md)",
    "Job.schedule": "schedule the job from Airflow with hopsml's provider (hopsml.airflow: HopsmlJobOperator in a "
                    "DAG with a schedule), or from cron with `hopsml jobs run NAME`",
    "Job.unschedule": _SCHEDULE,
    "Job.resume_schedule": _SCHEDULE,
    "Job.pause_schedule": _SCHEDULE,
}
ALL = {**featurestore_absent.INSTEAD, **INSTEAD}


def refuse(member: str) -> NoReturn:
    """Raise the NotOfferedError of `member` (a key of ALL)."""
    featurestore_absent.refuse(member, ALL)


def refusal(member: str) -> Callable[..., NoReturn]:
    """A method standing for `member` that raises its NotOfferedError, whatever it is given."""
    return featurestore_absent.refusal(member, ALL)
