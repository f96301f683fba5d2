"""experiment.allreduce: barrier-mode ranks with real collectives on the shared local session."""

import json
import os
import time

import pytest

from hopsml import experiment
from hopsml.cluster.ports import ephemeral_range
from hopsml.errors import ClusterError, ExperimentFailed
from hopsml.examples import digits


def _record(logdir):
    with open(os.path.join(logdir, "experiment.json")) as f:
        return json.load(f)


def test_data_parallel_digits_matches_single_rank(spark, root):
    def train():
        return digits.train_data_parallel(lr=0.5, epochs=8, batch_size=64)

    one_dir, one = experiment.allreduce(train, name="dp1", num_workers=1)
    two_dir, two = experiment.allreduce(train, name="dp2", num_workers=2, metric_key="accuracy")
    rec = _record(two_dir)
    assert rec["state"] == "FINISHED" and rec["type"] == "DISTRIBUTED_TRAINING" and rec["executors"] == 2
    checksums = [r["checksum"] for r in rec["results"]]
    assert len(checksums) == 2 and checksums[0] == checksums[1]  # every rank holds the same parameters
    assert abs(two["accuracy"] - one["accuracy"]) <= 0.01 and two["accuracy"] > 0.85
    assert rec["metric"] == two["accuracy"]
    logs = sorted(os.listdir(os.path.join(two_dir, "logs")))
    assert logs == ["worker_0.log", "worker_1.log"]
    assert "rank 1/2" in open(os.path.join(two_dir, "logs", "worker_1.log")).read()
    metrics = open(os.path.join(two_dir, "metrics.jsonl")).read().splitlines()
    assert len(metrics) == 2 * 8  # loss and accuracy per epoch, from rank 0 only


def test_rank_environment_for_other_frameworks(spark, root):
    def env():
        from hopsml import collective

        names = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "TF_CONFIG")
        return {"env": json.dumps(collective.allgather({n: os.environ.get(n) for n in names}))}

    _, result = experiment.allreduce(env, name="env", num_workers=3)
    seen = json.loads(result["env"])
    assert [e["RANK"] for e in seen] == ["0", "1", "2"] and {e["WORLD_SIZE"] for e in seen} == {"3"}
    assert [e["LOCAL_RANK"] for e in seen] == ["0", "1", "2"]  # one host
    assert len({(e["MASTER_ADDR"], e["MASTER_PORT"]) for e in seen}) == 1
    assert [json.loads(e["TF_CONFIG"])["task"]["index"] for e in seen] == [0, 1, 2]


def test_framework_ports_are_fresh_and_bindable_by_the_function(spark, root):
    def bind_framework_ports():
        import socket

        from hopsml import collective

        config = json.loads(os.environ["TF_CONFIG"])
        mine = config["cluster"]["worker"][config["task"]["index"]]
        host, port = mine.rsplit(":", 1)
        bound = []
        for address in [(host, int(port))] + ([(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]))]
                                              if collective.rank() == 0 else []):
            with socket.socket() as sock:  # what TensorFlow's gRPC server / torch's TCPStore do
                sock.bind(address)
                sock.listen()
                bound.append(address[1])
        collective.barrier()
        return {"bound": bound, "tf": config}

    logdir, result = experiment.allreduce(bind_framework_ports, name="ports", num_workers=2)
    results = _record(logdir)["results"]
    tf_ports = [int(a.rsplit(":", 1)[1]) for a in result["tf"]["cluster"]["worker"]]
    master_port = results[0]["bound"][1]
    assert [r["bound"][0] for r in results] == tf_ports and len(set(tf_ports + [master_port])) == 3
    # hopsml's listeners and connections use kernel-assigned (ephemeral) ports; these never are
    low, high = ephemeral_range()
    assert all(not low <= p <= high for p in tf_ports + [master_port])


def test_failing_rank_fails_the_experiment_quickly(spark, root, capsys):
    def train():
        import numpy as np

        from hopsml import collective

        print("started")
        if collective.rank() == 1:
            raise RuntimeError("rank one diverged")
        collective.allreduce(np.ones(10))  # rank 0 waits for a peer that is gone
        return 1.0

    start = time.monotonic()
    with pytest.raises(ExperimentFailed) as info:
        experiment.allreduce(train, name="fails", num_workers=2, timeout_s=120)
    elapsed = time.monotonic() - start
    message = str(info.value)
    assert "rank 1" in message and "rank one diverged" in message and "started" in message
    assert elapsed < 30, f"took {elapsed:.0f}s"  # far below the 120 s collective timeout
    assert _record(info.value.logdir)["state"] == "FAILED"
    assert "[rank 0] started" in capsys.readouterr().out  # streamed live with the rank


