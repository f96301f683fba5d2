"""The model registry on a local root: versions, records, lineage, best model, download, errors."""

import json
import os

import numpy as np
import pytest

from hopsml import config, layout, model
from hopsml.fs import Storage
from hopsml.model.registry import ModelExistsError, ModelNotFoundError
from hopsml.tracking import lineage
from hopsml.tracking.record import ExperimentRecord
from hopsml.tracking.run_context import active_run


@pytest.fixture
def settings(root):
    return config.load()


def _model_file(tmp_path, name="model.npz", value=1.0):
    path = tmp_path / name
    np.savez(path, weights=np.full((3, 2), value, np.float32))
    return str(path)


def test_export_numbers_versions_and_records_files_metrics_and_user(settings, tmp_path, monkeypatch):
    monkeypatch.setenv("HOPSML_USER", "alice")
    first = model.export(_model_file(tmp_path), "digits", metrics={"accuracy": np.float32(0.5)})
    second = model.export(_model_file(tmp_path, value=2.0), "digits", metrics={"accuracy": 0.9},
                          description="better")
    assert (first.version, second.version) == (1, 2)
    storage = Storage(settings.root)
    mdir = layout.ModelDir.of("test", "digits", 2)
    record = json.loads((tmp_path / "root" / mdir.record).read_text())
    assert record["name"] == "digits" and record["version"] == 2 and record["user"] == "alice"
    assert record["metrics"] == {"accuracy": 0.9} and record["description"] == "better"
    assert record["files"] == [{"path": "model.npz", "size": os.path.getsize(tmp_path / "model.npz")}]
    assert record["experiment"] is None and record["datasets"] == []
    assert storage.exists(mdir.done)
    assert [mv.version for mv in model.versions("digits")] == [1, 2]
    assert model.get_model("digits").version == 2 and model.get_model("digits", "1")["version"] == 1
    assert [mv.ref for mv in model.list()] == ["digits:2"]


def test_a_folder_exports_its_contents_and_downloads_back(settings, tmp_path):
    src = tmp_path / "saved"
    (src / "variables").mkdir(parents=True)
    (src / "saved_model.pb").write_bytes(b"graph")
    (src / "variables" / "data").write_bytes(b"x" * 100)
    mv = model.export(str(src), "tf", metrics={"loss": 0.1})
    assert [f["path"] for f in mv.files] == ["saved_model.pb", "variables/data"]
    local = model.download_model("tf", local_dir=str(tmp_path / "out"))
    assert local == str(tmp_path / "out" / "tf" / "1")
    assert (tmp_path / "out/tf/1/variables/data").read_bytes() == b"x" * 100
    assert json.loads((tmp_path / "out/tf/1/.model.json").read_text())["version"] == 1
    with pytest.raises(ModelExistsError, match="overwrite=True"):
        model.download_model("tf", 1, local_dir=str(tmp_path / "out"))
    assert model.download_model("tf", 1, local_dir=str(tmp_path / "out"), overwrite=True) == local


def test_an_existing_version_is_replaced_only_with_overwrite(settings, tmp_path):
    model.export(_model_file(tmp_path), "m", model_version=3, metrics={"accuracy": 0.1})
    with pytest.raises(ModelExistsError, match="version 3 already exists"):
        model.export(_model_file(tmp_path), "m", model_version=3)
    model.export(_model_file(tmp_path, "other.npz"), "m", model_version=3, overwrite=True,
                 metrics={"accuracy": 0.2})
    mv = model.get_model("m", 3)
    assert [f["path"] for f in mv.files] == ["other.npz"] and mv.metrics == {"accuracy": 0.2}
    assert model.export(_model_file(tmp_path), "m").version == 4  # next after the highest
    hidden = [p for p in os.listdir(tmp_path / "root/Projects/test/Models/m") if p.startswith(".")]
    assert hidden == []  # no staging or replaced folder left behind


def test_a_half_copied_version_is_not_listed_but_its_number_is_not_reused(settings, tmp_path):
    model.export(_model_file(tmp_path), "m")
    os.makedirs(tmp_path / "root/Projects/test/Models/m/2")  # e.g. an interrupted copy on S3: no marker
    assert [mv.version for mv in model.versions("m")] == [1]
    assert model.export(_model_file(tmp_path), "m").version == 3


