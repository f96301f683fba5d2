"""GPU scheduling needs a cluster manager: Spark's local mode cannot give tasks GPUs, local-cluster can.
Two workers with one fake GPU each, on executors that already run with CUDA_VISIBLE_DEVICES=6,7: every
rank must get a distinct physical GPU (address "1" -> GPU 7, as Spark's TorchDistributor reads it),
pinned before user code; and asking for more GPUs per worker than Spark gives a task is refused before
the stage starts, naming the conf to set."""

import json
import os
import pathlib
import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent("""
    import json, os, sys
    from pyspark.sql import SparkSession
    from hopsml import experiment

    discovery = sys.argv[1]
    spark = (SparkSession.builder.master("local-cluster[2,1,1024]")
             .config("spark.worker.resource.gpu.amount", "1")
             .config("spark.worker.resource.gpu.discoveryScript", discovery)
             .config("spark.executor.resource.gpu.amount", "1")
             .config("spark.task.resource.gpu.amount", "1")
             .config("spark.executor.memory", "512m")
             .config("spark.executorEnv.CUDA_VISIBLE_DEVICES", "6,7")
             .getOrCreate())

    def report():
        from hopsml import collective, devices
        seen = collective.allgather({"rank": collective.rank(), "cuda": os.environ.get("CUDA_VISIBLE_DEVICES"),
                                     "gpus": devices.visible_gpus(), "local_rank": os.environ["LOCAL_RANK"]})
        return {"seen": json.dumps(seen)}

    logdir, result = experiment.allreduce(report, name="gpus", num_workers=2, gpus_per_worker=1)
    print("RESULT " + result["seen"])
    try:
        experiment.allreduce(report, name="too-many-gpus", num_workers=2, gpus_per_worker=2)
    except Exception as exc:
        print("REFUSED " + type(exc).__name__ + ": " + " ".join(str(exc).split()))
    spark.stop()
""")


def test_each_rank_gets_its_own_gpu(tmp_path, root):
    script = tmp_path / "gpus.py"
    script.write_text(SCRIPT)
    (tmp_path / "claims").mkdir()
    discovery = pathlib.Path(__file__).with_name("fake_gpu_discovery.sh")
    env = {**os.environ, "HOPSML_FAKE_GPU_DIR": str(tmp_path / "claims"), "PYSPARK_PYTHON": sys.executable,
           "SPARK_LOCAL_IP": "127.0.0.1", "HOPSML_LOG_DIR": str(tmp_path)}
    done = subprocess.run([sys.executable, str(script), str(discovery)], env=env, capture_output=True,
                          text=True, timeout=300)
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert done.returncode == 0 and lines, done.stdout[-3000:] + done.stderr[-3000:]
    seen = json.loads(lines[0][len("RESULT "):])
    assert sorted(r["rank"] for r in seen) == [0, 1]
    cuda = [r["cuda"] for r in seen]
    assert sorted(cuda) == ["6", "7"]  # distinct fake GPUs 0 and 1, mapped through the executors' list
    assert [r["gpus"] for r in seen] == [[c] for c in cuda]
    refused = [line for line in done.stdout.splitlines() if line.startswith("REFUSED ")]
    assert refused and refused[0].startswith("REFUSED ClusterError: gpus_per_worker=2 but "
                                             "spark.task.resource.gpu.amount=1"), done.stdout[-3000:]
    assert "set spark.task.resource.gpu.amount=2" in refused[0]
