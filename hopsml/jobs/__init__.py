"""Named jobs and their executions: a script or notebook run under spark-submit (or in a fresh kernel) with its
arguments and Spark settings, each run recorded with its state, exit code, logs and what it produced. The names
follow hopsworks' job API (`create_job`, `get_job`, `job.run`, `job.get_executions`, `execution.download_logs`).
See docs/jobs.md."""

from hopsml.errors import JobError
from hopsml.jobs.definition import PYSPARK, PYTHON
from hopsml.jobs.execution import Execution
from hopsml.jobs.job import Job, create_job, get_job, get_jobs, job_exists

__all__ = ["PYSPARK", "PYTHON", "Execution", "Job", "JobError", "create_job", "get_job", "get_jobs", "job_exists"]
