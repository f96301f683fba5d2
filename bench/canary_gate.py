"""How long the canary gate takes to decide: iris prepared by Spark, two logistic regressions of it exported from a
run that read the train split (so each version's lineage names its training dataset), served with the canary at
50%, `--requests` requests of 10 training rows sent to each version, then `serving.canary_gate` in dry-run (it
decides and records, changes nothing) `--repeat` times. The time is the gate's own: reading the inference log,
the skew report of the canary's requests against its training dataset, the prediction drift, the error rates and
latencies.

    python bench/canary_gate.py                    # 500 requests per version, 5 decisions
    python bench/canary_gate.py --requests 5000
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=500, help="requests (10 rows each) per version")
    parser.add_argument("--repeat", type=int, default=5, help="gate decisions timed (the median is printed)")
    args = parser.parse_args(argv)

    import joblib
    from sklearn.linear_model import LogisticRegression

    from hopsml import config, layout
    from hopsml.data import prepare_table, samples
    from hopsml.data.readers import reader
    from hopsml.fs import Storage
    from hopsml.model import registry
    from hopsml.serving import Canary
    from hopsml.serving.control import canary, lifecycle
    from hopsml.tracking.run_context import active_run

    work = tempfile.mkdtemp(prefix="hopsml-bench-gate-")
    settings = config.load(environ={}, root=os.path.join(work, "root"), project="bench")
    csv = os.path.join(work, "iris.csv")
    samples.write_table(csv, bad_rows=False)
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.master("local[2]").appName("canary-gate-bench").getOrCreate()
    try:
        prepare_table(csv, "iris", label="species", standardize=True, settings=settings, spark=spark)
    finally:
        spark.stop()
    for run, c in ((1, 1.0), (2, 0.5)):
        with active_run(Storage(settings.root), layout.ExperimentDir.of("bench", "local-1", run)):
            batches = list(reader("iris", split="train", shuffle=False, settings=settings))
            features = np.concatenate([b["features"] for b in batches]).astype(np.float64)
            labels = np.concatenate([b["label"] for b in batches])
            joblib.dump(LogisticRegression(C=c, max_iter=500).fit(features, labels), f"{work}/m{run}.joblib")
            registry.export(f"{work}/m{run}.joblib", "iris", settings=settings)
    lifecycle.create_or_update("gated", "Models/iris", "PYTHON", model_version=1,
                               canary=Canary(version=2, traffic_percent=50), settings=settings)
    serving = lifecycle.start("gated", settings=settings)
    try:
        url = f"http://127.0.0.1:{serving.internal_port}/v1/models/gated/labels/"
        for label in ("stable", "canary"):
            for i in range(args.requests):
                start = (i * 10) % (len(features) - 10)
                body = json.dumps({"instances": features[start:start + 10].tolist()}).encode()
                urllib.request.urlopen(urllib.request.Request(url + f"{label}:predict", data=body, method="POST"),
                                       timeout=60).read()
    finally:
        lifecycle.stop("gated", settings=settings)   # the log's last records are written as it stops
    times, report = [], {}
    for _ in range(args.repeat):
        started = time.perf_counter()
        report = canary.gate("gated", min_requests=10, max_p99_ratio=50.0, act=False, settings=settings)
        times.append(time.perf_counter() - started)
    print(f"{args.requests} requests of 10 rows per version; the gate's decision: {report['decision']} "
          f"({'; '.join(report['reasons']) or 'no reason against it'})")
    print(f"gate decision time: median {statistics.median(times) * 1e3:.0f} ms, min {min(times) * 1e3:.0f} ms, "
          f"max {max(times) * 1e3:.0f} ms over {args.repeat} decisions ({report['figures']['skew']['rows']} canary "
          "rows judged)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
