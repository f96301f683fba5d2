"""The web view over a root where one record of each kind is malformed: every listing page answers 200, shows the
bad record as BROKEN with its reason and still lists the good ones; a serving's page does not show a file outside
the project that a hand-edited server.json names as its log."""

from __future__ import annotations

import json

import pytest

from hopsml import config, layout
from hopsml.data import dataset as ds
from hopsml.fs import Storage
from hopsml.serving import definition as defs
from hopsml.serving.server import state as states
from hopsml.tracking.record import ExperimentRecord
from hopsml.ui import create_app

pytest.importorskip("flask")

PROJECT = "test"
DEEP = b"[" * 100_000 + b"]" * 100_000
SECRET = "the-secret-line-of-a-file-outside-the-root"


@pytest.fixture
def site(root, tmp_path, monkeypatch):
    monkeypatch.setenv("HOPSML_LOG_DIR", str(tmp_path / "logs"))
    storage = Storage(str(root))
    good = ExperimentRecord(id="local-1_1", name="good-run", app_id="local-1", run_id=1, state="FINISHED")
    storage.write_json(layout.ExperimentDir.from_id(PROJECT, "local-1_1").record, good.to_dict())
    storage.write_bytes(layout.ExperimentDir.from_id(PROJECT, "local-1_2").record, DEEP)
    iris = json.dumps({"kind": "table", "fields": {}, "splits": {"train": {"rows": 120}}}).encode()
    for name, raw in (("iris", iris), ("deep", DEEP), ("alist", b"[]")):
        ddir = ds.DatasetDir.of(PROJECT, name)
        storage.write_bytes(ddir.manifest, raw)
        storage.write_text(ddir.success, "done\n")
    for name, raw in (("goodmodel", json.dumps({"name": "goodmodel", "version": 1, "project": PROJECT,
                                                "metrics": {"accuracy": 0.75}}).encode()), ("deepmodel", DEEP)):
        mdir = layout.ModelDir.of(PROJECT, name, 1)
        storage.write_bytes(mdir.record, raw)
        storage.write_text(mdir.done, "done\n")
    defs.write(storage, PROJECT, defs.ServingDefinition(name="good", model_path="Models/goodmodel", id=1,
                                                        model_name="goodmodel", model_version=1,
                                                        model_server=defs.PYTHON, inference_logging=None))
    storage.write_bytes(layout.ServingDir.of(PROJECT, "deep").definition, DEEP)
    outside = tmp_path / "private.txt"
    outside.write_text(SECRET + "\n")
    states.write(storage, PROJECT, "good", states.ServerState(state=states.FAILED, reason="crashed", log=str(outside)))
    storage.write_bytes(layout.join(layout.feature_group_dir(PROJECT, "deepgroup", 1), layout.GROUP_RECORD), DEEP)
    return create_app(config.load(root=str(root), project=PROJECT)).test_client()


def _page(client, url: str) -> str:
    response = client.get(url)
    text = response.get_data(as_text=True)
    assert response.status_code == 200, (url, text[:600])
    return text


def test_every_listing_shows_the_broken_record_and_the_good_ones(site):
    page = _page(site, f"/p/{PROJECT}/")
    assert "good-run" in page and 'data-id="local-1_2" data-state="BROKEN"' in page
    assert "experiment.json is nested deeper than 64 levels" in page
    rows = {row["id"]: row for row in site.get(f"/p/{PROJECT}/experiments.json").get_json()}
    assert rows["local-1_2"]["state"] == "BROKEN" and rows["local-1_1"]["state"] == "FINISHED"

    page = _page(site, f"/p/{PROJECT}/datasets/")
    assert 'data-id="iris"' in page and "train 120" in page
    assert 'data-id="deep"' in page and "dataset.json is nested deeper than 64 levels" in page
    assert 'data-id="alist"' in page and "dataset.json holds a JSON list, not an object" in page
    page = _page(site, f"/p/{PROJECT}/datasets/deep")
    assert 'id="dataset-broken"' in page and "nested deeper than 64 levels" in page

    page = _page(site, f"/p/{PROJECT}/models/")
    assert "goodmodel" in page and "accuracy 0.75" in page
    assert "BROKEN: .model.json is nested deeper than 64 levels" in page

    page = _page(site, f"/p/{PROJECT}/servings/")
    assert 'data-id="good"' in page and 'data-id="deep" data-state="BROKEN"' in page
    assert "serving.json is nested deeper than 64 levels" in page

    page = _page(site, f"/p/{PROJECT}/featurestore/")
    assert "_group.json cannot be read: _group.json is nested deeper than 64 levels" in page


def test_the_serving_page_does_not_show_a_log_outside_the_project(site):
    page = _page(site, f"/p/{PROJECT}/servings/good")
    assert "crashed" in page and SECRET not in page


def test_a_broken_servings_own_page_says_broken(site):
    """Its page answers as the list does (BROKEN with the reason), not 404 as if there were no such serving."""
    page = _page(site, f"/p/{PROJECT}/servings/deep")
    assert 'data-state="BROKEN"' in page and "serving.json is nested deeper than 64 levels" in page
    assert site.get(f"/p/{PROJECT}/servings/absent").status_code == 404


def test_a_log_path_planted_as_a_link_is_never_followed(site, root, tmp_path):
    """A symbolic link at the serving's own log path: its target's tail is not shown, and nothing opens it for
    writing (the serving would append to it and narrow its mode)."""
    from hopsml.serving.control import lifecycle
    from hopsml.serving.server.supervisor import private_file

    settings = config.load(root=str(root), project=PROJECT)
    own = lifecycle.log_path(settings, PROJECT, "good")
    target = tmp_path / "someone-elses.txt"
    target.write_text(SECRET + "\n")
    target.chmod(0o644)
    import os

    os.makedirs(os.path.dirname(own), exist_ok=True)
    os.symlink(target, own)
    assert lifecycle.log_tail(own) == ""
    page = _page(site, f"/p/{PROJECT}/servings/good")
    assert "crashed" in page and SECRET not in page
    with pytest.raises(OSError):
        open(own, "ab", opener=private_file)
    assert target.read_text() == SECRET + "\n" and target.stat().st_mode & 0o777 == 0o644
