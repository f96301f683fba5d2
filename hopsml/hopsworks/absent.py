"""The hopsworks SDK's members that hopsml does not offer: each raises one NotOfferedError that names the member
and says what to use instead, rather than an AttributeError that says nothing."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NoReturn

from hopsml.errors import NotOfferedError

# member -> what to use instead ("" when hopsml has nothing in its place)
INSTEAD = {
    "Project.get_kafka_api": "hopsml has no Kafka: a feature group is written by fg.insert(df), and a serving's "
                             "inference log is kept by hopsml itself (InferenceLogger)",
    "Project.get_opensearch_api": "hopsml has no OpenSearch (nor embedding indexes in feature groups)",
    "Project.get_flink_cluster_api": "hopsml runs Spark and Python jobs (project.get_job_api())",
    "Project.get_git_api": "work with git in the project's folder directly",
    "Project.get_environment_api": "hopsml runs in the Python environment it is installed in; each experiment "
                                   "records it (conda.yml)",
    "Job.schedule": "schedule the job from Airflow with hopsml's provider (hopsml.airflow: HopsmlJobOperator in a "
                    "DAG with a schedule), or from cron with `hopsml jobs run NAME`",
    "Job.unschedule": "a schedule lives in the Airflow DAG (or crontab) that runs the job",
    "Job.resume_schedule": "a schedule lives in the Airflow DAG (or crontab) that runs the job",
    "Job.pause_schedule": "a schedule lives in the Airflow DAG (or crontab) that runs the job",
}


def refuse(member: str) -> NoReturn:
    """Raise the NotOfferedError of `member` (a key of INSTEAD)."""
    instead = INSTEAD.get(member, "")
    raise NotOfferedError(f"{member} is not offered by hopsml" + (f"; instead: {instead}" if instead else ""))


def refusal(member: str) -> Callable[..., NoReturn]:
    """A method standing for `member` that raises its NotOfferedError, whatever it is given."""
    def method(self: Any, *args: Any, **kwargs: Any) -> NoReturn:
        refuse(member)

    method.__name__ = member.rpartition(".")[2]
    method.__doc__ = f"Not offered by hopsml: raises NotOfferedError ({INSTEAD.get(member, '')})."
    return method
