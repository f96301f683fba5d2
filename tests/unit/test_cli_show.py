"""`experiments show` and `datasets show` begin with a summary a person reads (--json gives the raw record),
and `models list` shows metrics with 4 significant digits, whole."""

import json
import os
import shutil

from hopsml import cli, config, layout, model
from hopsml.fs import Storage
from hopsml.tracking.record import ExperimentRecord

FIXTURE = os.path.join(os.path.dirname(os.path.dirname(__file__)), "fixtures", "modern", "digits")


def _record(settings, **fields):
    exp_dir = layout.ExperimentDir.of(settings.project, "app-1", 1)
    rec = ExperimentRecord(id=exp_dir.id, name="digits", app_id="app-1", run_id=1, **fields)
    Storage(settings.root).write_json(exp_dir.record, rec.to_dict())
    return exp_dir.id


def test_experiments_show_starts_with_a_readable_summary_and_json_gives_the_record(root, capsys):
    settings = config.load()
    exp_id = _record(settings, state="FINISHED", user="ada", module="hopsml.examples.digits", function="train",
                     start="2026-11-23T13:42:05.123+00:00", finished="2026-11-23T13:42:10.456+00:00",
                     duration=5.333, metric=0.9444444444, metric_key="accuracy", direction="max",
                     hyperparameters={"lr": 0.5, "epochs": 10},
                     results={"accuracy": 0.9444444444, "model_file": "Experiments/app-1_1/model.npz"},
                     versions={"python": "3.11.7", "hopsml": "0.9"}, spark_conf={"spark.master": "local[4]"})
    assert cli.main(["experiments", "show", exp_id]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0] == f"experiment {exp_id}: digits (FINISHED)"
    assert not out.lstrip().startswith("{") and '"state"' not in out
    fields = {line.split()[0]: " ".join(line.split()[1:]) for line in lines[1:] if line.startswith("  ") and
              line.split()}
    assert fields["function"] == "hopsml.examples.digits.train"
    assert fields["ran"] == "2026-11-23 13:42:05 to 2026-11-23 13:42:10 (5.3 s)"
    assert fields["metric"] == "accuracy = 0.9444 (max)"
    assert fields["hyperparameters"] == "lr=0.5, epochs=10"
    assert fields["results"] == "accuracy=0.9444, model_file=Experiments/app-1_1/model.npz"
    assert fields["versions"] == "python 3.11.7, hopsml 0.9"
    assert "files in " in out
    assert cli.main(["experiments", "show", exp_id, "--json"]) == 0
    raw = json.loads(capsys.readouterr().out)
    assert raw["metric"] == 0.9444444444 and raw["spark_conf"] == {"spark.master": "local[4]"}


def test_datasets_show_starts_with_a_readable_summary_and_json_gives_the_manifest(root, capsys):
    shutil.copytree(FIXTURE, root / "Projects" / "test" / "Datasets" / "digits")
    assert cli.main(["datasets", "show", "digits"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0] == "dataset digits (images), prepared 2026-11-23 11:29:58 from /tmp/tmplkpklcq5/digits in 3.8 s"
    assert not out.lstrip().startswith("{") and '"kind"' not in out
    fields = {line.split()[0]: " ".join(line.split()[1:]) for line in lines[1:] if line.startswith("  ") and
              line.split()}
    assert fields["splits"] == "train 9 rows (2 shards), test 3 rows (2 shards)"
    assert fields["counts"] == "read 12, written 12, rejected 0"
    assert fields["fields"] == "image uint8[8x8x3], label int32, label_text str, path str"
    assert fields["labels"] == "0, 1, 2, 3, 4, 5, 6, 7, 8, 9 (10)"
    assert fields["options"].startswith("resize=8x8, image_format=png, ")
    assert "files in " in out
    assert cli.main(["datasets", "show", "digits", "--json"]) == 0
    raw = json.loads(capsys.readouterr().out)
    assert raw["splits"]["train"]["rows"] == 9 and raw["source"] == "/tmp/tmplkpklcq5/digits"


def test_models_list_rounds_metrics_to_four_significant_digits_and_keeps_them_whole(root, tmp_path, capsys):
    (tmp_path / "m.npz").write_bytes(b"m")
    metrics = {"accuracy": 0.9444444444444, "loss": 0.269213456789, "precision_macro": 0.93333333333,
               "recall_macro": 0.9412345678}
    model.export(str(tmp_path / "m.npz"), "digits", metrics=metrics)
    assert cli.main(["models", "list"]) == 0
    row = capsys.readouterr().out.splitlines()[1]
    assert "accuracy=0.9444,loss=0.2692,precision_macro=0.9333,recall_macro=0.9412" in row and "…" not in row
    assert cli.main(["models", "show", "digits"]) == 0
    assert "accuracy=0.9444,loss=0.2692,precision_macro=0.9333,recall_macro=0.9412" in capsys.readouterr().out
