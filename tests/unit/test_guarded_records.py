"""One malformed record of any kind (experiment, dataset, model, serving, feature group, feature view) is listed as
BROKEN with its reason and the rest of the listing works; and a path a record names (server.json's log) cannot
point the CLI at a file outside the project and the log_dir setting."""

from __future__ import annotations

import json

import pytest

from hopsml import cli, layout
from hopsml.data import dataset as ds
from hopsml.fs import Storage
from hopsml.layout import ExperimentDir
from hopsml.records import BrokenRecordError, Shape, parse_record
from hopsml.serving import definition as defs
from hopsml.serving.server import state as states
from hopsml.tracking.record import ExperimentRecord

PROJECT = "test"
DEEP = b"[" * 100_000 + b"]" * 100_000          # json.loads raises RecursionError on it
SHALLOW_DEEP = b'{"a": ' * 200 + b"1" + b"}" * 200   # parses, but nests deeper than any record may


def _cli(capsys, *argv: str) -> tuple[int, str]:
    code = cli.main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out + captured.err


def test_the_guarded_reader_names_every_reason():
    shape = Shape("thing.json", required=("name",), types={"name": (str,), "n": (int,)})
    for raw, why in [(DEEP, "nested deeper than 64"), (SHALLOW_DEEP, "nested deeper than 64"), (b"", "empty"),
                     (b'{"name": "x', "not valid JSON"), (b"[1]", "JSON list, not an object"),
                     (b'{"n": 1}', "lacks 'name'"), (b'{"name": "x", "n": true}', "'n' is a boolean, not a number"),
                     (b"\xff\xfe", "not valid JSON")]:
        with pytest.raises(BrokenRecordError, match=why):
            parse_record(raw, shape)
    assert parse_record(b'{"name": "x", "n": 2}', shape) == {"name": "x", "n": 2}


def test_a_record_larger_than_the_cap_is_broken_without_being_parsed(root):
    from hopsml.records import read_record

    storage = Storage(str(root))
    storage.write_bytes("big.json", b'{"name": "' + b"x" * 2000 + b'"}')
    with pytest.raises(BrokenRecordError, match="more than a record may hold") as caught:
        read_record(storage, "big.json", Shape("big.json"), max_bytes=1000)
    assert str(root) in str(caught.value) and "repair it by hand" in str(caught.value)


@pytest.fixture
def experiments(root):
    storage = Storage(str(root))
    good = ExperimentRecord(id="local-1_1", name="good", app_id="local-1", run_id=1, state="FINISHED")
    storage.write_json(ExperimentDir.from_id(PROJECT, "local-1_1").record, good.to_dict())
    storage.write_bytes(ExperimentDir.from_id(PROJECT, "local-1_2").record, DEEP)
    storage.write_bytes(ExperimentDir.from_id(PROJECT, "local-1_3").record, SHALLOW_DEEP)
    return storage


def test_a_deeply_nested_experiment_json_is_broken_and_the_rest_lists(experiments, capsys):
    code, out = _cli(capsys, "experiments", "list")
    assert code == 0, out
    assert "local-1_2: BROKEN: experiment.json is nested deeper than 64 levels" in out
    assert "local-1_3: BROKEN: experiment.json is nested deeper than 64 levels" in out
    assert any(line.startswith("local-1_1") and "FINISHED" in line for line in out.splitlines()), out
    code, out = _cli(capsys, "experiments", "show", "local-1_1")   # it reads the others' records too
    assert code == 0 and "experiment local-1_1: good (FINISHED)" in out, out
    code, out = _cli(capsys, "experiments", "show", "local-1_2")
    assert code == 1 and "Traceback" not in out and "BROKEN: experiment.json is nested deeper" in out, out


def _dataset(storage: Storage, name: str, manifest: bytes) -> None:
    ddir = ds.DatasetDir.of(PROJECT, name)
    storage.write_bytes(ddir.manifest, manifest)
    storage.write_text(ddir.success, "done\n")


