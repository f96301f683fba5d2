"""`hopsml ui` over a root on S3 (a local S3 server): the same pages, logs and downloads as on a
local folder, and no credentials from the root URI on any page."""

from __future__ import annotations

import json

import pytest
from s3 import s3_root, s3_server

from hopsml import config, layout
from hopsml.data import dataset as ds
from hopsml.fs import Storage
from hopsml.tracking import record as records
from hopsml.ui import create_app

pytest.importorskip("moto")
# Joined at run time: the versioned program (this file) is shown on the run page and must not hold them.
KEY, SECRET = "AKID" + "UITEST", "ui" + "secret123"


def _train(lr):
    return {"accuracy": lr}


@pytest.fixture(scope="module")
def s3_site():
    with s3_server() as endpoint:
        root = s3_root(endpoint).replace("s3://", f"s3://{KEY}:{SECRET}@")
        storage = Storage(root)
        run = records.ExperimentRun.start(storage, "demo", "local-1700000000000", name="on-s3", fn=_train,
                                          hyperparameters={"lr": 0.3}, metric_key="accuracy")
        storage.write_text(run.dir.metrics, "".join(json.dumps({"step": s, "name": "accuracy", "value": s / 10}) + "\n"
                                                    for s in range(3)))
        storage.write_text(run.dir.output_log, "hello from s3\n")
        run.finish(metric=0.2)
        ddir = ds.DatasetDir.of("demo", "tiny")
        storage.write_json(ddir.manifest, {"kind": "table", "counts": {"read": 3, "written": 3, "rejected": 0},
                                           "splits": {"train": {"rows": 3}}})
        storage.write_bytes(ddir.success, b"")
        client = create_app(config.load(environ={}, root=root, project="demo")).test_client()
        yield {"client": client, "run": run.id}


def test_pages_logs_and_downloads_on_s3(s3_site):
    client, run = s3_site["client"], s3_site["run"]
    pages = {url: client.get(url) for url in ("/", "/p/demo/", f"/p/demo/runs/{run}", "/p/demo/datasets/",
                                              "/p/demo/datasets/tiny", "/p/demo/models/")}
    for url, response in pages.items():
        assert response.status_code == 200, url
        assert KEY not in response.get_data(as_text=True) and SECRET not in response.get_data(as_text=True), url
    assert f'data-id="{run}" data-state="FINISHED"' in pages["/p/demo/"].get_data(as_text=True)
    assert 'class="chart line" data-points="3"' in pages[f"/p/demo/runs/{run}"].get_data(as_text=True)
    assert client.get(f"/p/demo/runs/{run}/tail/output.log").get_json()["text"] == "hello from s3\n"
    assert client.get(f"/p/demo/runs/{run}/files/output.log").data == b"hello from s3\n"
    assert client.get(f"/p/demo/runs/{run}/files/../../x", follow_redirects=True).status_code == 404
    assert client.get(f"/p/demo/runs/{run}/files/{layout.RECORD}").status_code == 200
