"""Training datasets on the Spark engine: planned in Spark and written by its tasks, with the rows, split
membership (seeded random and by time), fitted statistics, files and records the DuckDB path gives; and no rows
cross to the driver unless a reader asks for a pandas frame."""

from __future__ import annotations

import json
import os

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

pytest.importorskip("deltalake")
pytest.importorskip("duckdb")

from hopsml import config
from hopsml.errors import FeatureStoreError
from hopsml.featurestore.store import FeatureStore
from hopsml.featurestore.transformations import label_encoder, min_max_scaler, one_hot_encoder, udf

T0 = pd.Timestamp("2026-01-01", tz="UTC")
SPARK, DUCKDB = {"engine": "spark"}, {"engine": "duckdb"}


@pytest.fixture
def fs(spark, root):
    return FeatureStore(config.load())


def _groups(labels: int, seed: int = 3) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """Label rows (one per customer and minute), spend rows and profile rows; a few labels come before their
    customer's first profile, so `age` (whole numbers) has missing values after the join."""
    rng = np.random.default_rng(seed)
    customers = max(4, labels // 20)
    picked = rng.choice(customers * 2000, size=labels, replace=False)
    label = pd.DataFrame({"customer": picked // 2000, "ts": T0 + pd.to_timedelta(picked % 2000, unit="min"),
                          "target": rng.integers(0, 2, labels)})
    spend = pd.DataFrame({"customer": np.repeat(np.arange(customers), 3),
                          "ts": T0 + pd.to_timedelta(np.tile([0, 600, 1200], customers), unit="min"),
                          "spend": rng.gamma(2.0, 10.0, customers * 3).round(3)})
    profile = pd.DataFrame({"customer": np.arange(customers), "ts": T0 + pd.Timedelta(minutes=30),
                            "country": rng.choice(["SE", "DE", "FR"], customers),
                            "age": rng.integers(18, 80, customers)})
    return label, spend, profile


def _view(fs, labels: int = 120, name: str = "churn"):
    label, spend, profile = _groups(labels)
    groups = {}
    for group, frame in (("labels", label), ("spend", spend), ("profile", profile)):
        groups[group] = fs.create_feature_group(f"{name}_{group}", primary_key=["customer"], event_time="ts")
        groups[group].insert(frame)
    query = (groups["labels"].select(["ts", "target"]).join(groups["spend"].select(["spend"]))
             .join(groups["profile"].select(["country", "age"])))
    return fs.create_feature_view(name, query, labels=["target"],
                                  transformation_functions=[min_max_scaler("spend"), one_hot_encoder("country"),
                                                            label_encoder("age")])


@udf(float)
def doubled(spend):
    return spend * 2


def _files(fs, name: str) -> dict[str, bytes]:
    """The dataset's data files by path inside it (the records, whose names and fingerprints differ, apart)."""
    folder = os.path.join(fs.settings.root, "Projects", fs.project, "Datasets", name)
    out = {}
    for base, _, names in os.walk(folder):
        for file in names:
            rel = os.path.relpath(os.path.join(base, file), folder)
            if rel.startswith(("parquet", "tfrecord")) and not rel.endswith("_common_metadata"):
                with open(os.path.join(folder, rel), "rb") as f:
                    out[rel] = f.read()
    return out


def _close(a, b, path="") -> None:
    """Equal records, numbers to 1e-9 (Spark's and numpy's sums and interpolations may round differently)."""
    if isinstance(a, dict):
        assert isinstance(b, dict) and sorted(a) == sorted(b), (path, sorted(a), sorted(b))
        for key in a:
            _close(a[key], b[key], f"{path}/{key}")
    elif isinstance(a, list):
        assert isinstance(b, list) and len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b)):
            _close(x, y, f"{path}/{i}")
    elif isinstance(a, float) or isinstance(b, float):
        assert b == pytest.approx(a, rel=1e-9, abs=1e-12), path
    else:
        assert a == b, path


def test_spark_and_duckdb_write_the_same_training_datasets(fs):
    fv = _view(fs)
    splits = {
        "random": lambda options: fv.create_train_test_split(test_size=0.3, seed=11, shards=3,
                                                             read_options=options),
        "time": lambda options: fv.create_train_validation_test_split(
            train_start=T0, train_end=T0 + pd.Timedelta(minutes=900),
            validation_start=T0 + pd.Timedelta(minutes=900), validation_end=T0 + pd.Timedelta(minutes=1400),
            test_start=T0 + pd.Timedelta(minutes=1400), test_end=T0 + pd.Timedelta(days=2), shards=2,
            read_options=options),
        "none": lambda options: fv.create_training_data(shards=2, primary_key=True, event_time=True,
                                                        read_options=options)}
    for kind, create in splits.items():
        by_duckdb, by_spark = create(DUCKDB)[0], create(SPARK)[0]
        first, second = (fv.store.read_training_dataset(fv, v) for v in (by_duckdb, by_spark))
        assert second["rows"] == first["rows"] and all(first["rows"].values()), kind
        _close(first["transformation_functions"], second["transformation_functions"], kind)
        names = [fv.training_dataset_name(v) for v in (by_duckdb, by_spark)]
        files = [_files(fs, n) for n in names]
        assert sorted(files[0]) == sorted(files[1]), kind           # the same shards of the same splits
        for rel in sorted(files[0]):
            if rel.endswith(".parquet"):
                left, right = (pq.read_table(os.path.join(fs.settings.root, "Projects", fs.project, "Datasets", n,
                                                          rel)) for n in names)
                _same_table(left, right, f"{kind} {rel}")
            else:
                assert files[0][rel] == files[1][rel], (kind, rel)      # TFRecord shards byte for byte
        records = [_dataset_records(fs, n) for n in names]
        _close(records[0], records[1], kind)


