"""Random feature groups for the point-in-time tests, and the brute-force answer they are checked against."""

from __future__ import annotations

import datetime as dt
import random

import pandas as pd

T0 = dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)


def minutes(m: int) -> dt.datetime:
    return T0 + dt.timedelta(minutes=m)


def random_groups(seed: int, labels: int = 300, rows: int = 600, keys: int = 12):
    rng = random.Random(seed)

    def unique(count, key_name):
        seen = {}
        while len(seen) < count:
            seen[(rng.randrange(keys), rng.randrange(2000))] = rng.random()
        return pd.DataFrame({key_name: [k for k, _ in seen], "ts": [minutes(m) for _, m in seen],
                             "v": list(seen.values())})

    label = unique(labels, "customer").rename(columns={"v": "target"})
    spend = unique(rows, "customer").rename(columns={"v": "spend"})
    risk = unique(rows // 2, "customer").rename(columns={"v": "risk"})
    return label, spend, risk


def oracle(label: pd.DataFrame, group: pd.DataFrame, column: str, ttl: dt.timedelta | None = None
           ) -> list[float | None]:
    """For each label row, `column` of its key's newest group row at or before the row's time (and no older
    than `ttl` when given), else None."""
    out = []
    for key, when in zip(label["customer"], label["ts"]):
        earlier = group[(group["customer"] == key) & (group["ts"] <= when)]
        if ttl is not None:
            earlier = earlier[earlier["ts"] >= when - ttl]
        out.append(None if earlier.empty else float(earlier.loc[earlier["ts"].idxmax(), column]))
    return out
