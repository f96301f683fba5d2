"""Credentials in the root URI reach the store but never what hopsml shows or records."""

import json

import pytest
from s3 import s3_root, s3_server

from hopsml.fs import Storage
from hopsml.tracking.record import ExperimentRun, read_record

KEY, SECRET = "testing", "testing"   # what the local S3 server accepts (pyarrow takes them as user:password@)


@pytest.fixture(scope="module")
def s3_endpoint():
    with s3_server() as endpoint:
        yield endpoint


def test_experiment_json_on_s3_has_no_credentials(s3_endpoint):
    root = s3_root(s3_endpoint).replace("s3://", f"s3://{KEY}:{SECRET}@")
    storage = Storage(root)
    run = ExperimentRun.start(storage, "p", "local-9", name="creds")
    text = storage.read_text(run.dir.record)
    assert f"{KEY}:{SECRET}@" not in text and "endpoint_override" not in text
    assert json.loads(text)["logdir"] == storage.uri(run.dir.path) == run.logdir
    assert run.logdir.startswith("s3://hopsml-test/")
    assert f"{KEY}:{SECRET}@" not in repr(storage)
    assert read_record(storage, "p", run.id).name == "creds"  # the store was reached with them


CREDENTIALS = f"{KEY}:{SECRET}@"


def test_settings_show_no_credentials():
    from hopsml import config

    settings = config.load(environ={
        "HOPSML_ROOT": "s3://AKIAEXAMPLE:s3cr3t-value@bucket/prefix?secret_key=other-s3cr3t&region=eu-west-1",
        "HOPSML_SPARK_CONF": '{"spark.hadoop.fs.s3a.secret.key": "conf-s3cr3t", "spark.authenticate.secret": '
                             '"auth-s3cr3t", "spark.ssl.keyPassword": "pw-s3cr3t", '
                             '"spark.hadoop.fs.s3a.session.token": "tok-s3cr3t", '
                             '"spark.eventLog.dir": "s3a://AKIAEXAMPLE:log-s3cr3t@logs/spark", '
                             '"spark.executor.cores": "2"}'})
    for shown in (repr(settings), str(settings), f"{settings}", repr([settings])):
        assert "s3cr3t" not in shown and "AKIAEXAMPLE" not in shown, shown
    assert "root='s3://bucket/prefix?region=eu-west-1'" in repr(settings)
    assert "'spark.executor.cores': '2'" in repr(settings) \
        and "'spark.eventLog.dir': 's3a://logs/spark'" in repr(settings)
    assert "'spark.authenticate.secret': '***'" in repr(settings)
    assert settings.spark_conf["spark.authenticate.secret"] == "auth-s3cr3t"  # only the display hides it
    assert settings.root.startswith("s3://AKIAEXAMPLE:s3cr3t-value@")


def test_a_bad_setting_is_reported_without_its_secrets():
    from hopsml import config
    from hopsml.errors import SettingsError

    with pytest.raises(SettingsError) as text_form:
        config.load(environ={"HOPSML_SPARK_CONF": "spark.authenticate.secret=ab,cd-s3cr3t"})
    message = str(text_form.value)
    assert "s3cr3t" not in message and "item 2 of 2 is not key=value" in message
    assert "JSON object" in message and "HOPSML_SPARK_CONF" in message
    with pytest.raises(SettingsError) as mapping_form:
        config.load(spark_conf={"spark.authenticate.secret": "s3cr3t", "spark.executor.cores": object()},
                    num_workers="x")
    assert "s3cr3t" not in str(mapping_form.value)


def test_a_task_spec_shows_neither_the_secret_nor_root_credentials():
    from hopsml import config
    from hopsml.launcher.spec import TaskSpec

    spec = TaskSpec(Storage("s3://AKIAEXAMPLE:s3cr3t@bucket/root"), "Projects/p/Experiments/x_1", ("h", 1),
                    b"run-s3cr3t", settings=config.RunSettings.resolve(sync_interval_s=1.0))
    assert "s3cr3t" not in repr(spec) and "AKIAEXAMPLE" not in repr(spec)


def run_cli(capsys, root: str, *args: str) -> str:
    from hopsml import cli

    code = cli.main(["--root", root, "--project", "p", *args])
    captured = capsys.readouterr()
    output = captured.out + captured.err
    assert CREDENTIALS not in output and "endpoint_override" not in output, output
    assert code == 0, output
    return output


def test_cli_output_on_an_s3_root_has_no_credentials(s3_endpoint, capsys):
    root = s3_root(s3_endpoint).replace("s3://", f"s3://{CREDENTIALS}")
    assert "no experiments in project 'p' under s3://hopsml-test/" in run_cli(capsys, root, "experiments", "list")
    assert "no datasets in project 'p' under s3://hopsml-test/" in run_cli(capsys, root, "datasets", "list")
    run = ExperimentRun.start(Storage(root), "p", "local-7", name="shown")
    assert run.id in run_cli(capsys, root, "experiments", "list")
    assert "files in s3://hopsml-test/" in run_cli(capsys, root, "experiments", "show", run.id)
    run_cli(capsys, root, "datasets", "clean", "--dry-run")
    run_cli(capsys, root, "experiments", "clean", "--lost", "--dry-run")


def test_an_unreadable_root_is_reported_without_credentials(capsys):
    from hopsml import cli

    # refused by pyarrow while parsing (an unknown option), before any connection; the endpoint is loopback
    root = f"s3://{CREDENTIALS}bucket/x?endpoint_override=127.0.0.1:9&scheme=http&no_such_option=1"
    assert cli.main(["--root", root, "experiments", "list"]) == 1
    captured = capsys.readouterr()
    assert "cannot open root 's3://bucket/x?" in captured.err and "no_such_option" in captured.err, captured
    assert CREDENTIALS not in captured.err + captured.out, captured


def test_a_path_outside_the_root_is_reported_without_its_credentials(tmp_path, monkeypatch):
    from hopsml import hdfs
    from hopsml.hdfs import InvalidPathError

    monkeypatch.setenv("HOPSML_ROOT", str(tmp_path / "root"))
    with pytest.raises(InvalidPathError) as error:
        hdfs.exists("s3://AKIAEXAMPLE:s3cr3t@another-bucket/data.csv")
    assert "s3://another-bucket/data.csv" in str(error.value) and "s3cr3t" not in str(error.value)
