"""scikit-learn's bundled tables, written by pandas, prepare with every row pandas keeps.

pandas writes a float column of whole numbers as ``127.0``; such a column once was typed ``long``, its
text then cast to null and every row was dropped (wine, diabetes, digits, linnerud failed).
"""

import os

import numpy as np
import pyarrow.parquet as pq
import pytest

from hopsml import config
from hopsml.data.tables import prepare_table, sanitize
from hopsml.formats import decode_example, read_records

sklearn_datasets = pytest.importorskip("sklearn.datasets")

FRAMES = ("iris", "wine", "breast_cancer", "diabetes", "digits", "linnerud")


@pytest.fixture(scope="module")
def settings(tmp_path_factory):
    base = tmp_path_factory.mktemp("sklearn")
    return config.load(environ={}, root=str(base / "root"), project="test", master="local[4]",
                           small_table_rows=0)   # the Spark job (test_data_tables_engines: both)


def _frame(name):
    return getattr(sklearn_datasets, f"load_{name}")(as_frame=True).frame


def _folder(settings, name, *parts):
    return os.path.join(settings.root, "Projects", "test", "Datasets", name, *parts)


def _sorted_rows(matrix):
    return matrix[np.lexsort(matrix.T[::-1])]


def _parquet(settings, name, columns):
    tables = [pq.read_table(_folder(settings, name, "parquet", split), columns=columns) for split in ("train", "test")]
    return np.concatenate([np.column_stack([t.column(c).to_numpy().astype(np.float64) for c in columns])
                           for t in tables])


def _tfrecord(settings, name, columns):
    rows = []
    for split in ("train", "test"):
        folder = _folder(settings, name, "tfrecord", split)
        for shard in sorted(os.listdir(folder)):
            for record in read_records(os.path.join(folder, shard)):
                example = decode_example(record)
                rows.append([float(example[c][0]) for c in columns])
    return np.asarray(rows, dtype=np.float64)


@pytest.mark.parametrize("name", FRAMES)
def test_a_scikit_learn_frame_written_by_pandas_prepares_with_every_row(spark, settings, tmp_path, name):
    frame = _frame(name)
    csv = tmp_path / f"{name}.csv"
    frame.to_csv(csv, index=False)
    label = frame.columns[-1]
    summary = prepare_table(str(csv), name, label=label, settings=settings, spark=spark)

    expected = frame.dropna()
    assert summary.read == len(frame)
    assert summary.written == len(expected) and summary.rejected == 0 and summary.dropped == 0
    columns = [sanitize(c) for c in frame.columns[:-1]] + ["label"]
    want = _sorted_rows(expected.to_numpy(dtype=np.float64))
    parquet = _sorted_rows(_parquet(settings, name, columns))
    np.testing.assert_allclose(parquet, want, rtol=1e-12, atol=0)
    records = _sorted_rows(_tfrecord(settings, name, columns))   # float32 in tf.train.Example
    np.testing.assert_allclose(records, _sorted_rows(want.astype(np.float32).astype(np.float64)), rtol=1e-7)