GOOD_MANIFEST = json.dumps({"kind": "table", "name": "iris", "fields": {"x": {"dtype": "float32", "shape": []}},
                            "splits": {"train": {"rows": 120}}, "counts": {"read": 120}}).encode()
BAD_MANIFESTS = {"deep": (DEEP, "nested deeper than 64 levels"),
                 "alist": (b"[1, 2]", "dataset.json holds a JSON list, not an object"),
                 "nosplits": (b'{"fields": {}}', "dataset.json lacks 'splits'"),
                 "badsplit": (b'{"fields": {}, "splits": {"train": 5}}', "split 'train' is not an object"),
                 "badcounts": (b'{"fields": {}, "splits": {}, "counts": [1]}', "field 'counts' is a list")}


def test_a_bad_dataset_json_is_listed_as_broken_not_dropped(root, capsys):
    storage = Storage(str(root))
    _dataset(storage, "iris", GOOD_MANIFEST)
    for name, (raw, _) in BAD_MANIFESTS.items():
        _dataset(storage, name, raw)
    code, out = _cli(capsys, "datasets", "list")
    assert code == 0, out
    assert any(line.startswith("iris ") and "table" in line and "train=120" in line for line in out.splitlines()), out
    for name, (_, why) in BAD_MANIFESTS.items():
        assert any(line.startswith(name + " ") and "BROKEN" in line for line in out.splitlines()), out
        assert f"{name}: BROKEN: " in out and why in out, (name, out)
    code, out = _cli(capsys, "datasets", "show", "deep")
    assert code == 1 and "Traceback" not in out and "nested deeper than 64 levels" in out
    assert storage.uri(ds.DatasetDir.of(PROJECT, "deep").manifest) in out


def _model(storage: Storage, name: str, version: int, record: bytes) -> None:
    mdir = layout.ModelDir.of(PROJECT, name, version)
    storage.write_bytes(mdir.record, record)
    storage.write_text(mdir.done, "done\n")


def test_a_bad_model_json_is_listed_as_broken(root, capsys):
    storage = Storage(str(root))
    _model(storage, "good", 1, json.dumps({"name": "good", "version": 1, "project": PROJECT,
                                           "metrics": {"accuracy": 0.9}}).encode())
    _model(storage, "deep", 1, DEEP)
    _model(storage, "typed", 2, b'{"name": "typed", "version": "2", "project": "test"}')
    code, out = _cli(capsys, "models", "list")
    assert code == 0, out
    assert any(line.startswith("good ") and "accuracy=0.9" in line for line in out.splitlines()), out
    assert "deep version 1: BROKEN: .model.json is nested deeper than 64 levels" in out
    assert "typed version 2: BROKEN: .model.json field 'version' is a string, not a number" in out


def _serving(storage: Storage, name: str, raw: bytes | None = None) -> None:
    if raw is None:
        defs.write(storage, PROJECT, defs.ServingDefinition(name=name, model_path="Models/good", model_name="good",
                                                            model_version=1, model_server=defs.PYTHON, id=1))
    else:
        storage.write_bytes(layout.ServingDir.of(PROJECT, name).definition, raw)


def test_a_bad_serving_json_is_listed_as_broken(root, capsys):
    storage = Storage(str(root))
    _serving(storage, "good")
    _serving(storage, "deep", DEEP)
    _serving(storage, "wrong", b'{"name": "wrong", "model_path": "Models/good", "model_name": "good", '
                               b'"model_version": 1, "model_server": "NOPE"}')
    code, out = _cli(capsys, "serving", "list")
    assert code == 0, out
    assert any(line.startswith("good ") and "good:1" in line for line in out.splitlines()), out
    assert "deep: BROKEN: serving.json is nested deeper than 64 levels" in out
    assert "wrong: BROKEN: serving.json does not define a serving: model_server 'NOPE'" in out
    assert defs.next_id(storage, PROJECT) == 2   # creating another serving still works
    from hopsml import serving

    assert [s.name for s in serving.get_all()] == ["good"]   # hops' get_all leaves the broken ones out


