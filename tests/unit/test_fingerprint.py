"""Dataset fingerprints: a committed dataset's manifest names the bytes of each file and split; a read
of changed files (changed, added, removed) warns naming the split and the file; a dataset prepared
before fingerprints still reads, fingerprinted at that read; a run's lineage keeps what it read."""

import json
import os
import shutil
import warnings

import pyarrow.parquet as pq
import pytest

from hopsml import config, layout
from hopsml.data import dataset as ds
from hopsml.data import fingerprint, readers
from hopsml.data.fingerprint import DatasetChangedWarning
from hopsml.fs import Storage
from hopsml.layout import RunDir
from hopsml.tracking import lineage
from hopsml.tracking.run_context import active_run

FIXTURE = os.path.join(os.path.dirname(os.path.dirname(__file__)), "fixtures", "modern", "digits")


@pytest.fixture
def digits(root):
    """The checked-in digits dataset (written before fingerprints existed) in the test's project."""
    settings = config.load()
    folder = Storage(settings.root).local_path(ds.DatasetDir.of(settings.project, "digits").path)
    shutil.copytree(FIXTURE, folder)
    return settings, folder


def _read(settings, split="train"):
    """Every batch of a split, and the warnings the read gave."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        rows = sum(len(batch["label"]) for batch in readers.reader("digits", split=split, settings=settings))
    return rows, [str(w.message) for w in caught if issubclass(w.category, DatasetChangedWarning)]


def _seal(settings):
    storage = Storage(settings.root)
    ddir = ds.DatasetDir.of(settings.project, "digits")
    fingerprint.seal(storage, ddir.path, ddir.manifest)
    return storage.read_json(ddir.manifest)[fingerprint.KEY]


def test_a_dataset_from_before_fingerprints_reads_and_is_fingerprinted_at_the_read(digits):
    settings, folder = digits
    assert fingerprint.KEY not in json.loads(open(os.path.join(folder, "dataset.json")).read())
    rows, changed = _read(settings)
    assert rows > 0 and changed == []
    storage = Storage(settings.root)
    now = fingerprint.check_split(storage, ds.DatasetDir.of(settings.project, "digits").path, "digits",
                                  storage.read_json(ds.DatasetDir.of(settings.project, "digits").manifest), "train")
    assert now["recorded"] is False and len(now["fingerprint"]) == 64
    assert sorted(now["files"]) == ["parquet/train/_common_metadata", "parquet/train/part-00000.parquet",
                                    "parquet/train/part-00001.parquet", "tfrecord/train/part-00000-of-00002.tfrecord",
                                    "tfrecord/train/part-00001-of-00002.tfrecord"]
    assert now["files"]["parquet/train/part-00000.parquet"]["size"] == 1594


def test_sealed_fingerprints_are_stable_and_the_same_bytes_give_no_warning(digits):
    settings, _ = digits
    first = _seal(settings)
    assert set(first["splits"]) == {"train", "test"} and len(first["dataset"]) == 64
    assert _seal(settings) == first   # the same bytes, the same fingerprints
    assert _read(settings)[1] == [] and _read(settings, "test")[1] == []


def test_a_changed_parquet_file_is_named_with_its_split(digits):
    settings, folder = digits
    before = _seal(settings)
    part = os.path.join(folder, "parquet", "train", "part-00001.parquet")
    table = pq.read_table(part)
    pq.write_table(table.slice(0, table.num_rows - 1), part)   # one row fewer: other bytes, same name
    rows, changed = _read(settings)
    assert len(changed) == 1
    assert "dataset 'digits' split 'train'" in changed[0]
    assert "parquet/train/part-00001.parquet changed" in changed[0]
    assert "part-00000" not in changed[0]
    assert _read(settings, "test")[1] == []   # the other split is the same
    assert _seal(settings)["dataset"] != before["dataset"]


def test_an_added_and_a_removed_file_are_named(digits):
    settings, folder = digits
    _seal(settings)
    train = os.path.join(folder, "parquet", "train")
    shutil.copy(os.path.join(train, "part-00000.parquet"), os.path.join(train, "part-00002.parquet"))
    os.remove(os.path.join(folder, "tfrecord", "train", "part-00001-of-00002.tfrecord"))
    _, (message,) = _read(settings)
    assert "parquet/train/part-00002.parquet added" in message
    assert "tfrecord/train/part-00001-of-00002.tfrecord removed" in message


def test_a_tfrecord_file_changed_in_place_at_the_same_size_is_named(digits):
    settings, folder = digits
    _seal(settings)
    shard = os.path.join(folder, "tfrecord", "test", "part-00000-of-00002.tfrecord")
    data = bytearray(open(shard, "rb").read())
    data[len(data) // 2] ^= 0xFF
    open(shard, "wb").write(bytes(data))
    _, (message,) = _read(settings, "test")
    assert "split 'test'" in message
    assert "tfrecord/test/part-00000-of-00002.tfrecord changed (same size, other content)" in message


def test_a_run_records_the_fingerprint_of_what_it_read(digits, tmp_path):
    settings, _ = digits
    sealed = _seal(settings)
    storage = Storage(settings.root)
    run_dir = RunDir(layout.join(layout.experiments_dir(settings.project), "app_1"))
    with active_run(storage, run_dir) as ctx:
        list(readers.reader("digits", split="train", epochs=1))
        list(readers.reader("digits", split="test", epochs=1))
        (entry,) = lineage.read(ctx.local_dir)
    assert entry["name"] == "digits" and entry["splits"] == ["test", "train"]
    assert entry["fingerprint"] == sealed["dataset"]
    recorded = entry[lineage.SPLIT_FINGERPRINTS]
    assert {split: recorded[split]["fingerprint"] for split in recorded} == \
        {split: sealed["splits"][split]["fingerprint"] for split in ("train", "test")}
    assert recorded["train"]["recorded"] is True


def test_diffs_name_each_file():
    old = {"a.parquet": {"size": 1, "sha256": "x"}, "b.parquet": {"size": 2, "sha256": "y"}}
    new = {"a.parquet": {"size": 3, "sha256": "z"}, "c.parquet": {"size": 2, "sha256": "y"}}
    assert fingerprint.diff_files(old, new) == ["a.parquet changed (size 1 -> 3 bytes)", "b.parquet removed",
                                                "c.parquet added"]
    assert fingerprint.short("0123456789abcdef") == "0123456789ab" and fingerprint.short(None) == "unknown"
