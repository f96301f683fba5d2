"""One rule for what is secret (hopsml/redact.py), applied wherever settings are shown, recorded, logged or put on a
command line: the probe's planted values of issue 57 (the known forms and the ones the shape list did not know),
through the rule itself, a job's records, logs, `hopsml jobs show`, `hopsml settings` and the web view; and the
smaller job items: a repeated --spark-conf, control characters in `jobs list`, an execution record that is broken."""

from __future__ import annotations

import json
import os
import textwrap

import pytest

from hopsml import cli, config, jobs
from hopsml.cluster import private_conf
from hopsml.errors import HopsmlError
from hopsml.redact import HIDDEN, is_secret, redact_conf, redact_text, redact_value, secret_parts, split_java_options

PLANTED = {
    "spark.hadoop.fs.s3a.secret.key": "PLANTEDs3secret",
    "spark.hadoop.fs.azure.sas.box.acct.blob.core.windows.net": "sv=2022-11-02&sr=c&sig=PLANTEDsassignature00",
    "spark.driver.extraJavaOptions": "-Dfile.encoding=UTF-8 -Djavax.net.ssl.trustStorePassword=PLANTEDtrust",
    "spark.jars.repositories": "https://ci:PLANTEDrepo@repo.example.com/maven2",
    "spark.executorEnv.DB_PASS": "PLANTEDdbpass",
    "spark.hopsml.github": "ghp_PLANTEDgithub0123456789abcdefghijklm",
    "spark.hopsml.slack": "xoxb-PLANTEDslack-0123456789",
    "spark.hopsml.stripe": "sk_live_PLANTEDstripe0123456789",
    "spark.hopsml.basic": "Basic PLANTEDbasicdXNlcjpwYXNz",
}
SECRET_WORDS = ["PLANTEDs3secret", "PLANTEDsassignature00", "PLANTEDtrust", "PLANTEDrepo", "PLANTEDdbpass",
                "PLANTEDgithub", "PLANTEDslack", "PLANTEDstripe", "PLANTEDbasic"]


def _leaks(text: str) -> list[str]:
    return [word for word in SECRET_WORDS if word in text]


# --- the rule ------------------------------------------------------------------------------------------------
def test_every_planted_value_is_secret_and_shown_without_it():
    for key, value in PLANTED.items():
        assert is_secret(key, value), key
        assert _leaks(str(redact_value(key, value))) == [], key
        assert secret_parts(key, value) and all(part in value for part in secret_parts(key, value)), key
    shown = redact_conf(PLANTED)
    assert shown["spark.driver.extraJavaOptions"] == "-Dfile.encoding=UTF-8 -Djavax.net.ssl.trustStorePassword=***"
    assert shown["spark.jars.repositories"] == "https://repo.example.com/maven2"
    assert shown["spark.hopsml.basic"] == f"Basic {HIDDEN}"
    for key, value in {"spark.executor.memory": "2g", "spark.sql.bypass.enabled": "true",
                       "spark.driver.extraJavaOptions": "-Dfile.encoding=UTF-8 -Xss4m",
                       "spark.jars.repositories": "https://repo.example.com/maven2",
                       "spark.yarn.appMasterEnv.PYSPARK_PYTHON": "./env/bin/python"}.items():
        assert not is_secret(key, value) and redact_value(key, value) == value, key


def test_log_lines_lose_known_values_and_every_shape():
    line = ("resolving https://ci:PLANTEDrepo@repo.example.com/maven2; token ghp_PLANTEDgithub0123456789abcdefghijklm "
            "header Authorization: Basic PLANTEDbasicdXNlcjpwYXNz db=PLANTEDdbpass")
    shown = redact_text(line, ["PLANTEDdbpass"])
    assert _leaks(shown) == [] and "https://ci:***@repo.example.com/maven2" in shown and "Basic ***" in shown


