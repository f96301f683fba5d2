"""hopsml's verbs run against a Spark Connect server as against a classic session: a real server (a local[4]
Spark with the Connect plugin, in its own process) and user programs that reach it only through
HOPSML_REMOTE=sc://127.0.0.1:<port>, with no JVM of their own."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hopsml.cluster import session

pytest.importorskip("grpc", reason="Spark Connect's client needs the connect extra: pip install '.[connect]'")
pytestmark = pytest.mark.slow

LIMIT_S = 600  # a hang, not a slow run: each program below takes well under a minute here

SERVER = """
import sys
from pyspark.sql import SparkSession
spark = (SparkSession.builder.master("local[4]").appName("hopsml-connect-server")
         .config("spark.plugins", "org.apache.spark.sql.connect.SparkConnectPlugin")
         .config("spark.connect.grpc.binding.address", "127.0.0.1")
         .config("spark.connect.grpc.binding.port", sys.argv[1])
         .config("spark.ui.enabled", "false")
         .getOrCreate())
print("ready", flush=True)
sys.stdin.read()  # until the test closes our stdin
spark.stop()
"""

CLIENT = """
import json
from hopsml import errors, experiment, util
from hopsml.cluster import session
from hopsml.cluster.handle import SparkHandle


def fails_on_rank_one():
    import numpy as np
    from hopsml import collective
    if collective.rank() == 1:
        raise ValueError("rank one breaks")
    collective.allreduce(np.ones(4))
    return {"x": 1.0}


def mean_of_ranks():
    import numpy as np
    from hopsml import collective
    total = collective.allreduce(np.full(3, float(collective.rank() + 1)))
    return {"mean": float(total[0]) / collective.size()}


def train(lr, dropout, epochs=1):
    return {"accuracy": 1.0 - abs(lr - 0.1) - dropout + 0.01 * epochs}


out = {}
_, result = experiment.allreduce(mean_of_ranks, num_workers=3, name="connect-mean")
out["mean"] = result["mean"]
try:
    experiment.allreduce(fails_on_rank_one, num_workers=2, name="connect-fail")
except errors.ExperimentFailed as exc:
    out["failed_rank"], out["failed"] = exc.rank, str(exc)
try:
    experiment.allreduce(fails_on_rank_one, num_workers=9, name="connect-many")
except errors.ClusterError as exc:
    out["too_many"] = str(exc)
handle = SparkHandle.of(session.active())
out["connect"], out["executors"], out["parallelism"] = handle.connect, util.num_executors(), handle.default_parallelism
_, best, _ = experiment.grid_search(train, {"lr": [0.1, 0.5], "dropout": [0.0, 0.2]}, optimization_key="accuracy",
                                    name="connect-grid")
out["grid_best"] = best
_, asha_best, _ = experiment.asha(train, {"lr": [0.01, 0.5], "dropout": [0.0, 0.3]}, min_budget=1, max_budget=4,
                                  eta=2, num_trials=4, optimization_key="accuracy", name="connect-asha")
out["asha_best"] = asha_best
print("RESULT " + json.dumps(out))
"""

PREDICT = """
import json, pathlib, sys
from hopsml import model
from hopsml.examples import digits

runs = pathlib.Path(sys.argv[1]).glob("*/experiment.json")
allreduce = next(r.parent for r in runs if json.loads(r.read_text())["name"] == "quickstart-allreduce")
version = model.export(str(allreduce / "model.npz"), "digits", metrics={"accuracy": 0.9})
summary = model.predict(version, "digits", digits.predict, split="test", batch_size=50)
print("RESULT " + json.dumps({"splits": summary.splits, "columns": summary.columns}))
"""

FEATURES = """
import json
import pandas as pd
from hopsml import hopsworks
from hopsml.cluster import session

spark = session.get_or_create()
fs = hopsworks.login().get_feature_store()
fg = fs.get_or_create_feature_group("payments", version=1, primary_key=["id"], event_time="ts")
ts = pd.Timestamp("2024-05-01", tz="UTC")
fg.insert(spark.createDataFrame(pd.DataFrame({"id": [1, 2, 3], "ts": [ts] * 3, "amount": [1.0, 2.0, 3.0]})))
fg.insert(spark.createDataFrame(pd.DataFrame({"id": [3, 4], "ts": [ts] * 2, "amount": [30.0, 4.0]})))
rows = fg.read(read_options={"engine": "spark"}).sort_values("id")
commits = fg.table.commits()
print("RESULT " + json.dumps({"amount": rows["amount"].tolist(), "operations": [c.operation for c in commits],
                              "counts": [[c.inserted, c.updated] for c in commits]}))
