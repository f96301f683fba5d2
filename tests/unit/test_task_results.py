"""What a function's return value brings into the run, as hops did: a file it wrote (or one under a key
ending in '_file') is uploaded into the run folder, named by its project-relative path, and the local
original it wrote is removed; other strings stay as they are. And the task's description never shows
the run's secret."""

import os
import time

from hopsml.fs import Storage
from hopsml.launcher.spec import TaskSpec
from hopsml.launcher.task.function import normalise_result, run_function
from hopsml.layout import RunDir


def test_a_string_naming_an_existing_file_is_recorded_unchanged(tmp_path, monkeypatch):
    storage = Storage(str(tmp_path / "root"))
    existing = tmp_path / "work" / "train.csv"
    existing.parent.mkdir()
    existing.write_text("a,b\n")
    monkeypatch.chdir(existing.parent)
    old = time.time() - 3600
    os.utime(existing, (old, old))
    spec = TaskSpec(storage, "run", None, b"")
    report = run_function(lambda: {"data": str(existing), "relative": "train.csv", "note": "/etc/hostname"},
                          {}, spec)
    assert report["ok"] and report["result"] == {"data": str(existing), "relative": "train.csv",
                                                 "note": "/etc/hostname"}
    assert not storage.exists("run/train.csv") and not storage.exists("run/hostname")


RUN = "Projects/demo/Experiments/local-1_1"


def test_a_file_the_function_wrote_in_its_working_directory_is_moved_into_the_run(tmp_path, monkeypatch):
    storage = Storage(str(tmp_path / "root"))
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)

    def train():
        with open("weights.npy", "wb") as handle:
            handle.write(b"w")
        return {"weights": "weights.npy"}

    report = run_function(train, {}, TaskSpec(storage, RUN, None, b""))
    assert report["result"]["weights"] == "Experiments/local-1_1/weights.npy"
    assert storage.read_bytes(f"{RUN}/weights.npy") == b"w"
    assert not (work / "weights.npy").exists()


def test_a_returned_file_is_moved_as_hops_moved_it_wherever_the_function_wrote_it(tmp_path, monkeypatch):
    # hops: uploaded into the experiment folder, the value is the project-relative path, the local file is gone
    storage = Storage(str(tmp_path / "root"))
    (tmp_path / "work").mkdir()
    monkeypatch.chdir(tmp_path / "work")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    trial = f"{RUN}/lr=0.1"

    def train():
        for name in ("a.bin", "b.bin"):
            (elsewhere / name).write_bytes(name.encode())
        return {"plain": str(elsewhere / "a.bin"), "model_file": str(elsewhere / "b.bin"),
                "missing_file": str(elsewhere / "none.bin")}

    report = run_function(train, {}, TaskSpec(storage, trial, None, b""))
    result = report["result"]
    assert result["plain"] == "Experiments/local-1_1/lr=0.1/a.bin"
    assert result["model_file"] == "Experiments/local-1_1/lr=0.1/b.bin"
    assert storage.read_bytes(f"{trial}/a.bin") == b"a.bin" and storage.read_bytes(f"{trial}/b.bin") == b"b.bin"
    assert not (elsewhere / "a.bin").exists() and not (elsewhere / "b.bin").exists()
    assert result["missing_file"] == str(elsewhere / "none.bin")
    assert "'missing_file' names" in storage.read_text(f"{trial}/output.log")
    from hopsml import hdfs

    monkeypatch.setenv("HOPSML_ROOT", str(tmp_path / "root"))
    monkeypatch.setenv("HOPSML_PROJECT", "demo")
    assert hdfs.load(result["plain"]) == b"a.bin"  # the hops idiom: the returned path opens with hdfs


def test_a_file_key_naming_a_file_the_function_did_not_write_is_copied_and_kept(tmp_path, monkeypatch):
    storage = Storage(str(tmp_path / "root"))
    monkeypatch.chdir(tmp_path)
    given = tmp_path / "pretrained.bin"
    given.write_bytes(b"p")
    old = time.time() - 3600
    os.utime(given, (old, old))
    report = run_function(lambda: {"init_file": str(given)}, {}, TaskSpec(storage, RUN, None, b""))
    assert report["result"]["init_file"] == "Experiments/local-1_1/pretrained.bin"
    assert storage.read_bytes(f"{RUN}/pretrained.bin") == b"p" and given.read_bytes() == b"p"


def test_a_file_written_in_the_run_folder_is_named_where_it_is(tmp_path, monkeypatch):
    storage = Storage(str(tmp_path / "root"))
    monkeypatch.chdir(tmp_path)
    from hopsml import tensorboard

    def train():
        path = os.path.join(os.path.dirname(os.path.dirname(tensorboard.logdir())), "ckpt", "last.npz")
        os.makedirs(os.path.dirname(path))
        open(path, "wb").close()
        return {"checkpoint": path}

    report = run_function(train, {}, TaskSpec(storage, RUN, None, b""))
    assert report["result"]["checkpoint"] == "Experiments/local-1_1/ckpt/last.npz"
    assert storage.exists(f"{RUN}/ckpt/last.npz")
    assert not storage.exists(f"{RUN}/last.npz")  # not copied a second time


def test_a_run_outside_a_project_names_its_files_by_uri(tmp_path, monkeypatch):
    storage = Storage(str(tmp_path / "root"))
    monkeypatch.chdir(tmp_path)

    def train():
        (tmp_path / "out.txt").write_text("o")
        return {"out": "out.txt"}

    report = run_function(train, {}, TaskSpec(storage, "run", None, b""))
    assert report["result"]["out"] == storage.uri("run/out.txt") and not (tmp_path / "out.txt").exists()


def test_nan_and_infinity_in_results_are_recorded_as_strings(tmp_path):
    result = normalise_result({"loss": float("nan"), "best": float("-inf")}, Storage(str(tmp_path)),
                              RunDir("run"))
    assert result == {"loss": "nan", "best": "-inf"}


def test_task_spec_repr_hides_the_secret(tmp_path):
    secret = b"\x01\x02very-secret-bytes"
    spec = TaskSpec(Storage("s3://AKIAXXX:s3cr3t@bucket/root?secret_key=k3y&region=x"), "run",
                    ("127.0.0.1", 1), secret)
    shown = repr(spec) + str(spec)
    assert repr(secret) not in shown and "very-secret" not in shown
    assert "s3cr3t" not in shown and "AKIAXXX" not in shown and "k3y" not in shown
    assert "run" in shown and spec.secret == secret
