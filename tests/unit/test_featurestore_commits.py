"""Commits under stress, with real processes: two processes inserting into one group at once both land (no
commit lost), and a process killed in the middle of an insert leaves the table at a whole commit."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

pytest.importorskip("deltalake")
pytest.importorskip("duckdb")

from hopsml import config
from hopsml.featurestore.store import FeatureStore

INSERTER = """
import sys, datetime as dt
import pandas as pd
from hopsml import config
from hopsml.featurestore.store import FeatureStore

root, first, count, rows = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
fg = FeatureStore(config.load(environ={}, root=root, project="c")).get_or_create_feature_group(
    "events", 1, primary_key=["id"], event_time="ts")
for batch in range(first, first + count):
    ids = range(batch * rows, (batch + 1) * rows)
    fg.insert(pd.DataFrame({"id": list(ids), "ts": [dt.datetime(2024, 1, 1)] * rows, "batch": [batch] * rows}))
    print("committed", batch, flush=True)
"""


def _start(root, first, count, rows):
    return subprocess.Popen([sys.executable, "-c", INSERTER, str(root), str(first), str(count), str(rows)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _group(root):
    return FeatureStore(config.load(environ={}, root=str(root), project="c")).get_feature_group("events", 1)


def test_two_processes_inserting_at_once_lose_no_commit(tmp_path):
    root = tmp_path / "root"
    seed = _start(root, 0, 1, 10)   # the group exists before the race
    assert seed.wait(120) == 0, seed.stderr.read()
    racers = [_start(root, 1, 6, 10), _start(root, 100, 6, 10)]
    for racer in racers:
        assert racer.wait(300) == 0, racer.stderr.read()
    rows = _group(root).read()
    assert sorted(set(rows["batch"])) == [0, *range(1, 7), *range(100, 106)]
    assert len(rows) == 13 * 10 and rows["id"].is_unique
    assert len(_group(root).table.commits()) == 13


def test_a_process_killed_mid_insert_leaves_whole_commits(tmp_path):
    root = tmp_path / "root"
    inserter = _start(root, 0, 1000, 20_000)
    committed = 0
    deadline = time.monotonic() + 120
    while committed < 3 and time.monotonic() < deadline:   # let a few commits land, then kill it mid-way
        line = inserter.stdout.readline()
        committed += line.startswith("committed")
    time.sleep(0.05 * (os.getpid() % 7))
    inserter.send_signal(signal.SIGKILL)
    inserter.wait(30)
    fg = _group(root)
    rows = fg.read()
    batches = rows.groupby("batch").size()
    assert committed >= 3 and len(batches) >= committed
    assert (batches == 20_000).all()          # every batch there is whole
    assert sorted(batches.index) == list(range(len(batches)))   # and in order: no commit half-applied
    fg.insert(rows.head(1).assign(batch=-1))  # the table takes commits after the kill
    assert len(fg.read()) == len(rows)
