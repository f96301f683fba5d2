"""Malformed experiment records: `hopsml experiments list` shows them as BROKEN with the reason and
still lists the others; `show` says what is wrong instead of printing a traceback."""

import json
import math

import pytest

from hopsml import cli
from hopsml.fs import Storage
from hopsml.layout import ExperimentDir, join
from hopsml.tracking import record as records
from hopsml.tracking.record import BrokenRecord, ExperimentRecord

BAD = {
    "local-1_2": ("[1, 2]", "JSON list"),
    "local-1_3": ("null", "JSON null"),
    "local-1_4": ('{"id": "local-1_4", "name": "trunc', "not valid JSON"),
    "local-1_5": ('{"id": "local-1_5", "name": 7, "app_id": "local-1", "run_id": 5}', "'name'"),
    "local-1_6": ("", "empty"),
    "local-1_7": ('{"format_version": 99, "id": "local-1_7"}', "newer"),
}


@pytest.fixture
def project(root):
    storage = Storage(str(root))
    good = ExperimentRecord(id="local-1_1", name="good", app_id="local-1", run_id=1, state="FINISHED")
    storage.write_json(ExperimentDir.from_id("test", "local-1_1").record, good.to_dict())
    for exp_id, (text, _) in BAD.items():
        storage.write_text(ExperimentDir.from_id("test", exp_id).record, text)
    storage.makedirs(ExperimentDir.from_id("test", "local-1_8").path)  # claimed, never recorded
    return storage


def test_scan_reports_each_broken_record_with_its_reason(project):
    found = records.scan_records(project, "test")
    good = [r for r in found if isinstance(r, ExperimentRecord)]
    broken = {r.id: r.reason for r in found if isinstance(r, BrokenRecord)}
    assert [r.id for r in good] == ["local-1_1"]
    assert set(broken) == set(BAD) | {"local-1_8"}
    for exp_id, (_, why) in BAD.items():
        assert why in broken[exp_id], broken[exp_id]
    assert "no experiment.json" in broken["local-1_8"]
    assert [r.id for r in records.list_records(project, "test")] == ["local-1_1"]


def test_list_shows_broken_runs_and_still_lists_the_others(project, capsys):
    assert cli.main(["experiments", "list"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[1].startswith("local-1_1") and "good" in lines[1] and "FINISHED" in lines[1]
    for exp_id in BAD:
        assert any(line.startswith(exp_id) and "BROKEN" in line for line in lines), out
    assert "local-1_2: BROKEN: experiment.json holds a JSON list" in out
    assert cli.main(["experiments", "list", "--state", "broken"]) == 0
    assert "local-1_1" not in capsys.readouterr().out


@pytest.mark.parametrize("exp_id", sorted(BAD))
def test_show_says_what_is_wrong_without_a_traceback(project, capsys, exp_id):
    assert cli.main(["experiments", "show", exp_id]) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err and "BROKEN" in err and BAD[exp_id][1] in err
    assert "experiment.json" in err


def test_records_carry_a_format_version_and_nan_is_valid_json(root):
    storage = Storage(str(root))
    rec = ExperimentRecord(id="local-2_1", name="n", app_id="local-2", run_id=1, metric=math.nan,
                           hyperparameters={"lr": math.inf})
    path = ExperimentDir.from_id("test", "local-2_1").record
    storage.write_json(path, rec.to_dict())
    data = json.loads(storage.read_text(path), parse_constant=lambda c: pytest.fail(f"bare {c}"))
    assert data["format_version"] == records.FORMAT_VERSION == 1
    assert list(data)[0] == "format_version"
    assert data["metric"] == "nan" and data["hyperparameters"] == {"lr": "inf"}
    assert records.read_record(storage, "test", "local-2_1").format_version == 1


def test_records_without_format_version_are_read_as_version_1(root):
    storage = Storage(str(root))
    old = ExperimentRecord(id="local-3_1", name="old", app_id="local-3", run_id=1).to_dict()
    del old["format_version"]
    storage.write_json(ExperimentDir.from_id("test", "local-3_1").record, old)
    assert records.read_record(storage, "test", "local-3_1").name == "old"


def test_recorded_spark_conf_carries_no_credentials():
    conf = records.public_spark_conf([("spark.eventLog.dir", "s3a://AKIAXXX:s3cr3t@logs/spark"),
                                      ("spark.hadoop.fs.s3a.secret.key", "s3cr3t"),
                                      ("spark.master", "local[4]")])
    assert conf == {"spark.eventLog.dir": "s3a://logs/spark", "spark.master": "local[4]"}


def test_a_record_left_aside_by_a_cut_off_write_is_named(root, capsys):
    storage = Storage(str(root))
    exp = ExperimentDir.from_id("test", "local-4_1")
    rec = ExperimentRecord(id="local-4_1", name="aside", app_id="local-4", run_id=1).to_dict()
    storage.write_json(join(exp.path, ".experiment.json.old-0123"), rec)  # HDFS: renamed aside, then cut off
    (found,) = records.scan_records(storage, "test")
    assert isinstance(found, BrokenRecord) and ".experiment.json.old-0123" in found.reason
    assert cli.main(["experiments", "show", "local-4_1"]) == 1
    assert "rename" in capsys.readouterr().err
