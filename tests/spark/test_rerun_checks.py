"""What a rerun checks before it starts, without Spark: the datasets a run read (fingerprints recorded in
its datasets.json, a dataset gone, a run from before fingerprints) and the stack's versions; which verb
and which way in a record calls for."""

import os
import shutil

import pyarrow.parquet as pq

from hopsml import config, layout
from hopsml.data import dataset as ds
from hopsml.data import fingerprint
from hopsml.fs import Storage
from hopsml.layout import ExperimentDir
from hopsml.runs import rerun
from hopsml.tracking import lineage
from hopsml.tracking.record import ExperimentRecord

FIXTURE = os.path.join(os.path.dirname(os.path.dirname(__file__)), "fixtures", "modern", "digits")


def _run_that_read_digits(root, record_prints=True):
    settings = config.load()
    storage = Storage(settings.root)
    ddir = ds.DatasetDir.of(settings.project, "digits")
    shutil.copytree(FIXTURE, storage.local_path(ddir.path))
    manifest = storage.read_json(ddir.manifest)
    exp = ExperimentDir.of(settings.project, "app-1", 1)
    prints = {"train": fingerprint.compute_split(storage, ddir.path, manifest, "train")} if record_prints else None
    entry = {"name": "digits", "uri": storage.uri(ddir.path), "splits": ["train"]}
    if prints:
        entry[lineage.SPLIT_FINGERPRINTS] = prints
    storage.write_json(layout.join(exp.path, "trial-1", layout.DATASETS_USED), {"datasets": [entry]})
    return settings, storage, ddir, exp


def test_a_changed_file_in_a_split_a_trial_read_is_named(root):
    settings, storage, ddir, exp = _run_that_read_digits(root)
    assert rerun.dataset_differences(storage, settings.project, rerun.read_lineage(storage, exp)) == []
    part = storage.local_path(layout.join(ddir.parquet("train"), "part-00000.parquet"))
    table = pq.read_table(part)
    pq.write_table(table.slice(1), part)
    (line,) = rerun.dataset_differences(storage, settings.project, rerun.read_lineage(storage, exp))
    assert line.startswith("dataset 'digits' split 'train': parquet/train/part-00000.parquet changed (size 1594 -> ")


def test_a_dataset_gone_is_named_and_a_run_from_before_fingerprints_is_not_refused(root):
    settings, storage, ddir, exp = _run_that_read_digits(root, record_prints=False)
    part = storage.local_path(layout.join(ddir.parquet("train"), "part-00000.parquet"))
    os.remove(part)
    assert rerun.dataset_differences(storage, settings.project, rerun.read_lineage(storage, exp)) == []
    storage.delete(ddir.path)
    (line,) = rerun.dataset_differences(storage, settings.project, rerun.read_lineage(storage, exp))
    assert line.startswith("dataset 'digits' cannot be read now: no finished dataset 'digits'")


def test_versions_and_verbs():
    assert rerun.version_differences({"numpy": "1.26.4", "cuda": None, "spark": "4.0.0"},
                                     {"numpy": "2.1.0", "cuda": None, "spark": "4.0.0", "pyarrow": "26"}) == \
        ["numpy 1.26.4 recorded, 2.1.0 now"]
    rec = ExperimentRecord(id="a_1", name="n", app_id="a", run_id=1)
    assert rerun.verb_of(rec) == "launch"
    rec.type = "DISTRIBUTED_TRAINING"
    assert rerun.verb_of(rec) == "allreduce"
    rec.extra["strategy"] = "mirrored"
    assert rerun.verb_of(rec) == "mirrored"
    rec.type, rec.extra["strategy"] = "PARALLEL_EXPERIMENTS", "random"
    assert rerun.verb_of(rec) == "random_search"