def test_best_model_by_metric_in_either_direction_with_hops_names(settings, tmp_path):
    for acc, loss in ((0.7, 0.3), (0.9, 0.5), (0.8, 0.1)):
        model.export(_model_file(tmp_path), "m", metrics={"accuracy": acc, "loss": loss})
    model.export(_model_file(tmp_path), "m")  # no metrics: never the best
    assert model.get_best_model("m", "accuracy", "max").version == 2
    assert model.get_best_model("m", "accuracy", model.Metric.MAX)["version"] == 2
    assert model.get_best_model("m", "loss", model.Metric.MIN).version == 3
    from hopsml.search.space import Direction

    assert model.get_best_model("m", "loss", Direction.MIN).version == 3
    with pytest.raises(ModelNotFoundError, match=r"metric 'f1'.*recorded metrics: accuracy, loss"):
        model.get_best_model("m", "f1", "max")
    with pytest.raises(model.ModelError, match="direction must be"):
        model.get_best_model("m", "accuracy", "up")


def test_unknown_names_versions_and_paths_say_what_exists(settings, tmp_path):
    model.export(_model_file(tmp_path), "m")
    with pytest.raises(ModelNotFoundError, match=r"no model 'x'.*models: m"):
        model.get_model("x")
    with pytest.raises(ModelNotFoundError, match=r"no version 5.*versions: 1"):
        model.get_model("m", 5)
    with pytest.raises(model.ModelError, match="does not exist"):
        model.export(str(tmp_path / "missing.npz"), "m")
    with pytest.raises(model.ModelError, match="metrics are numbers"):
        model.export(_model_file(tmp_path), "m", metrics={"accuracy": "high"})
    with pytest.raises(layout.InvalidNameError):
        model.export(_model_file(tmp_path), "../m")
    with pytest.raises(layout.InvalidNameError, match="whole numbers"):
        model.export(_model_file(tmp_path), "m", model_version=0)
    assert [mv.version for mv in model.versions("m")] == [1]


def test_export_inside_a_run_links_the_run_and_the_datasets_it_read(settings, tmp_path):
    storage = Storage(settings.root)
    run_dir = layout.ExperimentDir.of("test", "local-1", 1)
    with active_run(storage, run_dir) as ctx:
        lineage.record_dataset("digits", "/r/Datasets/digits", "train", {"kind": "images", "created": "t0"})
        lineage.record_dataset("digits", "/r/Datasets/digits", "test", {"kind": "images", "created": "t0"})
        mv = model.export(_model_file(tmp_path), "digits", metrics={"accuracy": 0.9})
        assert ctx.rank == 0
    assert mv.experiment["id"] == "local-1_1" and mv.experiment["trial"] is None
    assert mv.experiment["logdir"] == storage.uri(run_dir.path)
    assert mv.datasets == [{"name": "digits", "uri": "/r/Datasets/digits", "splits": ["test", "train"],
                            "kind": "images", "created": "t0"}]


def test_driver_export_of_a_file_in_a_run_folder_links_that_run(settings, tmp_path):
    storage = Storage(settings.root)
    run_dir = layout.ExperimentDir.of("test", "local-1", 2)
    storage.write_json(run_dir.record, ExperimentRecord(id=run_dir.id, name="iris", app_id="local-1",
                                                        run_id=2).to_dict())
    with active_run(storage, run_dir):
        lineage.record_dataset("iris", "/r/Datasets/iris", "train", {"kind": "table"})
    storage.upload(_model_file(tmp_path), run_dir.file("model.npz"))
    by_uri = model.export(storage.uri(run_dir.file("model.npz")), "iris")
    by_rel = model.export("Experiments/local-1_2/model.npz", "iris")  # relative to the project
    for mv in (by_uri, by_rel):
        assert mv.experiment["id"] == "local-1_2"
        assert mv.datasets[0]["name"] == "iris"
    explicit = model.export(_model_file(tmp_path), "iris", experiment_id="local-1_2")
    assert explicit.experiment["id"] == "local-1_2"
    with pytest.raises(Exception, match="no experiment 'local-9_9'"):
        model.export(_model_file(tmp_path), "iris", experiment_id="local-9_9")


@pytest.fixture(scope="module")
def s3_endpoint():
    from s3 import s3_server

    with s3_server() as endpoint:
        yield endpoint


