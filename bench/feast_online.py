"""Feast's `get_online_features` on its SQLite online store, timed for `bench/feature_store.py --online`.

Run by bench/feature_store.py with the Python of an environment that has Feast (`--feast-python`), never imported
by hopsml (bench/feature_store.py imports `timed` from here, which needs nothing but the standard library). It
makes a Feast repository in WORKDIR (provider local, the file offline store over DATA.parquet, the sqlite online
store, a file registry cached for the whole run), one FeatureView `g` over the entity `id` with the file's other
columns as features, applies it and materializes every row into the online store, then prints one JSON line
(`{"ready": ..., "materialize_s": ...}`) and answers requests, one JSON line each on stdin:

    {"sample": [1, 2, ...]}                               -> {"values": {"1": {"x0": ..., ...}, ...}}
    {"keys": [[1], [5], ...], "threads": 16, "warm": 20}  -> the figures of `timed`: one call per list of keys

each call being `store.get_online_features(features=[...], entity_rows=[{"id": k}, ...]).to_dict()`.

    python bench/feast_online.py WORKDIR DATA.parquet
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

REPO_YAML = """project: bench_online
provider: local
registry:
  path: {root}/registry.db
  cache_ttl_seconds: 0
offline_store:
  type: file
online_store:
  type: sqlite
  path: {root}/online.db
entity_key_serialization_version: 3
"""


def timed(call: Callable[[Any], Any], jobs: Sequence[Any], threads: int, warm: int = 0) -> dict[str, float]:
    """`call(job)` for every job, spread over `threads` callers started together, each having first made `warm`
    calls of its share untimed (a thread's first call may open its connection): each call's latency, the calls
    and the vectors (keys) per second over the wall time. Both sides of the benchmark are timed with it."""
    shares = [list(jobs[i::threads]) for i in range(threads)]
    latencies: list[list[float]] = [[] for _ in range(threads)]
    errors: list[BaseException] = []
    start = threading.Barrier(threads + 1)

    def caller(index: int) -> None:
        own = latencies[index]
        try:
            for job in shares[index][:warm]:
                call(job)
        except Exception as error:  # noqa: BLE001 (raised again by timed, not lost in the thread)
            errors.append(error)
        start.wait()
        try:
            for job in [] if errors else shares[index]:
                began = time.perf_counter()
                call(job)
                own.append(time.perf_counter() - began)
        except Exception as error:  # noqa: BLE001 (as above)
            errors.append(error)

    workers = [threading.Thread(target=caller, args=(i,), daemon=True) for i in range(threads)]
    for worker in workers:
        worker.start()
    start.wait()
    began = time.perf_counter()
    for worker in workers:
        worker.join()
    wall = time.perf_counter() - began
    if errors:
        raise errors[0]
    ms = sorted(x * 1e3 for own in latencies for x in own)
    vectors = sum(len(job) for job in jobs)
    return {"calls": len(ms), "p50_ms": _percentile(ms, 50), "p99_ms": _percentile(ms, 99),
            "calls_per_s": len(ms) / wall, "vectors_per_s": vectors / wall, "wall_s": wall}


def _percentile(ordered: Sequence[float], q: float) -> float:
    """numpy's default (linear) percentile of an ascending list."""
    at = (len(ordered) - 1) * q / 100
    low = int(at)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (at - low)


def main(workdir: str, data_path: str) -> None:
    import datetime as dt

    import pyarrow.parquet as pq
    from feast import Entity, FeatureStore, FeatureView, Field, FileSource
    from feast.types import Float64, Int64, String
    from feast.value_type import ValueType

    with open(os.path.join(workdir, "feature_store.yaml"), "w") as f:
        f.write(REPO_YAML.format(root=workdir))
    store = FeatureStore(repo_path=workdir)
    schema = pq.read_schema(data_path)
    kinds = {"double": Float64, "int64": Int64, "string": String, "large_string": String}
    features = [f for f in schema if f.name not in ("id", "ts")]
    entity = Entity(name="id", join_keys=["id"], value_type=ValueType.INT64)
    view = FeatureView(name="g", entities=[entity], ttl=dt.timedelta(0), online=True,
                       source=FileSource(name="g_source", path=data_path, timestamp_field="ts"),
                       schema=[Field(name=f.name, dtype=kinds[str(f.type)]) for f in features])
    with contextlib.redirect_stdout(sys.stderr):   # Feast's progress lines; stdout carries the answers alone
        store.apply([entity, view])
        began = time.perf_counter()
        store.materialize(dt.datetime(2000, 1, 1, tzinfo=dt.timezone.utc), dt.datetime.now(dt.timezone.utc))
    print(json.dumps({"ready": True, "materialize_s": time.perf_counter() - began}), flush=True)
    refs = [f"g:{f.name}" for f in features]
    names = [f.name for f in features]

    def lookup(keys: Sequence[int]) -> dict[str, list[Any]]:
        return store.get_online_features(features=refs, entity_rows=[{"id": int(k)} for k in keys]).to_dict()

    for line in sys.stdin:
        request = json.loads(line)
        if "sample" in request:
            answer = lookup(request["sample"])
            values = {str(k): {n: answer[n][i] for n in names} for i, k in enumerate(request["sample"])}
            print(json.dumps({"values": values}), flush=True)
        else:
            print(json.dumps(timed(lookup, request["keys"], int(request["threads"]), int(request.get("warm", 0)))),
                  flush=True)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
