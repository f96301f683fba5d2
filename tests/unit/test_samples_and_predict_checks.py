"""Names the CLI would write are checked before Spark starts: `hopsml predict` into an existing dataset,
and the quickstart's sample datasets over a dataset of the same name holding other data (refused and
kept, never replaced silently)."""

import json
import os
import shutil
import subprocess
import sys

import pytest

from hopsml import config
from hopsml.data import commands as data_commands
from hopsml.data.dataset import DatasetExistsError

FIXTURE = os.path.join(os.path.dirname(os.path.dirname(__file__)), "fixtures", "modern", "digits")

SCRIPT = """
import sys
from pyspark import SparkContext
from hopsml import cli, model

model.export(sys.argv[1], "digits", metrics={"accuracy": 0.9})
code = cli.main(["predict", "digits:1", "digits", "--fn", "hopsml.examples.digits:predict"])
print("exit", code)
print("spark started:", SparkContext._active_spark_context is not None)
"""


def _dataset(root, name, project="demo"):
    target = root / "Projects" / project / "Datasets" / name
    shutil.copytree(FIXTURE, target)
    return target


def test_predict_into_an_existing_dataset_fails_before_spark_starts(tmp_path):
    root = tmp_path / "root"
    _dataset(root, "digits")
    _dataset(root, "digits-digits-1-predictions")  # what an earlier predict wrote under the default name
    (tmp_path / "model.npz").write_bytes(b"weights")
    env = {"HOPSML_ROOT": str(root), "HOPSML_PROJECT": "demo", "PATH": "/usr/bin:/bin",
           "PYTHONPATH": os.environ.get("PYTHONPATH", "")}
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path / "model.npz")], capture_output=True,
                          text=True, cwd=tmp_path, env=env)
    assert done.stdout.splitlines()[-2:] == ["exit 1", "spark started: False"], done.stderr
    assert "dataset 'digits-digits-1-predictions' already exists" in done.stderr and "--overwrite" in done.stderr


def test_the_samples_refuse_a_dataset_of_that_name_with_other_data_and_keep_it(tmp_path):
    root = tmp_path / "root"
    existing = _dataset(root, "digits")
    before = (existing / "dataset.json").read_text()
    settings = config.load(environ={}, root=str(root), project="demo")
    with pytest.raises(DatasetExistsError, match=r"dataset 'digits' already exists .* prepared from "
                                                 r"'/tmp/.*not hopsml's bundled 'digits' sample.*--overwrite"):
        data_commands.prepare_samples(settings, str(tmp_path / "work"))
    with pytest.raises(DatasetExistsError, match="--overwrite"):
        data_commands.prepare_sample(settings, str(tmp_path / "work"), "digits")
    assert (existing / "dataset.json").read_text() == before and not (tmp_path / "work").exists()


def test_a_dataset_of_the_same_sample_is_reused(tmp_path):
    root = tmp_path / "root"
    existing = _dataset(root, "digits")
    manifest = json.loads((existing / "dataset.json").read_text())
    (existing / "dataset.json").write_text(json.dumps({**manifest, "source": data_commands.sample_source("digits")}))
    settings = config.load(environ={}, root=str(root), project="demo")
    said = data_commands.prepare_sample(settings, str(tmp_path / "work"), "digits")
    assert said.startswith("dataset 'digits' (hopsml-sample:digits, prepared 2026-11-23T11:29:58; ")
    assert said.endswith("is there already: reused")
    other_limit = data_commands.sample_source("digits", limit=300)
    assert other_limit != data_commands.sample_source("digits")  # a smaller sample is another source
