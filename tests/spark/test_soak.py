"""A long-lived driver, as a notebook kernel is: many runs (launch, allreduce, grid search, some failing) in
one driver process must leave its threads, open files, memory, temp entries and the project's staging
entries flat. The driver is a process of the test's own, with a TMPDIR of its own, so that nothing else
running on the machine is counted."""

import json
import os
import subprocess
import sys
import textwrap

import pytest

RUNS = int(os.environ.get("HOPSML_SOAK_RUNS", "200"))

DRIVER = textwrap.dedent("""
    import gc, json, os, sys, threading
    from hopsml import collective, experiment
    from hopsml.errors import HopsmlError

    runs, root, tmp = int(sys.argv[1]), sys.argv[2], sys.argv[3]

    def fit(lr=0.1, fail=False):
        if fail:
            raise ValueError("this run fails on purpose")
        return {"metric": lr * 2}

    def ranks():
        import numpy as np
        total = collective.allreduce(np.ones(1000, dtype=np.float32))
        return {"metric": float(total[0])}

    def failing_ranks():
        if collective.rank() == 1:
            raise ValueError("rank 1 fails on purpose")
        collective.barrier()

    def hidden_entries():
        found = 0
        for folder, dirs, files in os.walk(root):
            found += sum(1 for name in dirs + files if name.startswith((".", "_temporary")) and
                         not name.endswith((".json", ".crc", ".metric", ".log")))
        return found

    def sample(i):
        gc.collect()
        with open("/proc/self/status") as f:
            rss_kib = next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))
        return {"run": i, "threads": threading.active_count(), "fds": len(os.listdir("/proc/self/fd")),
                "rss_mib": rss_kib / 1024, "tmp": len(os.listdir(tmp)), "staging": hidden_entries()}

    failed = 0
    for i in range(runs):
        kind = i % 5
        try:
            if kind == 0:
                experiment.launch(fit, {"lr": 0.1}, name="soak-launch")
            elif kind == 1:
                experiment.allreduce(ranks, name="soak-allreduce", num_workers=2)
            elif kind == 2:
                experiment.grid_search(fit, {"lr": [0.1, 0.2]}, name="soak-grid")
            elif kind == 3:
                experiment.launch(fit, {"fail": True}, name="soak-fails")
            else:
                experiment.allreduce(failing_ranks, name="soak-rank-fails", num_workers=2)
        except HopsmlError:
            failed += 1
        print("SAMPLE " + json.dumps({**sample(i), "failed": failed}), flush=True)
""")


def _flat(first, last, key, slack):
    return last[key] <= first[key] + slack, (f"{key}: {first[key]} after run {first['run']}, "
                                             f"{last[key]} after run {last['run']}")


@pytest.mark.slow
def test_a_long_lived_driver_stays_flat(tmp_path):
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    root = tmp_path / "root"
    env = {**os.environ, "HOPSML_ROOT": str(root), "HOPSML_PROJECT": "soak", "HOPSML_MASTER": "local[2]",
           "HOPSML_LOG_DIR": str(tmp_path / "logs"), "TMPDIR": str(tmp),
           # Spark's own scratch folders go to the test's temp folder too, so they are counted
           "HOPSML_SPARK_CONF": json.dumps({"spark.local.dir": str(tmp),
                                            "spark.driver.extraJavaOptions": f"-Djava.io.tmpdir={tmp}"})}
    env.pop("HOPSML_CONF", None)
    (tmp_path / "driver.py").write_text(DRIVER)
    done = subprocess.run([sys.executable, str(tmp_path / "driver.py"), str(RUNS), str(root), str(tmp)],
                          env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60 * 60)
    samples = [json.loads(line[len("SAMPLE "):]) for line in done.stdout.splitlines() if line.startswith("SAMPLE ")]
    assert done.returncode == 0 and len(samples) == RUNS, done.stdout[-3000:] + done.stderr[-3000:]
    assert samples[-1]["failed"] == 2 * (RUNS // 5) + (RUNS % 5 > 3)  # the failing kinds failed, the others did not
    # after a warm-up (Spark's own pools and caches fill during the first runs), nothing may grow
    first, last = samples[RUNS // 4], samples[-1]
    print("soak:", json.dumps(first), json.dumps(last))
    for key, slack in (("threads", 2), ("fds", 4), ("tmp", 0), ("staging", 0), ("rss_mib", 64)):
        ok, what = _flat(first, last, key, slack)
        assert ok, what