def test_killed_rank_gives_collective_error_not_a_hang(spark, root):
    def train():
        import numpy as np

        from hopsml import collective

        if collective.rank() == 1:
            collective.allreduce(np.ones(1000))
            print("rank 1 about to vanish")
            os._exit(3)  # dies without a word, mid-training
        for _ in range(5):
            collective.allreduce(np.ones(1000))
        return 1.0

    start = time.monotonic()
    with pytest.raises(ExperimentFailed) as info:
        experiment.allreduce(train, name="killed", num_workers=2, timeout_s=120)
    message = str(info.value)
    assert time.monotonic() - start < 30
    # either Spark saw rank 1's process die, or rank 0 saw its peer vanish: both name rank 1
    assert "rank 1" in message and "died" in message, message
    assert "rank 1 about to vanish" in message  # the dead rank's own last lines


def test_a_rank_hung_after_its_peers_returned_fails_the_run_naming_it(spark, root, monkeypatch):
    monkeypatch.setenv("HOPSML_LATE_RANK_S", "2")

    def train():
        from hopsml import collective

        if collective.rank() == 1:
            print("rank 1 waits for something that never comes")
            time.sleep(600)
        return 1.0

    start = time.monotonic()
    with pytest.raises(ExperimentFailed) as info:
        experiment.allreduce(train, name="late", num_workers=2)
    message = str(info.value)
    assert time.monotonic() - start < 120  # not the 600 s the rank would sleep
    assert "rank(s) 1 did not return within 2 s after rank 0" in message, message
    assert "rank 1 waits for something that never comes" in message  # the late rank's own lines
    assert _record(info.value.logdir)["state"] == "FAILED"


def test_too_many_workers_fails_fast_and_says_how_many_slots(spark, root):
    start = time.monotonic()
    with pytest.raises(ClusterError, match=r"need 64 task slots.*has 4"):
        experiment.allreduce(lambda: 1, name="big", num_workers=64)
    assert time.monotonic() - start < 10


def test_ranks_train_on_their_own_shards_of_a_prepared_dataset(spark, root, tmp_path):
    from hopsml.data import prepare_images, samples

    samples.write_digits(str(tmp_path / "digits"), limit=400, size=16)
    summary = prepare_images(str(tmp_path / "digits"), "digits", resize=(16, 16), crop=(12, 12), shards=4)

    def train():
        return digits.train_on_dataset("digits", lr=0.5, epochs=4, batch_size=16)

    logdir, result = experiment.allreduce(train, name="from-dataset", num_workers=2)
    ranks = _record(logdir)["results"]
    assert ranks[0]["checksum"] == ranks[1]["checksum"]  # the same model on both ranks
    assert ranks[0]["rows"] + ranks[1]["rows"] == summary.splits["train"]  # disjoint shards, all rows
    assert result["accuracy"] > 0.5  # 10 classes: far above chance


def test_a_rank_hung_before_a_collective_is_named_with_its_own_lines(spark, root):
    def train():
        import numpy as np

        from hopsml import collective

        if collective.rank() == 1:
            print("rank 1 is stuck in its own loop")
            time.sleep(600)
        print("rank 0 waits in the all-reduce")
        collective.allreduce(np.ones(10))  # times out: rank 1 never joins
        return 1.0

    start = time.monotonic()
    with pytest.raises(ExperimentFailed) as info:
        experiment.allreduce(train, name="hung", num_workers=2, timeout_s=3)
    message = str(info.value)
    assert time.monotonic() - start < 120  # not the 600 s the rank would sleep
    assert "rank 1 made no progress" in message.splitlines()[0], message  # the culprit, first
    assert "rank 1 is stuck in its own loop" in message  # the hung rank's own lines, not rank 0's
    assert "rank 0 timed out" in message  # and what the waiting rank saw
    assert _record(info.value.logdir)["state"] == "FAILED"


def test_a_collective_timeout_set_after_spark_started_reaches_every_rank(spark, root, monkeypatch):
    # as in a notebook: the session runs already, then the timeout is set in os.environ; the run's settings
    # snapshot on the driver carries it to the ranks, whose Python workers never saw the variable
    monkeypatch.setenv("HOPSML_COLLECTIVE_TIMEOUT_S", "4")

    def train():
        import numpy as np

        from hopsml import collective

        if collective.rank() == 1:
            print("rank 1 never joins the all-reduce")
            time.sleep(600)
        collective.allreduce(np.ones(10))
        return 1.0

    with pytest.raises(ExperimentFailed) as info:
        experiment.allreduce(train, name="timeout-setting", num_workers=2)
    message = str(info.value)
    assert "rank 1 made no progress" in message.splitlines()[0], message
    assert "made no progress for 4 s" in message, message  # the driver's value, not the 300 s default
