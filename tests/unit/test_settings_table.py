"""One table of settings: what `hopsml settings` prints and the docs' settings page are built from it."""

import dataclasses

from hopsml import cli, config


def test_the_table_names_every_setting_with_its_variable_and_default():
    table = {name: (env, default, text) for name, env, default, text in config.describe()}
    resolved = {f.name for f in dataclasses.fields(config.Settings) if f.name != "sources"}
    assert set(table) == resolved
    assert table["heartbeat_s"][:2] == ("HOPSML_HEARTBEAT_S", "10")
    assert table["port_range"][1] == "empty"
    assert all(text for _, _, text in table.values())


def test_the_docs_table_has_a_row_per_setting_and_escapes_what_markdown_would_take_as_html():
    markdown = config.settings_markdown()
    rows = markdown.splitlines()[2:]
    assert [row.split("`")[1] for row in rows] == [name for name, *_ in config.describe()]
    assert "<root>" not in markdown and "&lt;root>" in markdown


def test_hopsml_settings_prints_each_value_with_where_it_came_from_and_no_credentials(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)   # no conf/hopsml.toml here
    monkeypatch.delenv("HOPSML_CONF", raising=False)
    monkeypatch.setenv("HOPSML_HEARTBEAT_S", "7")
    monkeypatch.setenv("HOPSML_SPARK_CONF", "spark.hadoop.fs.s3a.secret.key=hunter2,spark.executor.cores=2")
    assert cli.main(["--root", "s3://alice:hunter2@bucket/hops", "settings"]) == 0
    out = capsys.readouterr().out
    assert "heartbeat_s = 7.0   (environment variable HOPSML_HEARTBEAT_S)" in out
    assert "root = s3://bucket/hops   (argument)" in out
    assert "spark.executor.cores" in out and "hunter2" not in out
    assert "    HOPSML_LATE_RANK_S, default 180: " in out
