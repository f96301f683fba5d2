"""The digits pipeline as a user runs it: prepare images -> all-reduce training that exports its model
-> registry -> batch inference on Spark -> a predictions dataset whose accuracy is the in-run one."""

import os
import shutil

import numpy as np
import pytest

from hopsml import cli, experiment, model
from hopsml.data import dataset as ds
from hopsml.data import prepare_images, reader, samples
from hopsml.examples import digits
from hopsml.fs import Storage
from hopsml.model.inference import PredictionError


def _train_good():
    return digits.train_on_dataset("digits", lr=0.5, epochs=4, batch_size=16, export_as="digits")


def _train_weak():
    return digits.train_on_dataset("digits", lr=0.001, epochs=1, batch_size=16)


@pytest.fixture(scope="module")
def pipeline(spark, tmp_path_factory):
    """Prepare 300 digits, train twice on 2 ranks: once exporting in the run, once exported afterwards."""
    tmp = tmp_path_factory.mktemp("model-pipeline")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("HOPSML_ROOT", str(tmp / "root"))
        patch.setenv("HOPSML_PROJECT", "test")
        patch.delenv("HOPSML_CONF", raising=False)
        samples.write_digits(str(tmp / "digits"), limit=300, size=16)
        prepared = prepare_images(str(tmp / "digits"), "digits", resize=(16, 16), crop=(12, 12), shards=4)
        good_logdir, good = experiment.allreduce(_train_good, name="digits-good", num_workers=2,
                                                 metric_key="accuracy")
        weak_logdir, weak = experiment.allreduce(_train_weak, name="digits-weak", num_workers=2,
                                                 metric_key="accuracy")
        weak_version = model.export(weak["model_file"], "digits", metrics={"accuracy": weak["accuracy"]})
        yield {"prepared": prepared, "good": good, "good_id": os.path.basename(good_logdir), "weak": weak,
               "weak_id": os.path.basename(weak_logdir), "weak_version": weak_version, "root": tmp / "root"}


def test_versions_link_the_run_that_trained_them_and_its_dataset(pipeline):
    good, weak = model.get_model("digits", 1), pipeline["weak_version"]
    assert good.experiment["id"] == pipeline["good_id"]  # exported inside the run
    assert good.metrics["accuracy"] == pipeline["good"]["accuracy"]
    assert weak.version == 2 and weak.experiment["id"] == pipeline["weak_id"]  # exported by the driver
    for version in (good, weak):
        assert [(d["name"], d["splits"], d["kind"]) for d in version.datasets] == [("digits", ["test", "train"],
                                                                                      "images")]
        assert [f["path"] for f in version.files] == ["model.npz"]
    assert pipeline["good"]["accuracy"] > pipeline["weak"]["accuracy"]
    assert model.get_best_model("digits", "accuracy", "max").version == 1
    assert model.get_best_model("digits", "accuracy", model.Metric.MIN).version == 2


def test_a_local_copy_of_the_newest_runs_model_is_linked_to_that_run(pipeline, tmp_path):
    project = pipeline["root"] / "Projects" / "test"  # a returned file is named relative to its project
    shutil.copy(project / pipeline["weak"]["model_file"], tmp_path / "weak.npz")
    shutil.copy(project / pipeline["good"]["model_file"], tmp_path / "good.npz")
    assert model.export(str(tmp_path / "weak.npz"), "copies").experiment["id"] == pipeline["weak_id"]
    assert model.export(str(tmp_path / "good.npz"), "copies").experiment is None  # not this session's newest run


def test_predictions_on_the_test_split_reproduce_the_in_run_accuracy(pipeline):
    best = model.get_best_model("digits", "accuracy", "max")
    summary = model.predict(best, "digits", digits.predict, split="test", batch_size=50)
    assert summary.name == "digits-digits-1-predictions"
    assert summary.splits == {"test": pipeline["prepared"].splits["test"]}
    assert summary.columns == ["label", "path", "prediction"]
    storage = Storage(str(pipeline["root"]))
    out = ds.DatasetDir.of("test", summary.name)
    assert storage.exists(out.success) and sorted(storage.read_json(out.manifest)["splits"]) == ["test"]
    rows = list(reader(summary.name, split="test", shuffle=False, batch_size=10_000,
                       fields=["prediction", "label", "path"]))
    predictions = np.concatenate([b["prediction"] for b in rows])
    labels = np.concatenate([b["label"] for b in rows])
    paths = np.concatenate([b["path"] for b in rows])
    assert len(set(paths)) == len(paths) == summary.splits["test"]  # every test row once
    assert float((predictions == labels).mean()) == pipeline["good"]["accuracy"]


def test_wrong_length_output_names_the_shard_and_leaves_no_dataset(pipeline):
    def short(model_path, batch):
        return np.zeros(len(batch["label"]) - 1, np.int64)

    with pytest.raises(PredictionError, match=r"returned \d+ values for 'prediction' for a batch of \d+ rows "
                                              r"in shard part-\d{5}\.parquet \(row group 0\)"):
        model.predict("digits:1", "digits", short, "bad", split="test")
    assert "bad" not in ds.list_names(Storage(str(pipeline["root"])), "test")


def test_models_and_predict_commands(pipeline, capsys, tmp_path):
    assert cli.main(["models", "list"]) == 0
    listing = capsys.readouterr().out
    assert "digits" in listing and pipeline["weak_id"] in listing
    assert cli.main(["models", "show", "digits"]) == 0
    assert pipeline["good_id"] in capsys.readouterr().out
    assert cli.main(["models", "show", "digits", "1"]) == 0
    assert "model.npz" in capsys.readouterr().out
    script = tmp_path / "my_predict.py"
    script.write_text("import numpy as np\n\ndef ones(model_path, batch):\n"
                      "    return {'one': np.ones(len(batch['image']), np.int8)}\n")
    assert cli.main(["predict", "digits", "digits", "--fn", f"{script}:ones", "--output", "ones",
                     "--split", "train", "--keep", "label"]) == 0
    assert "predictions 'ones' of model digits:2" in capsys.readouterr().out
    assert cli.main(["datasets", "list"]) == 0
    assert any(line.split()[:2] == ["ones", "predictions"] for line in capsys.readouterr().out.splitlines())
    rows = list(reader("ones", split="train", shuffle=False, fields=["one", "label"]))
    assert sum(len(b["one"]) for b in rows) == pipeline["prepared"].splits["train"]
    assert all((b["one"] == 1).all() for b in rows)
    assert cli.main(["predict", "digits", "digits", "--fn", "hopsml.examples.digits:predict",
                     "--best", "accuracy", "--split", "test", "--output", "best"]) == 0
    assert "model digits:1" in capsys.readouterr().out
    assert cli.main(["models", "show", "nope"]) == 1
    assert "no model 'nope'" in capsys.readouterr().err
