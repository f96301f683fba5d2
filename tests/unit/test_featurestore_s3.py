"""Feature groups under an S3 root (a real S3 API on 127.0.0.1): delta-rs writes and commits the tables with
S3's conditional writes, Arrow reads them back, the embedded engine joins them point in time with the answer
it gives on a local root, a partitioned group and a training dataset live there too, and two processes
inserting at once both land."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pandas as pd
import pytest

pytest.importorskip("deltalake")
pytest.importorskip("duckdb")
pytest.importorskip("moto")

from featurestore_data import minutes, random_groups

from hopsml import config
from hopsml.featurestore.store import FeatureStore


@pytest.fixture(scope="module")
def s3_endpoint(tmp_path_factory):
    """An S3 server in a process of its own: delta-rs holds the GIL while it waits on some requests, which a
    server thread in this process would need to answer them."""
    import socket
    import time
    import urllib.request

    from s3 import use_test_credentials

    use_test_credentials()
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    log = open(tmp_path_factory.mktemp("moto") / "server.log", "wb")
    server = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                              stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 60
    while True:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/moto-api/", timeout=2)
            break
        except OSError:
            if server.poll() is not None or time.monotonic() > deadline:
                server.kill()
                pytest.fail("the S3 server did not start")
            time.sleep(0.2)
    import boto3

    boto3.client("s3", endpoint_url=f"http://127.0.0.1:{port}", region_name="us-east-1").create_bucket(
        Bucket="hopsml-test")
    yield f"127.0.0.1:{port}"
    server.terminate()
    server.wait(30)
    log.close()


@pytest.fixture
def s3_root(s3_endpoint, monkeypatch):
    from s3 import s3_root

    monkeypatch.delenv("HOPSML_CONF", raising=False)
    return s3_root(s3_endpoint)


def _rows(frame: pd.DataFrame) -> list[tuple]:
    frame = frame.sort_values(["customer", "ts"]).reset_index(drop=True)
    return [tuple(None if pd.isna(v) else v for v in row) for row in frame.itertuples(index=False)]


def test_groups_on_s3_give_what_they_give_on_a_local_root(s3_root, tmp_path):
    answers = []
    for root in (s3_root, str(tmp_path / "local")):
        fs = FeatureStore(config.load(environ={}, root=root, project="remote"))
        label, spend, risk = random_groups(8, labels=120, rows=240)
        groups = {}
        for name, frame in (("label", label), ("spend", spend), ("risk", risk)):
            groups[name] = fs.create_feature_group(name, primary_key=["customer"], event_time="ts",
                                                   partition_key=["customer"] if name == "risk" else None)
            groups[name].insert(frame.iloc[: len(frame) // 2])
            groups[name].insert(frame.iloc[len(frame) // 2:])
        query = groups["label"].select_all().join(groups["spend"].select(["spend"])).join(
            groups["risk"].select(["risk"]))
        answers.append(_rows(query.read(read_options={"engine": "duckdb"})))
        assert groups["spend"].table.remote == (root == s3_root)
    assert answers[0] == answers[1] and len(answers[0]) == 120


def test_upserts_time_travel_statistics_and_a_training_dataset_on_s3(s3_root):
    settings = config.load(environ={}, root=s3_root, project="remote")
    fs = FeatureStore(settings)
    fg = fs.create_feature_group("payments", primary_key=["id"], event_time="ts")
    fg.insert(pd.DataFrame({"id": [1, 2], "ts": [minutes(0)] * 2, "amount": [1.0, 2.0], "fraud": [0, 1]}))
    first = fg.table.commits()[0]
    fg.insert(pd.DataFrame({"id": [2, 3], "ts": [minutes(0)] * 2, "amount": [20.0, 3.0], "fraud": [1, 0]}))
    assert fg.table.uri.startswith("s3://hopsml-test/")
    assert sorted(fg.read()["amount"]) == [1.0, 3.0, 20.0]
    assert sorted(fg.read(wallclock_time=first.committed_ms)["amount"]) == [1.0, 2.0]
    assert (fg.commit_details()[fg.table.commits()[0].version]["rowsUpdated"]) == 1
    assert fg.get_statistics()["columns"]["amount"]["max"] == 20.0
    view = fs.create_feature_view("fraud", query=fg.select_all(), labels=["fraud"])
    version, _ = view.create_training_data()
    from hopsml.data.readers import reader

    batches = list(reader(view.training_dataset_name(version), split="train", shuffle=False, settings=settings))
    assert sum(len(b["label"]) for b in batches) == 3
    assert fs.get_feature_group("payments").saved


def test_two_processes_inserting_into_one_group_on_s3_both_land(s3_root):
    fs = FeatureStore(config.load(environ={}, root=s3_root, project="remote"))
    fs.create_feature_group("clicks", primary_key=["id"], event_time="ts").insert(
        pd.DataFrame({"id": [0], "ts": [minutes(0)], "n": [0]}))
    script = textwrap.dedent("""
        import sys
        import pandas as pd
        from hopsml import config
        from hopsml.featurestore.store import FeatureStore
        fs = FeatureStore(config.load(environ={}, root=sys.argv[1], project="remote"))
        group = fs.get_feature_group("clicks", 1)
        base = int(sys.argv[2])
        for i in range(3):
            group.insert(pd.DataFrame({"id": [base + i], "ts": [pd.Timestamp("2024-01-01", tz="UTC")], "n": [i]}))
    """)
    env = {k: v for k, v in os.environ.items() if k != "HOPSML_CONF"}
    workers = [subprocess.Popen([sys.executable, "-c", script, s3_root, str(base)], env=env,
                                stderr=subprocess.PIPE, text=True) for base in (100, 200)]
    outcomes = [(w.wait(timeout=300), w.stderr.read()) for w in workers]
    assert [code for code, _ in outcomes] == [0, 0], [err[-2000:] for _, err in outcomes]
    group = fs.get_feature_group("clicks", 1)
    assert sorted(group.read()["id"]) == [0, 100, 101, 102, 200, 201, 202]
    assert len(group.table.commits()) == 7
