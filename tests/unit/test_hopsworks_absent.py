"""What hopsml does not offer of the hopsworks SDK is refused by name: Kafka, OpenSearch and the job scheduler
raise one NotOfferedError naming the member and what to use instead (they gave AttributeError)."""

from __future__ import annotations

import pytest

from hopsml.errors import HopsmlError, NotOfferedError
from hopsml.hopsworks import login


@pytest.mark.parametrize("member", ["get_kafka_api", "get_opensearch_api", "get_flink_cluster_api", "get_git_api",
                                    "get_environment_api"])
def test_a_project_refuses_the_services_it_does_not_have_by_name(root, member):
    project = login()
    with pytest.raises(NotOfferedError, match=rf"Project\.{member} is not offered by hopsml") as refused:
        getattr(project, member)()
    assert isinstance(refused.value, HopsmlError) and "instead" in str(refused.value)


def test_a_job_refuses_schedules_and_names_what_schedules_instead(root, tmp_path):
    api = login().get_jobs_api()          # hopsworks' older name of get_job_api
    app = tmp_path / "app.py"
    app.write_text("print('ok')\n")
    config = api.get_configuration("PYTHON")
    config["appPath"] = str(app)
    job = api.create_job("nightly", config)
    assert job.job_schedule is None
    with pytest.raises(NotOfferedError, match=r"Job\.schedule is not offered by hopsml; instead: .*Airflow"):
        job.schedule(cron_expression="0 0 * ? * * *")
    for member in ("unschedule", "resume_schedule", "pause_schedule"):
        with pytest.raises(NotOfferedError, match=rf"Job\.{member} is not offered"):
            getattr(api.get_job("nightly"), member)()
    assert [j.name for j in api.get_jobs()] == ["nightly"] and api.get_job("nightly").job_schedule is None
