"""Rank-side pieces of the data package, without Spark."""

import io
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pytest

from hopsml.data import dataset as ds
from hopsml.data.codec import CellColumn, ShapeMismatchError, decode_column, encode_cell, npy_header
from hopsml.data.readers import _Batcher, _prefetch
from hopsml.data.stats import categorical_summary, numeric_summary, render_html
from hopsml.data.tables import sanitize
from hopsml.fs import Storage


def test_cells_are_np_save_bytes_and_decode_as_one_array():
    images = np.random.default_rng(0).integers(0, 256, (5, 4, 3, 3), dtype=np.uint8)
    cells = [encode_cell(image) for image in images]
    for image, cell in zip(images, cells):
        buffer = io.BytesIO()
        np.save(buffer, image)
        assert buffer.getvalue() == cell
    column = pa.chunked_array([pa.array(cells[:2], pa.binary()), pa.array(cells[2:], pa.binary())])
    np.testing.assert_array_equal(decode_column(column, (4, 3, 3)), images)
    np.testing.assert_array_equal(decode_column(pa.array(cells, pa.binary()).slice(1, 3), (4, 3, 3)), images[1:4])
    with pytest.raises(ShapeMismatchError):
        decode_column(pa.array(cells, pa.binary()), (3, 4, 3))
    assert len(npy_header((4, 3, 3))) % 64 == 0


def test_cell_column_builds_the_same_cells_without_a_copy_per_row():
    images = np.random.default_rng(1).integers(0, 256, (7, 4, 3, 3), dtype=np.uint8)
    column = CellColumn((4, 3, 3), capacity=2)   # grows twice on the way
    for image in images[:5]:
        column.append(image)
    first = column.take()
    assert first.to_pylist() == [encode_cell(image) for image in images[:5]]
    for image in images[5:]:
        column.append(image)
    np.testing.assert_array_equal(decode_column(column.take(), (4, 3, 3)), images[5:])
    np.testing.assert_array_equal(decode_column(first, (4, 3, 3)), images[:5])  # still intact
    assert len(column.take()) == 0
    with pytest.raises(ShapeMismatchError, match=r"shape \(4, 3, 3\)"):
        column.append(images[0].reshape(3, 4, 3))


def test_batcher_cuts_equal_batches_across_chunks():
    batcher = _Batcher(4)
    out = []
    for start, stop in ((0, 3), (3, 10), (10, 11)):
        out += list(batcher.add({"x": np.arange(start, stop)}))
    rest = batcher.rest()
    assert [len(b["x"]) for b in out] == [4, 4] and len(rest["x"]) == 3
    np.testing.assert_array_equal(np.concatenate([b["x"] for b in out] + [rest["x"]]), np.arange(11))


def test_prefetch_passes_items_and_errors():
    assert list(_prefetch(iter(range(5)))) == list(range(5))

    def broken():
        yield 1
        raise ValueError("boom")

    with pytest.raises(ValueError, match="boom"):
        list(_prefetch(broken()))


def test_readers_import_without_pyspark():
    code = ("import sys; sys.modules['pyspark'] = None\n"
            "import hopsml.data, hopsml.data.readers, hopsml.data.stats, hopsml.data.codec\n"
            "from hopsml.data import reader\n"
            "assert 'pyspark.sql' not in sys.modules\n")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_staged_dataset_appears_only_on_success(tmp_path):
    storage = Storage(str(tmp_path))
    with pytest.raises(RuntimeError):
        with ds.staged(storage, "p", "broken", overwrite=False) as stage:
            storage.write_text(stage.manifest, "{}")
            raise RuntimeError("job failed")
    assert storage.ls("Projects/p/Datasets") == []
    with ds.staged(storage, "p", "good", overwrite=False) as stage:
        storage.write_json(stage.manifest, {"kind": "images"})
    assert ds.list_names(storage, "p") == ["good"]
    assert storage.exists("Projects/p/Datasets/good/_SUCCESS")
    with pytest.raises(ds.DatasetExistsError):
        with ds.staged(storage, "p", "good", overwrite=False):
            pass
    with pytest.raises(ds.DatasetNotFoundError, match="finished datasets: good"):
        ds.open_dataset(storage, "p", "other")


def test_stats_summaries_and_page():
    numbers = numeric_summary([0, 1, 2, 3, 10], missing=2)
    assert numbers["zeros"] == 1 and numbers["median"] == 2 and numbers["missing"] == 2
    assert sum(numbers["histogram"]["counts"]) == 5
    top = categorical_summary({"a": 3, "b": 5})
    assert top["top"][0] == ["b", 5] and top["distinct"] == 2
    page = render_html({"kind": "table", "splits": ["train", "test"], "rows": {"train": 5, "test": 0},
                        "columns": [{"name": "x<y", "type": "numeric", "splits": {"train": numbers}}]})
    assert "<svg" in page and "x&lt;y" in page and "<script" not in page


def test_sanitize_names():
    assert sanitize("marital-status") == "marital_status"
