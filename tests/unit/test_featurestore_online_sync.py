"""`hopsml fs sync` at scale, on both stores (embedded SQLite, and a real MariaDB server): the online table is
rebuilt from DuckDB's newest row per key in bounded pieces (the pieces the process held are counted), into a
staging table swapped in at once, so a reader during the sync sees the old table or the new one; a sync that
fails leaves the table as it was; the owed-write record is paid as before."""

from __future__ import annotations

import datetime as dt
import threading

import pandas as pd
import pytest

pytest.importorskip("deltalake")
pytest.importorskip("duckdb")

from hopsml import config
from hopsml.featurestore import online_sync
from hopsml.featurestore.online import STAGING, store_for, table_name
from hopsml.featurestore.store import FeatureStore

T0 = dt.datetime(2024, 6, 1, tzinfo=dt.timezone.utc)
KEYS = 3000


@pytest.fixture(params=["sqlite", pytest.param("mariadb", marks=pytest.mark.slow)])
def fs(request, tmp_path):
    online = request.getfixturevalue("mariadb_url") if request.param == "mariadb" else ""
    store = FeatureStore(config.load(environ={}, root=str(tmp_path / "root"), project=f"sync{tmp_path.name[-6:]}",
                                     online_store=online))
    yield store
    store.online().close()


def _group(fs):
    """KEYS keys, each with two to four rows over two inserts, one of them a backfill older than the first."""
    group = fs.create_feature_group("limits", primary_key=["id"], event_time="ts", online_enabled=True)
    ids = list(range(KEYS))
    group.insert(pd.DataFrame({"id": ids + ids[::2], "ts": [T0] * KEYS + [T0 + dt.timedelta(hours=2)] * (KEYS // 2),
                               "limit": [float(i) for i in ids] + [i + 0.5 for i in ids[::2]],
                               "country": ["SE"] * KEYS + ["DE"] * (KEYS // 2)}))
    group.insert(pd.DataFrame({"id": ids[::3], "ts": [T0 - dt.timedelta(hours=1)] * len(ids[::3]),
                               "limit": [-1.0] * len(ids[::3]), "country": ["XX"] * len(ids[::3])}))
    return group


def _newest(group) -> set[tuple]:
    """The oracle: each key's row with the latest event time, from the offline rows by pandas."""
    rows = group.read().sort_values("ts").groupby("id").tail(1)
    return {(int(r.id), float(r.limit), r.country) for r in rows.itertuples()}


def _online(store, group) -> set[tuple]:
    """The online table as a connection of its own reads it (one statement: one consistent read)."""
    table = store._q(table_name(group))
    connection = store.connection()
    cursor = connection.cursor()
    try:
        cursor.execute(f"SELECT {store._q('id')}, {store._q('limit')}, {store._q('country')} FROM {table}")
        found = {(int(i), float(v), c) for i, v, c in cursor.fetchall()}
        connection.commit()   # ends MySQL's read view, so the next read sees what was committed since
        return found
    finally:
        cursor.close()


def test_sync_streams_bounded_pieces_into_a_staging_table_readers_see_old_or_new(fs):
    group = _group(fs)
    online = fs.online()
    new = _newest(group)
    assert len(new) == KEYS and _online(online, group) == new       # the inserts kept the newest row per key
    assert {c for _, _, c in new} == {"SE", "DE"}                   # the backfill (XX) overwrote none
    mark = "%s" if online.dialect == "mysql" else "?"
    online.execute(f"UPDATE {online._q(table_name(group))} SET {online._q('limit')} = 999 WHERE "
                   f"{online._q('id')} < {mark}", [100])            # behind the store's back: what sync repairs
    old = _online(online, group)
    assert old != new

    reader = store_for(online.url)                                  # another connection, as a serving host has
    seen: list[set[tuple]] = []
    done = threading.Event()

    def read_until_done() -> None:
        try:
            while not done.is_set():
                seen.append(_online(reader, group))
        finally:
            reader.close()

    thread = threading.Thread(target=read_until_done, daemon=True)
    thread.start()
    pieces: list[int] = []
    during: list[bool] = []

    def observe(rows: int) -> None:
        pieces.append(rows)
        during.append(_online(store_for(online.url), group) == old)   # the live table, untouched so far

    try:
        report = online_sync.rebuild(group, batch_rows=400, observe=observe)
    finally:
        done.set()
        thread.join(timeout=120)
    assert not thread.is_alive()
    assert max(pieces) <= 400 and sum(pieces) == KEYS and len(pieces) >= KEYS // 400   # never more held at once
    assert (report.rows, report.largest, report.pieces) == (KEYS, max(pieces), len(pieces))
    assert all(during)
    assert _online(online, group) == new
    assert seen and all(s in (old, new) for s in seen)              # never a half table
    cursor = online.connection().cursor()
    assert table_name(group) + STAGING not in online._tables(cursor)
    cursor.close()


def test_a_failed_sync_leaves_the_table_as_it_was_and_the_next_one_completes(fs):
    group = _group(fs)
    online = fs.online()
    online.execute(f"DELETE FROM {online._q(table_name(group))}")   # the online side lost its rows
    calls = []

    def fail_on_the_third(rows: int) -> None:
        calls.append(rows)
        if len(calls) == 3:
            raise RuntimeError("the process died mid-sync")

    with pytest.raises(RuntimeError, match="mid-sync"):
        online_sync.rebuild(group, batch_rows=500, observe=fail_on_the_third)
    assert online.count(group) == 0                                  # as it was: no half table swapped in
    assert group.sync_online() == KEYS                               # through the group: the owed record paid
    assert _online(online, group) == _newest(group) and group.online_behind() is None
    assert group.online_synced is not None


def test_a_sync_of_a_group_without_event_time_or_rows_keeps_replace_semantics(fs):
    plain = fs.create_feature_group("plain", primary_key=["id"], online_enabled=True)
    plain.insert(pd.DataFrame({"id": [1, 2, 3], "limit": [1.0, 2.0, 3.0], "country": ["SE", "DE", "FR"]}))
    online = fs.online()
    online.execute(f"INSERT INTO {online._q(table_name(plain))} ({online._q('id')}) VALUES (99)")   # a stray row
    sizes: list[int] = []
    assert online_sync.rebuild(plain, batch_rows=2, observe=sizes.append).rows == 3
    assert sizes == [2, 1]
    assert sorted(online.rows(plain, plain.table.schema())["id"].to_pylist()) == [1, 2, 3]   # exactly these
