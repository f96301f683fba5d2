"""Datasets written on one stack read on the other.

tests/fixtures/<stack>/ holds an image dataset (digits) and a table dataset (iris) written by
hopsml's jobs on each stack (tests/fixtures/write_datasets.py): ``modern`` is Spark 4, numpy 2 and
the newest pyarrow; ``legacy`` is the ``petastorm`` extra's Spark 3.5, numpy 1.x and pyarrow 14.
Whichever stack runs these tests reads both with hopsml's readers, pyarrow and Spark, petastorm's
readers where petastorm is installed and TensorFlow where it is.
"""

import importlib.util
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from hopsml import config
from hopsml.data import shards
from hopsml.data.images import unischema
from hopsml.data.readers import reader

pytestmark = pytest.mark.legacy
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
STACKS = ("modern", "legacy")
SPLITS = ("train", "test")
SHAPE = (8, 8, 3)
needs_petastorm = pytest.mark.skipif(importlib.util.find_spec("petastorm") is None,
                                     reason='petastorm is not installed: pip install ".[petastorm]"')


@pytest.fixture(scope="module")
def fixture_root(tmp_path_factory):
    """A project root with one project per stack, each holding that stack's two datasets."""
    fixture_root = tmp_path_factory.mktemp("stacks") / "root"
    for stack in STACKS:
        for name in ("digits", "iris"):
            shutil.copytree(FIXTURES / stack / name, fixture_root / "Projects" / stack / "Datasets" / name)
    return fixture_root


def _settings(fixture_root, stack):
    return config.load(environ={}, root=str(fixture_root), project=stack)


def _folder(fixture_root, stack, name, *parts):
    return fixture_root / "Projects" / stack / "Datasets" / name / Path(*parts)


def _manifest(stack, name):
    return json.loads((FIXTURES / stack / name / "dataset.json").read_text())


def _images(fixture_root, stack, engine="arrow"):
    """{'<label>/<file>': (label, image)} of every row of both splits, through hopsml's reader."""
    rows = {}
    for split in SPLITS:
        for batch in reader("digits", batch_size=100, shuffle=False, split=split, engine=engine,
                            fields=["path", "label", "image"], settings=_settings(fixture_root, stack)):
            for path, label, image in zip(batch["path"], batch["label"], batch["image"]):
                rows["/".join(str(path).split("/")[-2:])] = (int(label), image)
    return rows


def _table(fixture_root, stack, split, engine="arrow"):
    """Sorted (features rounded, label) rows of ``split`` through hopsml's reader."""
    batches = reader("iris", batch_size=100, shuffle=False, split=split, engine=engine,
                     fields=["features", "label"], settings=_settings(fixture_root, stack))
    return sorted((tuple(np.round(f, 4).tolist()), int(y)) for b in batches
                  for f, y in zip(b["features"], b["label"]))


@pytest.mark.parametrize("stack", STACKS)
def test_hopsml_reads_the_image_dataset(fixture_root, stack):
    arrow = _images(fixture_root, stack)
    assert len(arrow) == _manifest(stack, "digits")["counts"]["written"] == 12
    for key, (label, image) in arrow.items():
        assert image.shape == SHAPE and image.dtype == np.uint8 and image.any()
        assert label == int(key.split("/")[0])
    tfrecord = _images(fixture_root, stack, "tfrecord")
    assert sorted(tfrecord) == sorted(arrow)
    for key, (label, image) in tfrecord.items():
        assert label == arrow[key][0]
        np.testing.assert_array_equal(image, arrow[key][1])


def test_both_stacks_wrote_the_same_rows(fixture_root):
    modern, legacy = _images(fixture_root, "modern"), _images(fixture_root, "legacy")
    assert sorted(modern) == sorted(legacy)
    for key in modern:
        assert modern[key][0] == legacy[key][0]
        np.testing.assert_array_equal(modern[key][1], legacy[key][1])
    for split in SPLITS:
        assert _table(fixture_root, "modern", split) == _table(fixture_root, "legacy", split)


@pytest.mark.parametrize("stack", STACKS)
def test_hopsml_reads_the_table_dataset(fixture_root, stack):
    manifest = _manifest(stack, "iris")
    for split in SPLITS:
        rows = _table(fixture_root, stack, split)
        assert len(rows) == manifest["splits"][split]["rows"] > 0
        assert _table(fixture_root, stack, split, "tfrecord") == rows
    assert sum(manifest["splits"][s]["rows"] for s in SPLITS) == 30


@pytest.mark.parametrize("stack", STACKS)
def test_common_metadata_is_the_same_on_every_stack(fixture_root, stack):
    import pyarrow.parquet as pq

    for split in SPLITS:
        folder = _folder(fixture_root, stack, "digits", "parquet", split)
        metadata = pq.read_schema(folder / shards.COMMON_METADATA).metadata
        assert metadata[shards.UNISCHEMA_KEY] == unischema(SHAPE)
        row_groups = json.loads(metadata[shards.ROW_GROUPS_PER_FILE_KEY])
        files = sorted(p.name for p in folder.glob("*.parquet"))
        assert sorted(row_groups) == files
        assert row_groups == {name: pq.ParquetFile(folder / name).num_row_groups for name in files}