@pytest.mark.parametrize("backend", ["file", "s3"])
def test_export_overwrite_and_download_on_other_backends(backend, tmp_path, request, monkeypatch):
    monkeypatch.delenv("HOPSML_CONF", raising=False)
    if backend == "s3":
        from s3 import s3_root

        root = s3_root(request.getfixturevalue("s3_endpoint"))
    else:
        root = f"file://{tmp_path}/root"
    settings = config.load(environ={}, root=root, project="p")
    storage = Storage(root)
    src = tmp_path / "saved"
    (src / "variables").mkdir(parents=True)
    (src / "saved_model.pb").write_bytes(b"graph")
    (src / "variables" / "data").write_bytes(b"v1")
    assert model.export(str(src), "tf", settings=settings).version == 1
    storage.upload(str(src), "Projects/p/Resources/tf-copy")  # a model already under the root
    second = model.export("Resources/tf-copy", "tf", metrics={"loss": 0.5}, settings=settings)
    assert second.version == 2 and [f["path"] for f in second.files] == ["saved_model.pb", "variables/data"]
    (src / "variables" / "data").write_bytes(b"v2")
    model.export(str(src), "tf", model_version=2, overwrite=True, metrics={"loss": 0.1}, settings=settings)
    assert [mv.version for mv in model.versions("tf", settings)] == [1, 2]
    assert [p for p in storage.ls("Projects/p/Models/tf") if p.rsplit("/", 1)[-1].startswith(".")] == []
    local = model.download_model("tf", local_dir=str(tmp_path / "out"), settings=settings)
    assert open(os.path.join(local, "variables", "data"), "rb").read() == b"v2"
    assert model.get_best_model("tf", "loss", "min", settings=settings).version == 2


def test_hops_signatures_other_project_and_ignored_synchronous_flags(settings, tmp_path):
    mv = model.export(_model_file(tmp_path), "m", None, False, {"accuracy": 0.5}, "shared",
                      True, 120, "other")  # hops' positional order, project last
    assert (mv.project, mv.version, mv.description) == ("other", 1, "shared")
    assert "Projects/other/Models/m/1" in mv.path
    with pytest.raises(ModelNotFoundError):
        model.get_model("m")  # not in this project
    assert model.get_model("m", 1, "other").metrics == {"accuracy": 0.5}
    local = model.download_model("m", 1, "other", local_dir=str(tmp_path / "out"))
    assert sorted(os.listdir(local)) == [".model.json", "model.npz"]


def test_a_model_file_named_model_json_is_kept_as_written_and_old_versions_still_read(settings, tmp_path):
    """XGBoost saves `model.json`: the registry's record must not take its place (it is `.model.json`); a version
    registered when the record was `model.json` is still listed, read and downloaded."""
    src = tmp_path / "xgb"
    src.mkdir()
    user_json = json.dumps({"learner": {"gradient_booster": {"trees": [1, 2, 3]}}, "version": [2, 1, 0]})
    (src / "model.json").write_text(user_json)
    mv = model.export(str(src), "churn", metrics={"auc": 0.8})
    folder = tmp_path / "root" / layout.ModelDir.of("test", "churn", 1).path
    assert (folder / "model.json").read_text() == user_json            # the user's bytes, untouched
    assert json.loads((folder / ".model.json").read_text())["name"] == "churn"
    assert [f["path"] for f in mv.files] == ["model.json"]
    local = model.download_model("churn", 1, local_dir=str(tmp_path / "out"))
    assert open(os.path.join(local, "model.json")).read() == user_json
    # a version written before the move: its record is model.json
    old = layout.ModelDir.of("test", "legacy", 1)
    storage = Storage(settings.root)
    storage.write_bytes(old.file("weights.bin"), b"w")
    storage.write_json(old.legacy_record, {"name": "legacy", "version": 1, "metrics": {"auc": 0.7},
                                           "files": [{"path": "weights.bin", "size": 1}]})
    storage.write_text(old.done, "done\n")
    assert model.get_model("legacy", 1).metrics == {"auc": 0.7}
    assert {mv.name for mv in model.list()} == {"churn", "legacy"}
    local = model.download_model("legacy", 1, local_dir=str(tmp_path / "out"))
    assert sorted(os.listdir(local)) == [".model.json", "weights.bin"]
    (src / ".model.json").write_text("{}")
    with pytest.raises(model.ModelError, match="'.model.json', the name of the registry's own file"):
        model.export(str(src), "churn")