def test_secret_java_options_go_to_a_private_argument_file(tmp_path):
    public, secret = split_java_options(PLANTED["spark.driver.extraJavaOptions"])
    assert public == ["-Dfile.encoding=UTF-8"] and secret == ["-Djavax.net.ssl.trustStorePassword=PLANTEDtrust"]
    defaults = tmp_path / "spark-defaults.conf"
    defaults.write_text("spark.ui.enabled false\n")
    folder = private_conf.write(PLANTED, str(defaults), local_master=True)
    try:
        assert os.stat(folder).st_mode & 0o777 == 0o700
        properties = open(os.path.join(folder, private_conf.PROPERTIES)).read()
        argfile = os.path.join(folder, "driver.args")
        assert properties.startswith("spark.ui.enabled false\n")
        assert f"spark.driver.extraJavaOptions=-Dfile.encoding=UTF-8 @{argfile}\n" in properties
        assert "PLANTEDtrust" not in properties and "PLANTEDrepo" in properties
        assert open(argfile).read() == '"-Djavax.net.ssl.trustStorePassword=PLANTEDtrust"\n'
        assert {os.stat(os.path.join(folder, f)).st_mode & 0o777 for f in os.listdir(folder)} == {0o600}
    finally:
        private_conf.remove(folder)
    assert not os.path.exists(folder)


# --- a job -------------------------------------------------------------------------------------------------
PRINTING_APP = """
    import json, sys
    print("given", json.dumps(sys.argv[1:]))
    print("to stderr: resolving https://ci:" + "PLANTEDrepo" + "@repo.example.com/maven2", file=sys.stderr)
    print("a token", "ghp_" + "PLANTEDgithub0123456789abcdefghijklm", file=sys.stderr)
    print("the db password", "PLANTED" + "dbpass")
"""


@pytest.fixture
def settings(root):
    return config.load()


def test_a_jobs_secrets_stay_out_of_its_records_logs_and_every_view(tmp_path, settings, root, capsys, monkeypatch):
    app = tmp_path / "app.py"
    app.write_text(textwrap.dedent(PRINTING_APP))
    job = jobs.create_job("secretive", str(app), settings=settings, job_type="PYTHON",
                          spark_conf={**PLANTED, "spark.hopsml.plain": "x"})
    execution = job.run(timeout=120)
    assert execution.success, execution.log_tail()
    out, err = execution.log(), execution.log("stderr")
    assert "the db password ***" in out and "https://ci:***@repo.example.com/maven2" in err and "a token ***" in err
    folder = root / "Projects/test/Jobs/secretive"
    leaks = sorted(str(p.relative_to(folder)) for p in folder.rglob("*")
                   if p.is_file() and p.name != "program.py" and _leaks(p.read_text(errors="replace")))
    assert leaks == ["secrets.json"] and (folder / "secrets.json").stat().st_mode & 0o777 == 0o600
    record = json.loads((folder / "job.json").read_text())
    assert record["spark_conf"]["spark.driver.extraJavaOptions"].endswith("trustStorePassword=***")
    assert sorted(record["secret_keys"]) == sorted(PLANTED)
    assert _leaks(json.dumps(jobs.get_job("secretive", settings).config)) == []
    monkeypatch.setenv("HOPSML_SPARK_CONF", json.dumps(PLANTED))
    assert cli.main(["jobs", "show", "secretive"]) == 0 and cli.main(["settings"]) == 0
    printed = capsys.readouterr().out
    assert "spark.hopsml.plain=x" in printed and "trustStorePassword=***" in printed and _leaks(printed) == []
    from hopsml.ui import create_app

    client = create_app(config.load(environ={}, root=str(root), project="test")).test_client()
    page = client.get("/p/test/jobs/secretive").get_data(as_text=True)
    assert "trustStorePassword=***" in page and _leaks(page) == []
    for stream in ("stdout", "stderr"):
        assert _leaks(client.get(f"/p/test/jobs/secretive/executions/1/{stream}").get_data(as_text=True)) == []