@pytest.mark.parametrize("stack", STACKS)
def test_pyarrow_and_spark_read_both_datasets(spark, fixture_root, stack):
    import pyarrow.parquet as pq

    for name in ("digits", "iris"):
        manifest = _manifest(stack, name)
        for split in SPLITS:
            folder = _folder(fixture_root, stack, name, "parquet", split)
            rows = manifest["splits"][split]["rows"]
            assert pq.read_table(folder).num_rows == rows   # files named _* are left out
            assert spark.read.parquet(folder.as_uri()).count() == rows
    frame = spark.read.parquet(_folder(fixture_root, stack, "iris", "parquet", "train").as_uri())
    assert {"features", "label"} <= set(frame.columns)


@needs_petastorm
@pytest.mark.parametrize("stack", STACKS)
def test_petastorm_reads_both_datasets(fixture_root, stack):
    from petastorm import make_batch_reader, make_reader

    arrow = _images(fixture_root, stack)
    seen = {}
    for split in SPLITS:
        url = _folder(fixture_root, stack, "digits", "parquet", split).as_uri()
        with make_reader(url, reader_pool_type="dummy", shuffle_row_groups=False) as rows:
            for row in rows:
                seen["/".join(row.path.split("/")[-2:])] = row
    assert sorted(seen) == sorted(arrow)
    for key, row in seen.items():
        assert row.label == arrow[key][0]
        np.testing.assert_array_equal(row.image, arrow[key][1])
    for split in SPLITS:
        url = _folder(fixture_root, stack, "iris", "parquet", split).as_uri()
        with make_batch_reader(url, reader_pool_type="dummy", schema_fields=["features", "label"]) as batches:
            rows = sorted((tuple(np.round(f, 4).tolist()), int(y)) for b in batches
                          for f, y in zip(b.features, b.label))
        assert rows == _table(fixture_root, stack, split)
    assert len(list(reader("digits", engine="petastorm", settings=_settings(fixture_root, stack)))) > 0


@pytest.mark.parametrize("stack", STACKS)
def test_tensorflow_reads_both_datasets(fixture_root, stack):
    tf = pytest.importorskip("tensorflow")

    arrow = _images(fixture_root, stack)
    spec = {"image/encoded": tf.io.FixedLenFeature([], tf.string),
            "image/class/label": tf.io.FixedLenFeature([], tf.int64),
            "image/filename": tf.io.FixedLenFeature([], tf.string)}
    seen = {}
    for split in SPLITS:
        files = sorted(str(p) for p in _folder(fixture_root, stack, "digits", "tfrecord", split).glob("*.tfrecord"))
        for record in tf.data.TFRecordDataset(files):
            example = tf.io.parse_single_example(record, spec)
            key = "/".join(example["image/filename"].numpy().decode().split("/")[-2:])
            seen[key] = (int(example["image/class/label"]), tf.io.decode_png(example["image/encoded"], 3).numpy())
    assert sorted(seen) == sorted(arrow)
    for key, (label, image) in seen.items():
        assert label == arrow[key][0]
        np.testing.assert_array_equal(image, arrow[key][1])
    width = len(_table(fixture_root, stack, "train")[0][0])
    table_spec = {"features": tf.io.FixedLenFeature([width], tf.float32), "label": tf.io.FixedLenFeature([], tf.int64)}
    for split in SPLITS:
        files = sorted(str(p) for p in _folder(fixture_root, stack, "iris", "tfrecord", split).glob("*.tfrecord"))
        rows = sorted((tuple(np.round(e["features"].numpy(), 4).tolist()), int(e["label"]))
                      for e in (tf.io.parse_single_example(r, table_spec) for r in tf.data.TFRecordDataset(files)))
        assert rows == _table(fixture_root, stack, split)


def test_barrier_ranks_all_reduce_on_this_spark(spark, root):
    # Spark 3.5 on the legacy stack, Spark 4 on the default one: the launcher's barrier stage,
    # the rendezvous and the ring all-reduce between the ranks.
    from hopsml import collective, experiment

    def train():
        values = np.array([collective.rank() + 1.0, 10.0])
        collective.allreduce(values, op="sum")
        return {"total": float(values[0]), "tens": float(values[1])}

    logdir, result = experiment.allreduce(train, name="stack", num_workers=2)
    assert result["total"] == 3.0 and result["tens"] == 20.0
    assert json.loads((Path(logdir) / "experiment.json").read_text())["versions"]["spark"] == spark.version


@needs_petastorm
def test_hopsml_reads_with_petastorm_quietly(fixture_root, capfd, recwarn):
    batches = list(reader("digits", engine="petastorm", settings=_settings(fixture_root, "legacy")))
    assert batches
    shown = capfd.readouterr()
    assert "Cache cleanup complete." not in shown.out + shown.err
    assert not [w for w in recwarn if issubclass(w.category, FutureWarning)]
