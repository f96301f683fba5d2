"""Search calls written as hops notebooks wrote them: upper-case directions, bounds given high-to-low."""

import json
import os

from hopsml import experiment


def peak(x, y):
    return {"score": -((x - 2) ** 2) - (y - 1) ** 2}


def test_differential_evolution_with_high_to_low_bounds_and_hops_direction(spark, root):
    logdir, best, outputs = experiment.differential_evolution(
        peak, {"x": [4.0, 0.0], "y": [2.0, 0.0]}, direction="MAX", generations=2, population=4, seed=1,
        optimization_key="score")
    with open(os.path.join(logdir, ".summary.json")) as f:
        trials = [t["params"] for t in json.load(f)["trials"]]
    assert len(trials) == 8 and all(0 <= t["x"] <= 4 and 0 <= t["y"] <= 2 for t in trials)
    assert outputs["score"] == max(peak(**t)["score"] for t in trials) and 0 <= best["x"] <= 4


def test_random_search_with_high_to_low_bounds(spark, root):
    logdir, best, _ = experiment.random_search(peak, {"x": [4, 0], "y": [2.0, 0.0]}, direction="MAX",
                                               samples=4, seed=0, optimization_key="score")
    with open(os.path.join(logdir, "experiment.json")) as f:
        assert json.load(f)["direction"] == "max"
    assert isinstance(best["x"], int) and 0 <= best["x"] <= 4 and 0 <= best["y"] <= 2


def test_hdfs_inside_a_training_function_uses_the_run_project(spark, root, tmp_path):
    """hops notebooks call hdfs in the function that runs on the executors: it must see the same project."""
    from hopsml import hdfs

    hdfs.dump("1,2,3", "TourData/numbers.csv")

    def train():
        from hopsml import hdfs

        numbers = [int(x) for x in hdfs.load(hdfs.project_path() + "TourData/numbers.csv").decode().split(",")]
        hdfs.dump(str(sum(numbers)), "Resources/sum.txt")
        hdfs.log("summed the numbers")
        return {"total": sum(numbers), "project": hdfs.project_name()}

    logdir, result = experiment.launch(train, name="hdfs-in-task")
    assert result["total"] == 6 and result["project"] == "test"
    with open(os.path.join(logdir, "output.log")) as f:
        assert ": summed the numbers" in f.read()  # hops 1.x's hdfs.log writes to the run's log
    assert hdfs.load("Resources/sum.txt") == b"6" and (root / "Projects" / "test" / "Resources" / "sum.txt").exists()


def save_beside_the_logdir():
    from hopsml import tensorboard

    with open(tensorboard.logdir() + "model.pt", "wb") as f:  # hops' idiom: the logdir ends with "/"
        f.write(b"weights")
    return {"metric": 1.0}


def test_a_file_written_at_logdir_plus_name_reaches_the_run(spark, root):
    for local_logdir in (False, True):
        logdir, _ = experiment.launch(save_beside_the_logdir, name="idiom", local_logdir=local_logdir)
        with open(os.path.join(logdir, "tensorboard", "model.pt"), "rb") as f:
            assert f.read() == b"weights"


def write_relative(tag):
    import time

    with open("scratch.txt", "w") as f:  # a relative path: each execution's own working directory
        f.write(tag)
    time.sleep(0.5)
    with open("scratch.txt") as f:
        return {"metric": 1.0, "kept": f.read(), "cwd": os.getcwd()}


def test_each_execution_runs_in_its_own_working_directory(spark, root, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _, results = experiment.launch(write_relative, {"tag": ["a", "b"]}, name="own-cwd")
    assert [r["kept"] for r in results] == ["a", "b"]
    assert len({r["cwd"] for r in results}) == 2 and str(tmp_path) not in {r["cwd"] for r in results}
    assert not (tmp_path / "scratch.txt").exists()


def report_tf_config():
    return {"metric": 1.0, "tf_config": os.environ.get("TF_CONFIG", "none"), "world": os.environ["WORLD_SIZE"]}


def test_mirrored_runs_one_rank_per_executor_and_one_rank_gets_no_tf_config(spark, root):
    """hops' rule: a notebook written for one MirroredStrategy worker trains one model in local mode."""
    _, result = experiment.mirrored(report_tf_config, name="one-executor")
    assert result["world"] == "1" and result["tf_config"] == "none"
