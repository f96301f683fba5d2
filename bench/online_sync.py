"""`hopsml fs sync` of a large group: rows/s and the peak memory (RSS) of the process that syncs.

    python bench/online_sync.py [--keys 10000000] [--history 0.2] [--way streamed|whole] [--online-store URL]
                                [--batch-rows 20000] [--root /tmp/hopsml-sync-bench]

Builds once (kept under --root, reused by later runs with the same --keys) an online-enabled group with `--keys`
keys and `--history` times as many older rows, written as Parquet straight into its Delta table; then, in a fresh
process of its own, syncs its online side and prints the rows written, the seconds, rows/s and the process's
peak RSS. `--way streamed` is `fg.sync_online()` (DuckDB's newest rows per key, streamed in pieces of
--batch-rows into a staging table swapped in); `--way whole` is the write it replaced (the offline table read
into memory, then one transaction), for comparison.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import resource
import subprocess
import sys
import time
from typing import Any


def build(root: str, keys: int, history: float) -> None:
    """The group `sync_bench` with `keys` keys (their newest rows) and `history` times as many older rows."""
    import numpy as np
    from deltalake import write_deltalake

    from hopsml import config
    from hopsml.featurestore.store import FeatureStore

    fs = FeatureStore(config.load(environ={}, root=root, project="bench"))
    if fs.group_saved("sync_bench", 1):
        return
    group = fs.create_feature_group("sync_bench", primary_key=["id"], event_time="ts", online_enabled=True,
                                    statistics_config=False)
    group.insert(_rows(np.arange(1), 7200))   # the group's record and table; then the bulk, 1M rows a file
    older = int(keys * history)
    t0 = time.time()
    for start in range(0, keys + older, 1_000_000):
        ids = np.arange(start, min(start + 1_000_000, keys + older))
        chunk = _rows(np.where(ids < keys, ids, ids - keys), np.where(ids < keys, 3600, 0))
        write_deltalake(group.table.uri, chunk, mode="append")
    print(f"built {keys} keys + {older} older rows in {time.time() - t0:.0f} s", flush=True)


def _rows(ids: Any, offset_s: Any) -> Any:
    """Rows of `ids` (a numpy array), their event times `offset_s` seconds (and a few more) into 2024."""
    import numpy as np
    import pyarrow as pa

    base = int(dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc).timestamp() * 1_000_000)
    ts = pa.array(base + (np.asarray(offset_s) + np.asarray(ids) % 1000) * 1_000_000, pa.int64())
    return pa.table({"id": pa.array(ids, pa.int64()), "ts": ts.cast(pa.timestamp("us", "UTC")),
                     "amount": pa.array(np.asarray(ids) * 0.5 + np.asarray(offset_s), pa.float64()),
                     "country": pa.array(np.where(np.asarray(ids) % 2 == 0, "SE", "DE"), pa.string())})


def sync(root: str, way: str, online_store: str, batch_rows: int) -> None:
    from hopsml import config
    from hopsml.featurestore.store import FeatureStore

    fs = FeatureStore(config.load(environ={}, root=root, project="bench", online_store=online_store,
                                  online_batch_rows=batch_rows))
    group = fs.get_feature_group("sync_bench", 1)
    t0 = time.perf_counter()
    if way == "streamed":
        rows = group.sync_online()
    else:
        rows = fs.online().write(group, group.table.read(), replace=True)
    seconds = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"{way}: {rows} rows in {seconds:.1f} s = {rows / seconds:,.0f} rows/s; peak RSS {peak:,.0f} MiB "
          f"(store: {fs.online().dialect}, pieces of {batch_rows} rows)", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keys", type=int, default=10_000_000)
    parser.add_argument("--history", type=float, default=0.2)
    parser.add_argument("--way", choices=("streamed", "whole"), default="streamed")
    parser.add_argument("--online-store", default="")
    parser.add_argument("--batch-rows", type=int, default=20_000)
    parser.add_argument("--root", default="/tmp/hopsml-sync-bench")
    parser.add_argument("--only-sync", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    root = os.path.join(args.root, str(args.keys))
    if args.only_sync:
        sync(root, args.way, args.online_store, args.batch_rows)
        return
    build(root, args.keys, args.history)
    # a fresh process: its peak RSS is the sync's alone
    subprocess.run([sys.executable, __file__, "--only-sync", "--keys", str(args.keys), "--way", args.way,
                    "--online-store", args.online_store, "--batch-rows", str(args.batch_rows), "--root", args.root],
                   check=True, timeout=6 * 3600)


if __name__ == "__main__":
    main()