def test_spark_conf_can_be_given_more_than_once(tmp_path, root, capsys):
    app = tmp_path / "app.py"
    app.write_text("print('ok')\n")
    assert cli.main(["jobs", "create", "many", str(app), "--spark-conf", "a.one=1", "--spark-conf", "a.two=2",
                     "a.three=3", "--spark-conf", "a.four=4"]) == 0
    assert jobs.get_job("many").spark_conf == {"a.one": "1", "a.two": "2", "a.three": "3", "a.four": "4"}


def test_jobs_list_escapes_control_characters(tmp_path, settings, root, capsys):
    """New names with control characters are refused; a record written otherwise (by hand, another tool) that
    holds them is printed escaped, never raw."""
    app = tmp_path / "app.py"
    app.write_text("print('ok')\n")
    hostile = "evil\x1b]0;owned\x07\x1b[2J"
    with pytest.raises(HopsmlError, match="control character"):
        jobs.create_job(hostile, str(app), settings=settings, job_type="PYTHON")
    jobs.create_job("evil", str(app), settings=settings, job_type="PYTHON")
    record = root / "Projects/test/Jobs/evil/job.json"
    record.write_text(record.read_text().replace('"evil"', json.dumps(hostile)))
    assert cli.main(["jobs", "list"]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\x07" not in out and "evil\\x1b]0;owned\\x07\\x1b[2J" in out


def test_a_job_whose_only_execution_record_is_broken_shows_it_broken(tmp_path, settings, root, capsys):
    app = tmp_path / "app.py"
    app.write_text("print('ok')\n")
    job = jobs.create_job("wrecked", str(app), settings=settings, job_type="PYTHON")
    record = root / "Projects/test/Jobs/wrecked/executions/1/execution.json"
    record.parent.mkdir(parents=True)
    record.write_text("{not json")
    assert cli.main(["jobs", "show", "wrecked"]) == 0
    shown = capsys.readouterr().out
    assert "no executions yet" not in shown and "BROKEN" in shown
    assert cli.main(["jobs", "list"]) == 0
    assert "BROKEN" in capsys.readouterr().out
    from hopsml.ui import create_app

    client = create_app(config.load(environ={}, root=str(root), project="test")).test_client()
    page = client.get("/p/test/jobs/wrecked").get_data(as_text=True)
    assert "No executions yet" not in page and 'data-state="BROKEN"' in page
    assert "BROKEN" in client.get("/p/test/jobs/").get_data(as_text=True)
    assert [e.id for e in job.get_executions()] == []   # the API's list: only what can be read


def test_a_job_written_before_secret_keys_still_runs_with_its_secrets(tmp_path, settings, root):
    """A job.json of the earlier format (secret values shown *** and no secret_keys): its secrets are read from
    secrets.json to run, and a re-creation from what it shows keeps them."""
    app = tmp_path / "app.py"
    app.write_text("print('ok')\n")
    job = jobs.create_job("older", str(app), settings=settings,
                          spark_conf={"spark.hadoop.fs.s3a.secret.key": "PLANTEDs3secret", "a.b": "1"})
    record = root / "Projects/test/Jobs/older/job.json"
    data = json.loads(record.read_text())
    del data["secret_keys"]
    record.write_text(json.dumps(data))
    older = jobs.get_job("older", settings)
    assert older.spark_conf["spark.hadoop.fs.s3a.secret.key"] == HIDDEN
    assert older._with_secrets().spark_conf["spark.hadoop.fs.s3a.secret.key"] == "PLANTEDs3secret"
    again = jobs.create_job("older", job.app_path, spark_conf={**older.spark_conf, "a.b": "2"}, settings=settings,
                            overwrite=True)
    assert again._with_secrets().spark_conf == {"spark.hadoop.fs.s3a.secret.key": "PLANTEDs3secret", "a.b": "2"}