def test_a_bad_server_json_reads_as_unreadable_not_a_crash(root, capsys):
    storage = Storage(str(root))
    _serving(storage, "good")
    for raw in (DEEP, b'{"state": "Running", "supervisor": {"pid": "x"}}', b'{"restarts": [1]}'):
        storage.write_bytes(layout.ServingDir.of(PROJECT, "good").state, raw)
        st = states.read(storage, PROJECT, "good")
        assert st.state == states.STARTING and "server.json cannot be read" in (st.reason or "")
        code, out = _cli(capsys, "serving", "list")
        assert code == 0 and "good" in out, out


def _group(storage: Storage, name: str, raw: bytes) -> None:
    storage.write_bytes(layout.join(layout.feature_group_dir(PROJECT, name, 1), layout.GROUP_RECORD), raw)


def test_a_bad_feature_group_record_is_listed_as_broken(root, capsys):
    storage = Storage(str(root))
    _group(storage, "deep", DEEP)
    _group(storage, "typed", b'{"name": "typed", "version": 1, "primary_key": "id"}')
    code, out = _cli(capsys, "fs", "groups", "list")
    assert code == 0, out
    assert "deep version 1: BROKEN: _group.json is nested deeper than 64 levels" in out
    assert "typed version 1: BROKEN: _group.json field 'primary_key' is a string, not a list" in out
    storage.write_bytes(layout.join(layout.feature_view_dir(PROJECT, "v", 1), layout.VIEW_RECORD), DEEP)
    code, out = _cli(capsys, "fs", "views", "list")
    assert code == 0 and "v version 1: BROKEN: view.json is nested deeper than 64 levels" in out, out


SECRET = "the-secret-line-of-a-file-outside-the-root"


def test_a_log_path_in_server_json_outside_the_project_is_refused(root, tmp_path, monkeypatch, capsys):
    logs = tmp_path / "logs"
    monkeypatch.setenv("HOPSML_LOG_DIR", str(logs))
    storage = Storage(str(root))
    _serving(storage, "good")
    outside = tmp_path / "elsewhere" / "private.txt"
    outside.parent.mkdir()
    outside.write_text(SECRET + "\n")
    for named in (str(outside), f"{root}/Projects/{PROJECT}/../../../elsewhere/private.txt"):
        states.write(storage, PROJECT, "good", states.ServerState(state=states.FAILED, reason="crashed", log=named))
        for argv in (("serving", "status", "good"), ("serving", "logs", "good")):
            code, out = _cli(capsys, *argv)
            assert code == 0 and SECRET not in out, (argv, out)
    inside = logs / "serving" / PROJECT / "good.log"     # where log_dir keeps serving logs: still followed
    inside.parent.mkdir(parents=True)
    inside.write_text("the serving's own last line\n")
    states.write(storage, PROJECT, "good", states.ServerState(state=states.FAILED, reason="crashed", log=str(inside)))
    code, out = _cli(capsys, "serving", "logs", "good")
    assert code == 0 and "the serving's own last line" in out, out


def test_a_bad_job_json_is_listed_as_broken(root, tmp_path, capsys):
    from hopsml import jobs

    app = tmp_path / "app.py"
    app.write_text("print('hi')\n")
    jobs.create_job("good", str(app), job_type="PYTHON")
    storage = Storage(str(root))
    storage.write_bytes(layout.JobDir.of(PROJECT, "deep").record, DEEP)
    code, out = _cli(capsys, "jobs", "list")
    assert code == 0, out
    assert any(line.startswith("good ") for line in out.splitlines()), out
    assert "deep" in out and "BROKEN" in out and "job.json is nested deeper than 64 levels" in out
    from hopsml import config
    from hopsml.ui import create_app

    page = create_app(config.load()).test_client().get(f"/p/{PROJECT}/jobs/").get_data(as_text=True)
    assert 'data-id="deep" data-state="BROKEN"' in page and 'data-id="good"' in page
