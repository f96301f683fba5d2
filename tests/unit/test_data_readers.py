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


def test_a_parquet_shard_of_several_row_groups_keeps_every_image(tmp_path):
    """Each row group is written from its own cell buffer: every image lands in its group, in order."""
    import pyarrow.parquet as pq

    from hopsml.data.shards import ParquetShard

    images = np.random.default_rng(2).integers(0, 256, (7, 4, 3, 3), dtype=np.uint8)
    schema = pa.schema([("image", pa.binary()), ("label", pa.int32())])
    path = str(tmp_path / "part.parquet")
    shard = ParquetShard(lambda: path, schema, rows_per_group=3, cells={"image": (4, 3, 3)},
                         compression={"image": "none", "label": "snappy"})
    for i, image in enumerate(images):
        shard.add({"image": image, "label": i})
    assert shard.close() == 3
    table = pq.read_table(path)
    assert pq.ParquetFile(path).num_row_groups == 3 and table["label"].to_pylist() == list(range(7))
    np.testing.assert_array_equal(decode_column(table["image"], (4, 3, 3)), images)


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


def _uneven_table(tmp_path, group_rows=(10, 3, 7, 2)):
    """A finished 'table' dataset whose row groups make rank 0 of 2 hold 17 rows and rank 1 hold 5."""
    import pyarrow.parquet as pq

    from hopsml import config
    from hopsml.data.readers import reader as make_reader

    storage = Storage(str(tmp_path))
    with ds.staged(storage, "p", "uneven", overwrite=False) as stage:
        folder = storage.path(stage.parquet("train"))
        storage.makedirs(stage.parquet("train"))
        start = 0
        for i, rows in enumerate(group_rows):
            values = np.arange(start, start + rows)
            table = pa.table({"x": values.astype(np.float32), "label": values.astype(np.int64)})
            pq.write_table(table, f"{folder}/part-{i:05d}.parquet", row_group_size=rows)
            start += rows
        storage.write_json(stage.manifest, {
            "kind": "table", "name": "uneven", "fields": {"x": {"dtype": "float32", "shape": []},
                                                         "label": {"dtype": "int64", "shape": []}},
            "default_fields": ["x", "label"], "splits": {"train": {"rows": start, "parquet": "parquet/train"}}})
    settings = config.load(environ={}, root=str(tmp_path), project="p")

    def read(rank, **kwargs):
        return make_reader("uneven", rank, 2, settings=settings, **kwargs)

    return read


def test_equal_steps_gives_every_rank_the_same_number_of_batches(tmp_path):
    read = _uneven_table(tmp_path)
    # Without it the ranks disagree (17 rows -> 5 batches of 4, 5 rows -> 2): a per-batch all-reduce would hang.
    assert [len(list(read(r, batch_size=4))) for r in range(2)] == [5, 2]
    for mode, steps in ((True, 2), ("min", 2), ("max", 5)):
        counts = [len(list(read(r, batch_size=4, epochs=3, equal_steps=mode))) for r in range(2)]
        assert counts == [3 * steps] * 2, mode
        assert [len(read(r, batch_size=4, equal_steps=mode)) for r in range(2)] == [steps] * 2
    # 'max' repeats the short shard's own rows; it never takes another rank's.
    seen = np.concatenate([b["label"] for b in read(1, batch_size=4, equal_steps="max", shuffle=False)])
    assert len(seen) > 5 and set(seen) == {10, 11, 12, 20, 21}
    # 'min' on the long shard: the first rows of the epoch, in batches of the full size.
    first = [b["label"] for b in read(0, batch_size=4, equal_steps="min", shuffle=False)]
    assert [len(b) for b in first] == [4, 4]
    np.testing.assert_array_equal(np.concatenate(first), np.arange(8))


def test_equal_steps_is_checked(tmp_path):
    from hopsml.errors import SettingsError

    read = _uneven_table(tmp_path)
    with pytest.raises(SettingsError, match="equal_steps='most'"):
        read(0, equal_steps="most")
    with pytest.raises(ds.DatasetError, match="no batch of 8 rows"):
        list(read(1, batch_size=8, drop_last=True, equal_steps="max"))


@pytest.mark.parametrize("era", ["legacy", "modern"])
@pytest.mark.parametrize("name", ["digits", "iris"])
def test_the_manifest_dataclass_reads_and_writes_the_json_on_disk_unchanged(era, name, tmp_path):
    import json
    from pathlib import Path

    from hopsml.data.manifest import Manifest
    from hopsml.fs import Storage

    on_disk = json.loads((Path(__file__).parents[1] / "fixtures" / era / name / "dataset.json").read_text())
    manifest = Manifest.from_json(on_disk)
    assert manifest.kind in ("images", "table") and manifest.fields and manifest.splits
    assert manifest.to_json() == on_disk
    storage = Storage(str(tmp_path))
    manifest.write(storage, "dataset.json")
    assert storage.read_json("dataset.json") == on_disk and Manifest.read(storage, "dataset.json") == manifest


def test_a_manifest_without_fields_is_a_clear_error():
    from hopsml.data.dataset import DatasetError
    from hopsml.data.manifest import Manifest

    with pytest.raises(DatasetError, match="no fields object.*prepare the dataset again"):
        Manifest.from_json({"kind": "table", "splits": {}}, "x/dataset.json")


def test_unknown_manifest_keys_are_kept_and_predictions_write_no_labels():
    from hopsml.data.manifest import Manifest

    data = {"format_version": 1, "kind": "predictions", "name": "p", "created": "c", "source": "d",
            "source_uri": "/r/d", "model": {"name": "m", "version": 1, "path": "/m"}, "options": {},
            "fields": {"prediction": {"dtype": "int64", "shape": []}}, "default_fields": ["prediction"],
            "label_field": None, "splits": {"test": {"rows": 3, "parquet": "parquet/test", "shards": 1}},
            "counts": {"read": 3, "written": 3, "rejected": 0}, "seconds": 0.5, "from_the_future": [1]}
    manifest = Manifest.from_json(data)
    assert manifest.extra == {"from_the_future": [1]} and manifest.to_json() == data
