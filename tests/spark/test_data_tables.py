"""The table job on a generated CSV with '?' values, spaces and malformed rows."""

import importlib.util
import json
import os

import numpy as np
import pytest

from hopsml import config
from hopsml.data import dataset as ds
from hopsml.data import samples
from hopsml.data.readers import reader
from hopsml.data.tables import prepare_table
from hopsml.formats import decode_example, read_records

pytestmark = pytest.mark.legacy


@pytest.fixture(scope="module")
def env(spark, tmp_path_factory):
    base = tmp_path_factory.mktemp("tables")
    csv = str(base / "iris.csv")
    counts = samples.write_table(csv)
    settings = config.load(environ={}, root=str(base / "root"), project="test", master="local[4]",
                           small_table_rows=0)   # the Spark job (test_data_tables_engines: both)
    return csv, settings, counts


@pytest.fixture(scope="module")
def filled(spark, env):
    csv, settings, counts = env
    summary = prepare_table(csv, "iris", label="species", missing="fill", standardize=True, one_hot=True,
                            shards=2, settings=settings, spark=spark)
    return summary


def _path(settings, name, *parts):
    return os.path.join(settings.root, "Projects", "test", "Datasets", name, *parts)


def test_counts_add_up_and_malformed_rows_are_kept(env, filled):
    _, settings, counts = env
    assert filled.read == counts["rows"]
    assert filled.rejected == counts["malformed"] == 2
    assert filled.dropped == 0  # missing values were filled
    assert filled.read == filled.written + filled.rejected + filled.dropped
    assert filled.rejected_reasons == {"malformed row (wrong number of fields)": 1,
                                       "unparsable number in column sepal_width": 1}
    folder = _path(settings, "iris", "_rejected")
    rows = [json.loads(line) for name in os.listdir(folder) if name.endswith(".jsonl")
            for line in open(os.path.join(folder, name))]
    assert sorted(r["reason"] for r in rows) == sorted(filled.rejected_reasons)
    assert any(r.get("line") == "5.0,3.4,1.5,setosa" for r in rows)
    assert filled.splits["train"] + filled.splits["test"] == filled.written


def test_drop_policy_counts_dropped_rows(spark, env):
    csv, settings, counts = env
    summary = prepare_table(csv, "iris_drop", label="species", settings=settings, spark=spark)
    assert summary.dropped == counts["missing"]
    assert summary.read == summary.written + summary.rejected + summary.dropped


def test_transform_is_fitted_on_train_and_saved(env, filled):
    _, settings, _ = env
    transform = json.load(open(_path(settings, "iris", "transform.json")))
    assert transform["label"]["classes"] and set(transform["label"]["classes"]) == {"setosa", "versicolor", "virginica"}
    assert transform["categorical"]["petal_size"]["categories"][0] in ("small", "medium", "large")
    train = next(iter(reader("iris", split="train", batch_size=10_000, fields=["sepal_length", "features", "label"],
                             settings=settings)))
    assert abs(train["sepal_length"].mean()) < 1e-6          # standardised with train statistics
    assert abs(train["sepal_length"].std() - 1) < 1e-6
    assert train["features"].shape == (filled.splits["train"], len(transform["features"]))
    assert train["features"].dtype == np.float32 and train["label"].dtype == np.int32


def test_split_is_reproducible(spark, env, filled):
    csv, settings, _ = env
    again = prepare_table(csv, "iris_again", label="species", missing="fill", standardize=True,
                          one_hot=True, shards=2, settings=settings, spark=spark)
    assert again.splits == filled.splits

    def test_rows(name):
        batch = next(iter(reader(name, split="test", batch_size=10_000, shuffle=False, settings=settings,
                                 fields=["features"])))
        return sorted(map(tuple, batch["features"][:, :4].round(5).tolist()))

    assert test_rows("iris") == test_rows("iris_again")


def _parquet_rows(url):
    """(features, label) of every row: petastorm's make_batch_reader where it is installed, else pyarrow."""
    if importlib.util.find_spec("petastorm") is None:
        import pyarrow.parquet as pq

        table = pq.read_table(url[len("file://"):], columns=["features", "label"]).to_pydict()
        return sorted((tuple(np.round(np.float32(f), 5)), int(y)) for f, y in zip(table["features"], table["label"]))
    from petastorm import make_batch_reader

    with make_batch_reader(url, reader_pool_type="dummy", schema_fields=["features", "label"]) as rows:
        return sorted((tuple(np.round(f, 5)), int(y)) for b in rows for f, y in zip(b.features, b.label))