"""


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture(scope="module")
def connect_url(tmp_path_factory):
    """A Spark Connect server in its own process; its URL."""
    folder = tmp_path_factory.mktemp("connect-server")
    port = _free_port()
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1",
           "SPARK_CONF_DIR": session.conf_dir(), "HOPSML_LOG_DIR": str(folder / "logs")}
    log = folder / "server.log"
    with open(log, "wb") as output:
        server = subprocess.Popen([sys.executable, "-c", SERVER, str(port)], stdin=subprocess.PIPE,
                                  stdout=output, stderr=subprocess.STDOUT, env=env, cwd=folder)
    deadline = time.monotonic() + 180
    while "ready" not in log.read_text(errors="replace"):
        if server.poll() is not None or time.monotonic() > deadline:
            server.kill()
            pytest.fail(f"the Spark Connect server did not start:\n{log.read_text(errors='replace')[-3000:]}")
        time.sleep(0.2)
    yield f"sc://127.0.0.1:{port}"
    server.stdin.close()
    try:
        server.wait(60)
    except subprocess.TimeoutExpired:
        server.kill()
        server.wait(10)


def _run(tmp_path: Path, url: str, *command: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYSPARK_", "SPARK_"))}
    env.update({"HOPSML_REMOTE": url, "HOPSML_ROOT": str(tmp_path / "root"), "HOPSML_PROJECT": "connect",
                "HOPSML_LOG_DIR": str(tmp_path / "logs"), "HOPSML_NUM_WORKERS": "2"})
    try:
        return subprocess.run(command, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=LIMIT_S)
    except subprocess.TimeoutExpired as hang:
        pytest.fail(f"{command[-1]} did not end within {LIMIT_S} s over Spark Connect; last output:\n"
                    f"{(hang.stderr or b'')[-3000:]!r}")


def test_the_quickstart_runs_over_spark_connect(tmp_path, connect_url):
    done = _run(tmp_path, connect_url, os.path.join(os.path.dirname(sys.executable), "hopsml"), "quickstart")
    assert done.returncode == 0, done.stderr[-3000:] + done.stdout[-3000:]
    # no JVM in the client: the server's application ran everything
    assert "SparkContext" not in done.stderr
    assert "dataset 'digits' (images)" in done.stdout and "dataset 'iris' (table)" in done.stdout
    # Connect cannot count tasks: the bar shows the time, never a count of 0 tasks
    assert "prepare images 'digits': done (" in done.stderr and "0 tasks" not in done.stderr
    experiments = tmp_path / "root" / "Projects" / "connect" / "Experiments"
    records = [json.loads(record.read_text()) for record in sorted(experiments.glob("*/experiment.json"))]
    assert len(records) == 3
    for fields in records:
        assert fields["state"] == "FINISHED" and fields["spark_conf"]["spark.master"] == "local[4]"

    # batch inference with the data-parallel run's model, on the test split the quickstart prepared
    script = tmp_path / "predict.py"
    script.write_text(PREDICT)
    done = _run(tmp_path, connect_url, sys.executable, str(script), str(experiments))
    assert done.returncode == 0, done.stderr[-3000:] + done.stdout[-3000:]
    out = json.loads(done.stdout.split("RESULT ", 1)[1])
    assert out["columns"] == ["label", "path", "prediction"] and out["splits"]["test"] > 300


def test_collectives_searches_and_failures_over_spark_connect(tmp_path, connect_url):
    script = tmp_path / "client.py"
    script.write_text(CLIENT)
    done = _run(tmp_path, connect_url, sys.executable, str(script))
    assert done.returncode == 0, done.stderr[-3000:] + done.stdout[-3000:]
    out = json.loads(done.stdout.split("RESULT ", 1)[1])
    assert out["mean"] == pytest.approx((1 + 2 + 3) / 3)  # a barrier stage of 3 ranks all-reduced
    assert out["failed_rank"] == 1 and "rank 1 raised ValueError: rank one breaks" in out["failed"]
    assert "9 workers need 9 task slots" in out["too_many"] and "Spark Connect server" in out["too_many"]
    assert out["connect"] is True and out["executors"] == 4 and out["parallelism"] == 4
    assert out["grid_best"] == {"lr": 0.1, "dropout": 0.0}
    assert {"lr", "dropout"} <= set(out["asha_best"])


def test_a_spark_connect_frame_is_inserted_into_a_feature_group_by_the_servers_tasks(tmp_path, connect_url):
    script = tmp_path / "features.py"
    script.write_text(FEATURES)
    done = _run(tmp_path, connect_url, sys.executable, str(script))
    assert done.returncode == 0, done.stderr[-3000:] + done.stdout[-3000:]
    out = json.loads(done.stdout.split("RESULT ", 1)[1])
    assert out["amount"] == [1.0, 2.0, 30.0, 4.0]        # key 3 updated, key 4 added
    assert out["operations"] == ["SPARK INSERT", "SPARK INSERT"] and out["counts"] == [[1, 1], [3, 0]]