def _same_table(left, right, where: str) -> None:
    """The same names, types and values in the same order (NaN, a missing value in a vector, equal to NaN)."""
    assert left.schema == right.schema, (where, [(a, b) for a, b in zip(left.schema, right.schema) if a != b])
    for name in left.column_names:
        a, b = left.column(name).combine_chunks(), right.column(name).combine_chunks()
        if name == "features":
            assert a.offsets.equals(b.offsets), (where, name)
            a, b = a.flatten(), b.flatten()
        assert np.array_equal(a.to_numpy(zero_copy_only=False), b.to_numpy(zero_copy_only=False),
                              equal_nan=a.type != "string"), (where, name, a[:5], b[:5])


def _dataset_records(fs, name: str) -> dict:
    folder = os.path.join(fs.settings.root, "Projects", fs.project, "Datasets", name)
    with open(os.path.join(folder, "dataset.json")) as f:
        manifest = json.load(f)
    with open(os.path.join(folder, "stats.json")) as f:
        stats = json.load(f)
    kept = {k: v for k, v in manifest.items() if k in ("kind", "fields", "default_fields", "label_field", "splits",
                                                         "counts", "options")}
    schemas = {}   # petastorm's metadata: the schema and the row groups per file (its unischema holds the name)
    for split in manifest["splits"]:
        schema = pq.read_schema(os.path.join(folder, "parquet", split, "_common_metadata"))
        schemas[split] = [str(schema.remove_metadata()), schema.metadata[b"dataset-toolkit.num_row_groups_per_file.v1"]]
    return {"manifest": kept, "stats": stats, "schemas": schemas}


def test_a_spark_version_reads_back_as_spark_frames_with_the_rows_duckdb_reads(fs):
    fv = _view(fs, name="reread")
    by_duckdb = fv.create_train_test_split(test_size=0.25, seed=4, shards=2, read_options=DUCKDB)[0]
    by_spark = fv.create_train_test_split(test_size=0.25, seed=4, shards=2, read_options=SPARK)[0]
    lazy = fv.get_train_test_split(by_spark, dataframe_type="spark", primary_key=True)
    assert all(type(frame).__name__ == "DataFrame" and hasattr(frame, "rdd") for frame in lazy)
    eager = fv.get_train_test_split(by_duckdb, primary_key=True)
    for spark_frame, frame in zip(lazy, eager):
        rows = spark_frame.toArrow().to_pandas()
        assert list(rows.columns) == list(frame.columns)
        pd.testing.assert_frame_equal(rows, frame, check_dtype=False)
    # pandas asked of a Spark version: the same frames as DuckDB's
    for frame, expected in zip(fv.get_train_test_split(by_spark, read_options=SPARK, primary_key=True), eager):
        pd.testing.assert_frame_equal(frame, expected, check_dtype=False)
    # in memory: Spark frames, with the statistics and vector names DuckDB's version records
    in_spark = fv.train_test_split(test_size=0.25, seed=4, dataframe_type="spark")
    in_duckdb = fv.train_test_split(test_size=0.25, seed=4, read_options=DUCKDB)
    assert in_spark[0].toArrow().num_rows == len(in_duckdb[0])
    records = [fs.read_training_dataset(fv, v) for v in fs.training_dataset_versions(fv)[-2:]]
    assert records[0]["features"] == records[1]["features"]
    _close(records[0]["statistics"], records[1]["statistics"], "in memory")
    # a user function is refused on Spark before any version is recorded, saying what to do
    own = fs.create_feature_view("reread_own", fv.query, labels=["target"], transformation_functions=[doubled("spend")])
    with pytest.raises(FeatureStoreError, match=r"'doubled' is a user function .*'engine': 'duckdb'"):
        own.create_training_data(read_options=SPARK)
    assert fs.training_dataset_versions(own) == []


def test_the_spark_path_brings_no_training_rows_to_the_driver(fs, spark, monkeypatch):
    """Every way a Spark DataFrame's rows reach the driver's Python is counted when the rows are training rows
    (they hold the label): creating a split training dataset on Spark brings none, statistics and counts only;
    reading it back as pandas brings exactly its rows, so the count sees rows when they do cross."""
    crossed: list[int] = []
    kind = type(spark.range(1))

    def noted(rows: int, columns) -> None:
        if "target" in columns:
            crossed.append(rows)

    def counted(name, measure):
        original = getattr(kind, name)

        def wrapper(self, *args, **kwargs):
            result = original(self, *args, **kwargs)
            noted(*measure(self, result))
            return result
        monkeypatch.setattr(kind, name, wrapper)

    counted("collect", lambda self, rows: (len(rows), rows[0].asDict() if rows else self.columns))
    counted("tail", lambda self, rows: (len(rows), self.columns))
    counted("toArrow", lambda self, table: (table.num_rows, table.column_names))
    counted("toPandas", lambda self, frame: (len(frame), list(frame.columns)))
    counted("toLocalIterator", lambda self, rows: (0 if rows is None else 1, self.columns))
    fv = _view(fs, labels=600, name="guarded")
    version = fv.create_train_test_split(test_size=0.25, seed=8, read_options=SPARK)[0]
    assert crossed == []
    assert fv.training_dataset_name(version)
    x_train, x_test, _, _ = fv.get_train_test_split(version, read_options=SPARK)
    assert sum(crossed) == len(x_train) + len(x_test) == 600
