import pytest

from hopsml import config
from hopsml.errors import SettingsError


@pytest.fixture(autouse=True)
def outside_the_repo(tmp_path, monkeypatch):
    """./conf/hopsml.toml of the working directory is a source: run away from the repo's one."""
    monkeypatch.chdir(tmp_path)


def test_precedence_argument_over_env_over_file_over_default(tmp_path):
    conf = tmp_path / "hopsml.toml"
    conf.write_text('project = "fromfile"\nroot = "/file/root"\nnum_workers = 3\n[spark]\n"spark.a" = "1"\n')
    env = {"HOPSML_CONF": str(conf), "HOPSML_ROOT": "/env/root", "HOPSML_SPARK_CONF": "spark.b=2"}
    settings = config.load(env, root=None, num_workers=5)
    assert settings.project == "fromfile" and "settings file" in settings.source("project")
    assert settings.root == "/env/root" and settings.source("root") == "environment variable HOPSML_ROOT"
    assert settings.num_workers == 5 and settings.source("num_workers") == "argument"
    assert settings.spark_conf == {"spark.a": "1", "spark.b": "2"}
    assert settings.source("log_dir") == "default"
    assert settings.log_dir == "/env/root/logs"          # Spark's logs stay with a local root
    assert config.load({}, root="file:///data/r").log_dir == "/data/r/logs"
    assert config.load({}, root="s3://bucket/r").log_dir == "~/.hopsml/logs"   # no local folder to keep them in
    assert config.load({"HOPSML_LOG_DIR": "/var/l"}, root="/data/r").log_dir == "/var/l"


def test_defaults_without_any_source():
    settings = config.load({})
    assert settings.project == "demo"
    assert settings.master.startswith("local[")
    assert settings.num_workers >= 1


def test_bad_value_names_setting_and_source():
    with pytest.raises(SettingsError, match=r"num_workers='zero'.*environment variable HOPSML_NUM_WORKERS"):
        config.load({"HOPSML_NUM_WORKERS": "zero"})
    with pytest.raises(SettingsError, match=r"project.*argument"):
        config.load({}, project="a/b")


def test_unknown_keys_in_file_and_arguments(tmp_path):
    conf = tmp_path / "hopsml.toml"
    conf.write_text('porject = "typo"\n')
    with pytest.raises(SettingsError, match="porject"):
        config.load({"HOPSML_CONF": str(conf)})
    with pytest.raises(SettingsError, match="colour"):
        config.load({}, colour="red")


def test_missing_conf_file_is_an_error():
    with pytest.raises(SettingsError, match="HOPSML_CONF"):
        config.load({"HOPSML_CONF": "/nonexistent/hopsml.toml"})


def test_spark_conf_json_form():
    assert config.load({"HOPSML_SPARK_CONF": '{"spark.x": 4}'}).spark_conf == {"spark.x": "4"}
    with pytest.raises(SettingsError, match="spark_conf"):
        config.load({"HOPSML_SPARK_CONF": "novalue"})


def test_remote_takes_a_spark_connect_url_or_pyspark_s_own_variable(monkeypatch):
    assert config.load(environ={"HOPSML_REMOTE": "sc://head:15002"}).remote == "sc://head:15002"
    monkeypatch.setenv("SPARK_REMOTE", "sc://other:15002")   # PySpark's variable is the default
    assert config.load(environ={}).remote == "sc://other:15002"
    monkeypatch.delenv("SPARK_REMOTE")
    assert config.load(environ={}).remote == ""
    with pytest.raises(SettingsError, match=r"remote='spark://head:7077' .* must be a Spark Connect URL"):
        config.load(environ={"HOPSML_REMOTE": "spark://head:7077"})
