"""A small table prepared without Spark (hopsml.data.tables.local) gives what the Spark job gives: the same
files byte for byte (Parquet, TFRecord, transform, labels, statistics, so the same fingerprints), the same
summary; and input it cannot read with certainty goes to Spark."""

import dataclasses
import json
import os

import numpy as np
import pytest
from table_helpers import dataset_folder, project_settings

from hopsml.data.tables import TableOptions, prepare_table
from hopsml.data.tables.local import LocalTableJob
from hopsml.fs import Storage


@pytest.fixture(scope="module")
def roots(tmp_path_factory):
    """Two projects: one whose tables Spark prepares, one whose small tables are prepared in this process."""
    return project_settings(tmp_path_factory, "by_spark"), project_settings(tmp_path_factory, "local", 50_000)


def _table(rows=240, seed=3):
    """Text with what the table tests cover: padded fields, na values, a nameless first column (row names),
    whole numbers, doubles with exponents and -0.0, booleans, categories with and without missing values."""
    rng = np.random.default_rng(seed)
    lines = [",n,x, big ,flag,kind,city,label"]
    for i in range(rows):
        x = rng.choice(["1.5e3", "-0.0", f"{rng.normal():.6f}", "NA", "?", f"{rng.normal() * 1e-5:.9g}", "3"])
        big = rng.choice([str(int(rng.integers(-10**15, 10**15))), "", "7"])
        flag = rng.choice(["true", "False", "TRUE", "n/a"])
        kind = rng.choice(["red", "green", " blue ", "grey", "NULL"])
        lines.append(f"{i},{rng.integers(0, 50)},{x}, {big} ,{flag},{kind},{rng.choice(['oslo', 'rome'])},"
                     f"{rng.choice(['yes', 'no', 'maybe'])}")
    return "\n".join(lines) + "\n"


def _files(settings, name):
    """Every file of a dataset by its path, the manifest without when and how long."""
    folder = dataset_folder(settings, name)
    out = {}
    for parent, _, files in os.walk(folder):
        for file in files:
            rel = os.path.relpath(os.path.join(parent, file), folder)
            with open(os.path.join(parent, file), "rb") as handle:
                data = handle.read()
            if rel == "_SUCCESS":
                continue
            if rel == "dataset.json":
                manifest = json.loads(data)
                for key in ("created", "seconds"):
                    manifest.pop(key)
                data = manifest
            out[rel] = data
    return out


def _both(spark, roots, tmp_path, text, **options):
    """The same table prepared by Spark and without it: their summaries and files."""
    src = tmp_path / "table.csv"
    src.write_text(text)
    outcomes = []
    for settings in roots:
        summary = prepare_table(str(src), "t", overwrite=True, settings=settings, spark=spark, **options)
        outcomes.append((summary, _files(settings, "t")))
    (by_spark, spark_files), (local, local_files) = outcomes
    assert (by_spark.engine, local.engine) == ("spark", "local")
    assert dataclasses.replace(local, seconds=0, uri="", engine="spark") == dataclasses.replace(
        by_spark, seconds=0, uri="")
    assert sorted(local_files) == sorted(spark_files)
    for rel in spark_files:
        assert local_files[rel] == spark_files[rel], rel
    manifest = local_files["dataset.json"]
    assert manifest["fingerprints"]["dataset"] == spark_files["dataset.json"]["fingerprints"]["dataset"]
    return local, json.loads(local_files["stats.json"])


def test_both_engines_write_the_same_bytes(spark, roots, tmp_path):
    summary, stats = _both(spark, roots, tmp_path, _table(), label="label", shards=3)
    assert summary.left_out == {"": "the header gives column 1 no name: row names or an index"}
    assert stats["types"] == {"c0": "long", "n": "long", "x": "double", "big": "long", "flag": "boolean",
                              "kind": "string", "city": "string", "label": "string"}
    assert summary.dropped > 0 and summary.written + summary.dropped == summary.read == 240


def test_both_engines_fit_the_same_transform(spark, roots, tmp_path):
    """The fit reads the means and spreads: standardized, filled and one-hot features are the same bits."""
    summary, stats = _both(spark, roots, tmp_path, _table(seed=5), label="label", standardize=True,
                           missing="fill", one_hot=True, test_fraction=0.3, seed=123456789012)
    assert summary.dropped == 0 and summary.splits["test"] > 0


def test_both_engines_read_given_names_types_and_preambles(spark, roots, tmp_path):
    """No header (columns=), a preamble line, another delimiter, types given (a long written 4.0, a 1/0
    boolean), a category given, a column excluded, a numeric label."""
    lines = ["preamble line"] + [f"{i % 7};{i % 3 + 0.0};{i % 2};{i * 0.25};c{i % 4};{i % 5}" for i in range(150)]
    summary, stats = _both(spark, roots, tmp_path, "\n".join(lines) + "\n", label="y", header=False,
                           columns=["a", "b", "flag", "v", "cat", "y"], delimiter=";", skip_rows=1,
                           schema={"b": "long", "flag": "boolean"}, categorical=["a"], exclude=["cat"])
    assert stats["types"]["b"] == "long" and stats["types"]["a"] == "string"
    assert summary.read == 150 and summary.left_out == {"cat": "excluded"}


@pytest.mark.parametrize("text, why", [
    ('a,b,label\n1,"x, y",0\n', "quotes"),
    ("a,b,label\n1,2,0\n3,0\n", "another number of fields"),
    ("a,b,label\n1,2,0\n2,x,1\n3,4,0\n", "would be rejected"),
    ("a,b,label\n1,Infinity,0\n2,3,1\n", "only to Java"),
    ("a,b,label\n1,2.5f,0\n2,3,1\n", "only to Java"),
    ("a,b,label\n1,,0\n2,,1\n", "no row is left"),
    ("a,b,label\n" + "1,2,0\n" * 11, "more than 10 rows"),
])
def test_what_the_local_engine_leaves_to_spark(roots, tmp_path, caplog, text, why):
    """Input the local engine is not certain of goes to Spark, and the log says why."""
    src = tmp_path / "t.csv"
    src.write_text(text)
    settings = dataclasses.replace(roots[1], small_table_rows=10)
    with caplog.at_level("INFO", logger="hopsml.data.tables.local"):
        job = LocalTableJob.of(str(src), Storage(settings.root), settings, "t", TableOptions(label="label"))
    assert job is None
    assert why in caplog.text


def test_more_rows_than_one_arrow_batch_go_to_spark(roots, tmp_path, monkeypatch, caplog):
    """Spark's shard writers get a large table's rows in several batches (a Parquet row group each): Spark's job."""
    from hopsml.data.tables import local

    monkeypatch.setattr(local, "ONE_BATCH_ROWS", 5)
    src = tmp_path / "t.csv"
    src.write_text("a,b,label\n" + "1,2,0\n" * 6)
    with caplog.at_level("INFO", logger="hopsml.data.tables.local"):
        job = LocalTableJob.of(str(src), Storage(roots[1].root), roots[1], "t", TableOptions(label="label"))
    assert job is None and "several batches" in caplog.text
