"""Feast's local offline store building the point-in-time training data of bench/feature_store.py, timed.

Run by bench/feature_store.py with the Python of an environment that has Feast (`--feast-python`), never imported
by hopsml. It makes a Feast repository in WORKDIR (provider local, the file offline store, a file registry; the
sqlite online store is never used), one FeatureView per group Parquet file with no TTL (Feast's `ttl=0`: any
earlier row counts, as in hopsml), applies it, prints "ready", then times
`get_historical_features(entity_df, features).to_df()` and writes the answer to OUT with the label time back in
`ts`. Prints the seconds and the process's peak resident GiB as the last line of stdout; exits 3 when it runs
out of memory (the bench caps its address space).

    python bench/feast_pit.py WORKDIR LABEL.parquet OUT.parquet GROUP.parquet [GROUP.parquet ...]
"""

from __future__ import annotations

import os
import resource
import sys
import time

import pandas as pd
import pyarrow.parquet as pq

REPO_YAML = """project: bench
provider: local
registry: {root}/registry.db
offline_store:
  type: file
online_store:
  type: sqlite
  path: {root}/online.db
entity_key_serialization_version: 3
"""


def main(workdir: str, label_path: str, out_path: str, group_paths: list[str]) -> None:
    from feast import Entity, FeatureStore, FeatureView, Field, FileSource
    from feast.types import Float64
    from feast.value_type import ValueType

    with open(os.path.join(workdir, "feature_store.yaml"), "w") as f:
        f.write(REPO_YAML.format(root=workdir))
    store = FeatureStore(repo_path=workdir)
    entity = Entity(name="id", join_keys=["id"], value_type=ValueType.INT64)
    views, refs = [], []
    for g, path in enumerate(group_paths):
        features = [c for c in pq.read_schema(path).names if c not in ("id", "ts")]
        source = FileSource(name=f"g{g}_source", path=path, timestamp_field="ts")
        views.append(FeatureView(name=f"g{g}", entities=[entity], source=source, online=False,
                                 schema=[Field(name=c, dtype=Float64) for c in features]))
        refs += [f"g{g}:{c}" for c in features]
    store.apply([entity, *views])
    # "ts" would collide with the groups' own time column in Feast's merge
    entity_df = pd.read_parquet(label_path).rename(columns={"ts": "event_timestamp"})
    print("ready", flush=True)
    began = time.perf_counter()
    try:
        answer = store.get_historical_features(entity_df=entity_df, features=refs).to_df()
    except MemoryError as e:
        print(f"out of memory: {e!r}", file=sys.stderr)
        sys.exit(3)
    seconds = time.perf_counter() - began
    answer.rename(columns={"event_timestamp": "ts"}).to_parquet(out_path)
    print(seconds, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, flush=True)


if __name__ == "__main__":
    if len(sys.argv) < 5:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:])
