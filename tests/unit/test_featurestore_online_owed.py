"""The online store cannot drift silently: an insert records the online write it owes before its offline commit and
clears it after; a process killed in between leaves the record, which every reader reports, and the next insert (or
`hopsml fs sync`) rewrites the online side from the offline table. Same-key writes reach the online store in commit
order, even while another process holds the store's write lock. Each insert here runs in a process of its own, as
two notebooks or a job and a notebook would."""

from __future__ import annotations

import json
import logging
import os
import random
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time

import pandas as pd
import pytest

pytest.importorskip("deltalake")
pytest.importorskip("duckdb")

from hopsml import cli, config
from hopsml.featurestore.store import FeatureStore

INSERTER = textwrap.dedent("""
    import os, signal, sys
    import pandas as pd
    from hopsml import config
    from hopsml.featurestore.group import FeatureGroup
    from hopsml.featurestore.store import FeatureStore

    mode, first, count, value = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    if mode == "die-before-online":   # the offline commit lands, the process dies before the online write
        FeatureGroup._write_online = lambda *a, **k: os.kill(os.getpid(), signal.SIGKILL)
    group = FeatureStore(config.load()).get_feature_group("drift", 1)
    for n in range(first, first + count):
        group.insert(pd.DataFrame({"id": range(200), "value": [f"{value}{n}"] * 200}))
        print("inserted", n, flush=True)
""")


@pytest.fixture
def store(root):
    fs = FeatureStore(config.load())
    group = fs.create_feature_group("drift", primary_key=["id"], online_enabled=True)
    group.insert(pd.DataFrame({"id": range(200), "value": ["start"] * 200}))
    return fs


def _inserter(tmp_path, *args: object) -> subprocess.Popen:
    script = tmp_path / "inserter.py"
    script.write_text(INSERTER)
    return subprocess.Popen([sys.executable, str(script), *map(str, args)], stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)})


def _divergence(fs: FeatureStore) -> int:
    """Keys whose online value is not the offline table's newest."""
    group = fs.get_feature_group("drift", 1)
    offline = dict(zip(*(group.read()[c] for c in ("id", "value"))))
    online = fs.online().rows(group, group.table.schema()).to_pandas()
    got = dict(zip(online["id"], online["value"]))
    return sum(got.get(key) != value for key, value in offline.items())


def test_an_insert_killed_after_its_commit_is_reported_and_completed_by_the_next(store, tmp_path, capsys, caplog):
    died = _inserter(tmp_path, "die-before-online", 1, 1, "lost")
    died.wait(120)
    assert died.returncode == -signal.SIGKILL
    group = store.get_feature_group("drift", 1)
    assert _divergence(store) == 200   # the offline commit landed, the online write never happened
    owed = group.online_behind()
    assert owed is not None and owed["since_commit"] == 1
    assert cli.main(["fs", "groups", "show", "drift"]) == 0
    assert "BEHIND: misses the commits since 1" in capsys.readouterr().out
    view = store.create_feature_view("drift_view", group.select_all())
    view.init_serving()
    with caplog.at_level(logging.WARNING, logger="hopsml.featurestore.store"):
        assert view.get_feature_vector({"id": 3}) == [3, "start"]   # what the online side has
    assert "miss the commits since 1" in caplog.text
    assert cli.main(["fs", "check-online", "drift_view"]) == 1   # behind: check-online fails and says so
    assert "BEHIND" in capsys.readouterr().err

    done = _inserter(tmp_path, "plain", 2, 1, "next")
    assert done.wait(120) == 0
    assert _divergence(store) == 0 and group.online_behind() is None
    assert view.get_feature_vector({"id": 3}) == [3, "next2"]


def test_kill_9_at_random_points_leaves_no_divergence_after_the_next_insert_or_sync(store, tmp_path):
    rng = random.Random(57)
    for round_ in range(4):
        running = _inserter(tmp_path, "plain", 100 * round_, 50, "r")
        assert running.stdout is not None
        running.stdout.readline()   # one insert done: the loop is under way
        time.sleep(rng.uniform(0.0, 0.3))
        running.kill()
        running.wait(60)
        if round_ % 2:
            store.get_feature_group("drift", 1).sync_online()
        else:
            assert _inserter(tmp_path, "plain", 100 * round_ + 99, 1, "after").wait(120) == 0
        assert _divergence(store) == 0, f"round {round_}"
        assert store.get_feature_group("drift", 1).online_behind() is None


def test_same_key_writes_land_online_in_commit_order_while_another_process_holds_the_write_lock(store, tmp_path):
    path = store.online().path
    holder = sqlite3.connect(path, timeout=30)
    holder.execute("BEGIN IMMEDIATE")   # a third process's write lock on the online store
    group = store.get_feature_group("drift", 1)
    version = group.table.latest_version()
    first = _inserter(tmp_path, "plain", 1, 1, "first")
    deadline = time.monotonic() + 120
    while group.table.latest_version() == version:   # the first insert's offline commit has landed
        assert time.monotonic() < deadline, "the first insert never committed"
        time.sleep(0.05)
    second = _inserter(tmp_path, "plain", 2, 1, "second")
    time.sleep(1.0)   # the second insert is started and waiting too
    holder.rollback()
    holder.close()
    assert first.wait(120) == 0 and second.wait(120) == 0
    assert group.read()["value"].unique().tolist() == ["second2"]   # the second commit is the newest offline
    assert _divergence(store) == 0   # and online


def test_the_owed_record_is_json_a_person_can_read(store):
    group = store.get_feature_group("drift", 1)
    owed = store.owe_online(group, 7)
    assert owed is None
    record = store.storage.read_json(store._owed_path(group))
    assert record["since_commit"] == 7 and record["pid"] == os.getpid() and json.dumps(record)
    assert store.owe_online(group, 9)["since_commit"] == 7   # an earlier debt keeps its first commit
    store.paid_online(group)
    assert group.online_behind() is None