def test_parquet_and_tfrecord_hold_the_same_rows(env, filled):
    _, settings, _ = env
    for split in ("train", "test"):
        parquet = _parquet_rows("file://" + _path(settings, "iris", "parquet", split))
        folder = _path(settings, "iris", "tfrecord", split)
        tf_rows = []
        for name in sorted(os.listdir(folder)):
            for record in read_records(os.path.join(folder, name)):
                example = decode_example(record)
                tf_rows.append((tuple(np.round(example["features"], 5)), int(example["label"][0])))
        assert sorted(tf_rows) == parquet and len(parquet) == filled.splits[split]


def test_ranks_split_the_table(env, filled):
    _, settings, _ = env
    seen = []
    for rank in range(2):
        seen += [tuple(r) for b in reader("iris", rank, 2, settings=settings) for r in b["features"].tolist()]
    assert len(seen) == filled.splits["train"]


def test_no_header_with_given_columns_and_stats(spark, env, tmp_path):
    csv, settings, _ = env
    lines = open(csv).read().splitlines()[1:]
    bare = tmp_path / "bare.csv"
    bare.write_text("\n".join(lines) + "\n")
    columns = ["sepal length", "sepal-width", "petal_length", "petal_width", "petal_size", "species"]
    summary = prepare_table(str(bare), "bare", label="species", header=False, columns=columns,
                            missing="fill", settings=settings, spark=spark)
    assert summary.read == len(lines) and summary.rejected == 2
    manifest = json.load(open(_path(settings, "bare", "dataset.json")))
    assert "sepal_length" in manifest["fields"] and "sepal_width" in manifest["fields"]
    stats = json.load(open(_path(settings, "bare", "stats.json")))
    width = next(c for c in stats["columns"] if c["name"] == "sepal_width")
    assert set(width["splits"]) == {"train", "test"}
    train = width["splits"]["train"]
    assert train["count"] + train["missing"] == summary.splits["train"]
    assert {"min", "max", "mean", "median", "std", "zeros", "distinct", "histogram"} <= set(train)
    size = next(c for c in stats["columns"] if c["name"] == "petal_size")
    assert size["splits"]["train"]["top"][0][0] in ("small", "medium", "large")


def test_unknown_label_is_a_clear_error(spark, env):
    csv, settings, _ = env
    with pytest.raises(ds.DatasetError, match="label column 'kind' is not among the columns"):
        prepare_table(csv, "bad", label="kind", settings=settings, spark=spark)


def test_a_table_on_an_s3_root(spark, env, filled, s3_endpoint):
    # The tasks write Parquet and TFRecord through the fs layer: an S3 root works without Spark's
    # Hadoop S3 connector, and the rows match the same job on a local root.
    from s3 import s3_root

    from hopsml.fs import Storage

    csv, local_settings, _ = env
    root = s3_root(s3_endpoint)
    settings = config.load(environ={}, root=root, project="test")
    summary = prepare_table(csv, "iris", label="species", missing="fill", standardize=True, one_hot=True,
                            shards=2, settings=settings, spark=spark)
    assert (summary.read, summary.written, summary.splits) == (filled.read, filled.written, filled.splits)
    storage = Storage(root)
    assert storage.exists("Projects/test/Datasets/iris/_SUCCESS")
    assert not any("staging" in name for name in storage.ls("Projects/test/Datasets"))

    def rows(config_):
        return sorted(tuple(np.round(r, 5)) for b in reader("iris", settings=config_, shuffle=False)
                      for r in b["features"].tolist())

    assert rows(settings) == rows(local_settings) and len(rows(settings)) == summary.splits["train"]


def _no_dataset(settings, name):
    folder = _path(settings, name)
    return not os.path.exists(os.path.join(folder, "_SUCCESS")) and not os.path.exists(folder)


def test_a_table_whose_every_row_is_rejected_fails_with_the_first_rows_and_a_hint(spark, env, tmp_path):
    _, settings, _ = env
    csv = tmp_path / "preamble.csv"   # scikit-learn's layout: a line before the header
    csv.write_text("150,4,setosa,versicolor\n5.1,3.5,1.4,0.2,setosa\n4.9,3.0,1.4,0.2,setosa\n"
                   "4.7,3.2,1.3,0.2,setosa\n")
    with pytest.raises(ds.RejectedInputError) as caught:
        prepare_table(str(csv), "all_bad", label="4", settings=settings, spark=spark)
    message = str(caught.value)
    assert "all 3 rows" in message and "5.1,3.5,1.4,0.2,setosa" in message
    assert "--skip-rows" in message and "--no-header" in message
    assert _no_dataset(settings, "all_bad")


def test_skip_rows_drops_the_lines_before_the_header(spark, env, tmp_path):
    _, settings, _ = env
    csv = tmp_path / "preamble.csv"
    body = "".join(f"{i * 0.1:.1f},{i % 3},{'ab'[i % 2]}\n" for i in range(12))
    csv.write_text("12,2,a,b\n# generated\nx,y,kind\n" + body)
    summary = prepare_table(str(csv), "skipped", label="kind", skip_rows=2, settings=settings, spark=spark)
    assert summary.read == 12 and summary.rejected == 0 and summary.written == 12


def test_strict_fails_on_a_rejected_row(spark, env):
    csv, settings, _ = env
    with pytest.raises(ds.RejectedInputError, match="rejected and strict=True"):
        prepare_table(csv, "strict", label="species", missing="fill", strict=True, settings=settings, spark=spark)
    assert _no_dataset(settings, "strict")


def test_statistics_count_the_rows_as_written(spark, env):
    csv, settings, counts = env
    summary = prepare_table(csv, "iris_stats", label="species", settings=settings, spark=spark)  # drops rows
    assert summary.dropped > 0
    stats = json.load(open(_path(settings, "iris_stats", "stats.json")))
    assert stats["rows"] == summary.splits
    for column in stats["columns"]:
        for split, entry in column["splits"].items():
            assert entry["count"] + entry["missing"] == summary.splits[split], column["name"]


def test_an_existing_dataset_is_refused_before_spark_is_used(env, filled):
    csv, settings, _ = env

    class NoSpark:
        def __getattr__(self, name):
            raise AssertionError(f"Spark used: {name}")

    with pytest.raises(ds.DatasetExistsError, match="already exists"):
        prepare_table(csv, "iris", label="species", settings=settings, spark=NoSpark())
    with pytest.raises(ds.DatasetError, match="does not exist"):
        prepare_table(csv + ".missing", "other", label="species", settings=settings, spark=NoSpark())


@pytest.mark.parametrize("wide", [True, False])
def test_a_large_table_takes_its_medians_from_a_sample_and_the_rest_from_every_row(spark, env, tmp_path,
                                                                                   monkeypatch, wide):
    """Over MEDIAN_SAMPLE rows a median comes from a sample of the rows (chosen by their hash) and distinct
    counts are estimated; counts, means and extremes stay exact, on the wide and the long aggregate. A table
    within MEDIAN_SAMPLE rows gets its exact median and distinct count."""
    from hopsml.data import stats

    if not wide:
        monkeypatch.setattr(stats, "WIDE_COLUMNS", 0)
    settings = env[1]
    csv = tmp_path / "large.csv"
    csv.write_text("x,y\n" + "".join(f"{i % 2000}.5,{i % 2}\n" for i in range(4000)))

    def train_x(name):
        prepare_table(str(csv), name, label="y", test_fraction=0.0, settings=settings, spark=spark)
        with open(_path(settings, name, "stats.json")) as handle:
            return next(c for c in json.load(handle)["columns"] if c["name"] == "x")["splits"]["train"]

    exact = train_x(f"medians_exact_{wide}")
    assert exact["median"] == 999.5 and exact["distinct"] == 2000
    monkeypatch.setattr(stats, "MEDIAN_SAMPLE", 1000)
    column = train_x(f"medians_sampled_{wide}")
    assert column["count"] == 4000 and column["min"] == 0.5 and column["max"] == 1999.5
    assert column["mean"] == pytest.approx(1000.0)
    assert 850 <= column["median"] <= 1150 and column["median"] != exact["median"]   # about 1000 values
    assert 1900 <= column["distinct"] <= 2100 and sum(column["histogram"]["counts"]) == 4000


def test_the_writers_histograms_count_the_values_as_read(spark, env, tmp_path):
    """The shard writers count the histograms on the rows as read, before missing values are filled."""
    from hopsml.data import stats

    settings = env[1]
    lines = ["x,k,y"] + [f"{'' if i % 5 == 0 else i * 0.75},{'ab'[i % 2]},{i % 2}" for i in range(60)]
    csv = tmp_path / "filled.csv"
    csv.write_text("\n".join(lines) + "\n")
    prepare_table(str(csv), "filled_histograms", label="y", missing="fill", test_fraction=0.0,
                  settings=settings, spark=spark)
    with open(_path(settings, "filled_histograms", "stats.json")) as handle:
        x = next(c for c in json.load(handle)["columns"] if c["name"] == "x")["splits"]["train"]
    present = np.array([i * 0.75 for i in range(60) if i % 5])
    assert x["histogram"]["counts"] == stats.histogram_counts(present, x["histogram"]["edges"]).tolist()
    assert sum(x["histogram"]["counts"]) == x["count"] == 48 and x["missing"] == 12
