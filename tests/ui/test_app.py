"""Every route of `hopsml ui` through Flask's test client, over a root written by hopsml's own
tracking code (no Spark): content, escaping, 404s and paths that try to leave the root."""

from __future__ import annotations

import json
import os

import pytest

from hopsml import config, layout
from hopsml.data import dataset as ds
from hopsml.fs import Storage
from hopsml.tracking import record as records
from hopsml.ui import create_app, datasets

pytest.importorskip("flask")

PROJECT = "demo"
EVIL = "<script>window.hacked=1<"


def _train(lr):
    return {"accuracy": lr}


def _notebook() -> str:
    return json.dumps({"cells": [
        {"cell_type": "markdown", "source": ["# Training <b>digits</b>\n", "Uses **numpy** and `spark`.\n"]},
        {"cell_type": "code", "execution_count": 1, "source": ["print('<i>hi</i>')"],
         "outputs": [{"output_type": "stream", "name": "stdout", "text": ["<i>hi</i>\n"]},
                     {"output_type": "display_data", "data": {"text/html": ["<script>window.hacked=3</script>"],
                                                              "text/plain": ["<HTML object>"]}}]}],
        "metadata": {}, "nbformat": 4, "nbformat_minor": 5})


@pytest.fixture
def site(root, tmp_path):
    """A root with a finished run (metrics, notebook, logs), a search, a running run, a LOST and a
    BROKEN one, an image dataset with skewed statistics, and a model; plus the app over it."""
    storage = Storage(str(root))
    notebook = tmp_path / "train.ipynb"
    notebook.write_text(_notebook())
    run = records.ExperimentRun.start(storage, PROJECT, "local-1700000000000", name=EVIL, fn=_train,
                                      hyperparameters={"lr": 0.1, "note": "<b>x</b>"}, metric_key="accuracy",
                                      description='</script><img src=x onerror="window.hacked=2">')
    storage.upload(str(notebook), run.dir.program(".ipynb"))
    for step in range(5):
        storage.append_text(run.dir.metrics, json.dumps({"step": step, "name": "loss", "value": 1 / (step + 1)}) + "\n")
    storage.append_text(run.dir.metrics, '{"step": 5, "name": "lo')  # torn last line of a writing run
    storage.write_text(run.dir.output_log, "epoch 1\n<script>window.hacked=4</script>\n")
    storage.write_text(run.dir.worker_log(1), "rank 1 says hi\n")
    run.finish(metric=0.9)

    search = records.ExperimentRun.start(storage, PROJECT, "local-1700000000000", name="grid", fn=_train,
                                         type=records.ExperimentType.PARALLEL_EXPERIMENTS.value,
                                         optimization_key="accuracy", direction="max")
    trials = []
    for index, (lr, metric, state) in enumerate([(0.1, 0.5, "FINISHED"), (0.5, 0.8, "FINISHED"),
                                                 (0.01, 0.1, "EARLY_STOPPED"), (9.0, None, "FAILED")]):
        trial = search.dir.trial({"lr": lr})
        for step in range(3 if state == "EARLY_STOPPED" else 6):
            storage.append_text(trial.metrics, json.dumps({"step": step, "name": "accuracy",
                                                           "value": (metric or 0) * step / 5}) + "\n")
        trials.append({"index": index, "params": {"lr": lr}, "dir": trial.path, "state": state, "metric": metric,
                       "duration": 1.0, "error": "diverged" if state == "FAILED" else None})
    trials.append({"index": 4, "params": {"lr": 1}, "dir": "Projects/other/../../etc", "state": "FINISHED",
                   "metric": 0.2, "duration": 1.0})
    storage.write_json(search.dir.summary, {"trials": trials})
    search.finish(metric=0.8)

    live = records.ExperimentRun.start(storage, PROJECT, "local-1700000000000", name="live", fn=_train)
    storage.write_text(live.dir.output_log, "step 1\n")

    lost = layout.ExperimentDir.of(PROJECT, "local-1000000000000", 1)
    storage.write_json(lost.record, {"id": lost.id, "name": "gone", "app_id": "local-1000000000000", "run_id": 1,
                                     "state": "RUNNING", "start": "2020-01-01T00:00:00+00:00"})
    broken = layout.ExperimentDir.of(PROJECT, "local-1000000000000", 2)
    storage.write_bytes(broken.record, b'{"id": "cut')

    ddir = ds.DatasetDir.of(PROJECT, "shapes")
    storage.write_json(ddir.manifest, {"kind": "table", "name": "shapes", "created": "2026-01-01T00:00:00+00:00",
                                       "source": "/data/shapes.csv",
                                       "counts": {"read": 12, "written": 10, "rejected": 2},
                                       "rejected_reasons": {"malformed row": 2},
                                       "splits": {"train": {"rows": 8}, "test": {"rows": 2}}})
    edges = [0, 2, 4]
    width = {"train": {"count": 8, "missing": 0, "min": 0, "max": 4, "mean": 1,
                       "histogram": {"edges": edges, "counts": [6, 2]}},
             "test": {"count": 2, "missing": 0, "min": 3, "max": 4, "mean": 3.5,
                      "histogram": {"edges": edges, "counts": [0, 2]}}}   # 75% vs 0% in the first bin: skew
    colour = {"train": {"count": 8, "missing": 0, "distinct": 2, "top": [["red", 4], ["blue", 4]]},
              "test": {"count": 2, "missing": 0, "distinct": 2, "top": [["red", 1], ["blue", 1]]}}
    storage.write_json(ddir.stats_json, {"kind": "table", "splits": ["train", "test"], "rows": {"train": 8, "test": 2},
                                         "columns": [{"name": "width", "type": "numeric", "splits": width},
                                                     {"name": "colour", "type": "categorical", "splits": colour}]})
    storage.write_text(layout.join(ddir.rejected, "part-00000.jsonl"),
                       json.dumps({"path": "/data/shapes.csv:7", "reason": "malformed row",
                                   "detail": "<b>3 fields</b>"}) + "\n")
    storage.write_bytes(ddir.success, b"")

    mdir = layout.ModelDir.of(PROJECT, "shapes-model", 1)
    storage.write_json(mdir.record, {"name": "shapes-model", "version": 1, "project": PROJECT, "path": "",
                                     "metrics": {"accuracy": 0.9}, "experiment": {"id": run.id, "project": PROJECT},
                                     "files": [{"path": "weights.npz", "size": 7}]})
    storage.write_bytes(mdir.file("weights.npz"), b"weights")
    storage.write_bytes(mdir.done, b"")

    (tmp_path / "outside.txt").write_text("secret")   # beside the root, not in it
    os.symlink(tmp_path / "outside.txt", storage.local_path(layout.join(run.dir.path, "link.txt")))
    settings = config.load(root=str(root), project=PROJECT)
    app = create_app(settings)
    yield {"client": app.test_client(), "run": run.id, "search": search.id, "live": live.id, "lost": lost.id,
           "broken": broken.id, "storage": storage}
    live.finish()


def _page(site, url: str, status: int = 200) -> str:
    response = site["client"].get(url)
    assert response.status_code == status, (url, response.status_code, response.get_data(as_text=True)[:400])
    return response.get_data(as_text=True)


def test_projects_and_experiments_table_show_states_as_the_cli_does(site):
    assert 'href="/p/demo/"' in _page(site, "/")
    page = _page(site, "/p/demo/")
    for exp_id in (site["run"], site["search"], site["live"], site["lost"], site["broken"]):
        assert f'data-id="{exp_id}"' in page
    assert f'data-id="{site["lost"]}" data-state="LOST"' in page
    assert f'data-id="{site["broken"]}" data-state="BROKEN"' in page
    assert "not valid JSON" in page
    assert f'data-id="{site["live"]}" data-state="RUNNING"' in page
    rows = {row["id"]: row for row in site["client"].get("/p/demo/experiments.json").get_json()}
    assert rows[site["run"]]["metric"] == 0.9 and rows[site["run"]]["state"] == "FINISHED"
    assert rows[site["live"]]["state"] == "RUNNING" and rows[site["lost"]]["state"] == "LOST"


def test_names_and_texts_from_the_root_are_escaped_and_no_inline_script_is_allowed(site):
    for url in ("/p/demo/", f"/p/demo/runs/{site['run']}", f"/p/demo/compare?id={site['run']}&id={site['search']}"):
        response = site["client"].get(url)
        page = response.get_data(as_text=True)
        assert "<script>window" not in page and "<img src=x" not in page and "<b>x</b>" not in page
        assert "script-src 'self'" in response.headers["Content-Security-Policy"]
    page = _page(site, f"/p/demo/runs/{site['run']}")
    assert "&lt;script&gt;window.hacked=1&lt;" in page
    assert "<script>" not in page.replace('<script src="/static/ui.js"></script>', "")


def test_run_page_has_parameters_metric_chart_logs_notebook_and_tensorboard(site):
    page = _page(site, f"/p/demo/runs/{site['run']}")
    assert 'id="parameters"' in page and "0.1" in page
    assert 'class="chart line" data-points="5"' in page   # the torn line is skipped
    assert "output.log" in page and "logs/worker_1.log" in page
    assert "<h1>Training &lt;b&gt;digits&lt;/b&gt;</h1>" in page and "<strong>numpy</strong>" in page
    assert "&lt;HTML object&gt;" in page and "window.hacked=3" not in page
    logdir = site["storage"].uri(layout.ExperimentDir.from_id(PROJECT, site["run"]).tensorboard)
    assert f"tensorboard --logdir {logdir}" in page
    assert 'id="versions"' in page and "conda.yml" in page


def test_logs_are_followed_from_an_offset(site):
    url = f"/p/demo/runs/{site['live']}/tail/output.log"
    first = site["client"].get(url).get_json()
    assert first == {"text": "step 1\n", "offset": 7, "state": "RUNNING"}
    site["storage"].append_text(layout.ExperimentDir.from_id(PROJECT, site["live"]).output_log, "step 2\n")
    assert site["client"].get(f"{url}?offset={first['offset']}").get_json()["text"] == "step 2\n"
    assert site["client"].get(f"/p/demo/runs/{site['run']}/tail/logs/worker_9.log").get_json()["text"] == ""


def test_artifacts_download_as_attachments(site):
    response = site["client"].get(f"/p/demo/runs/{site['run']}/files/output.log")
    assert response.status_code == 200 and response.data.startswith(b"epoch 1")
    assert response.headers["Content-Disposition"].startswith("attachment")
    notebook = site["client"].get(f"/p/demo/runs/{site['run']}/files/program.ipynb")
    assert notebook.mimetype == "application/octet-stream" and b"Training" in notebook.data


@pytest.mark.parametrize("rel", ["../../../outside.txt", "..%2F..%2F..%2Foutside.txt", "%2e%2e/%2e%2e/x",
                                 "logs/../../experiment.json", "link.txt", "logs", "a\\..\\b", "missing.txt",
                                 "/etc/passwd", "%2Fetc%2Fpasswd"])
def test_paths_that_leave_the_run_or_the_root_are_not_found(site, rel):
    for route in ("files", "tail"):
        response = site["client"].get(f"/p/demo/runs/{site['run']}/{route}/{rel}", follow_redirects=True)
        assert b"secret" not in response.data and b"root:" not in response.data
        if route == "files":
            assert response.status_code == 404, rel


@pytest.mark.parametrize("url", ["/p/nope/", "/p/demo/runs/nope_1", "/p/demo/runs/..%2F..", "/p/demo/runs/x",
                                 "/p/demo/datasets/nope", "/p/demo/datasets/..", "/p/..%2F..%2Fetc/",
                                 "/p/demo/nothing-here", "/p/demo/runs/local-1700000000000_99/files/x"])
def test_unknown_things_are_404(site, url):
    response = site["client"].get(url, follow_redirects=True)   # werkzeug merges '//' by a redirect
    assert response.status_code == 404, url
    assert "not found" in response.get_data(as_text=True)


def test_search_page_orders_trials_best_first_and_marks_early_stopped(site):
    page = _page(site, f"/p/demo/runs/{site['search']}")
    table = page[page.index('id="trials"'):page.index("</table>", page.index('id="trials"'))]
    order = [table.index(name) for name in ("lr=0.5", "lr=0.1", "lr=0.01", "lr=9.0")]
    assert order == sorted(order)
    assert "stopped early" in table and "diverged" in table
    assert 'class="chart parallel" data-points="5"' in page
    assert page.count('data-state="EARLY_STOPPED"') >= 2 and 'stroke-dasharray="5 3"' in page
    assert "chart line" in page


def test_compare_shows_parameters_final_metrics_and_overlaid_charts(site):
    page = _page(site, f"/p/demo/compare?id={site['run']}&id={site['search']}")
    assert 'id="compare"' in page and "loss" in page and "0.2" in page
    assert 'class="chart line"' in page
    assert 'id="pick"' in _page(site, f"/p/demo/compare?id={site['run']}")


def test_dataset_page_overlays_splits_and_marks_skew(site):
    assert 'href="/p/demo/datasets/shapes"' in _page(site, "/p/demo/datasets/")
    page = _page(site, "/p/demo/datasets/shapes")
    width = page[page.index('data-column="width"'):page.index('data-column="colour"')]
    assert 'class="skewed"' in page[page.index('data-column="width"') - 40:page.index('data-column="width"')]
    assert "skew" in width and 'class="chart histogram"' in width
    colour = page[page.index('data-column="colour"') - 40:]
    assert 'class="skewed"' not in colour[:60]
    assert "malformed row" in page and "&lt;b&gt;3 fields&lt;/b&gt;" in page


def test_models_page_links_the_run_that_produced_them(site):
    page = _page(site, "/p/demo/models/")
    assert "shapes-model" in page and f'href="/p/demo/runs/{site["run"]}"' in page and "accuracy 0.9" in page
    assert 'href="/p/demo/models/shapes-model/1/files/weights.npz"' in page
    assert site["client"].get("/p/demo/models/shapes-model/1/files/weights.npz").data == b"weights"
    for url in ("/p/demo/models/shapes-model/2/files/weights.npz", "/p/demo/models/shapes-model/1/files/../../x",
                "/p/demo/models/..%2F/1/files/model.json", "/p/demo/models/shapes-model/0/files/model.json"):
        assert site["client"].get(url, follow_redirects=True).status_code == 404, url


def test_skew_is_the_largest_share_difference():
    column = {"splits": {"train": {"top": [["a", 5], ["b", 5]], "count": 10},
                         "test": {"top": [["a", 9], ["b", 1]], "count": 10}}}
    assert datasets.column_skew(column, ["train", "test"]) == pytest.approx(0.4)
    assert datasets.column_skew(column, ["train"]) is None


def test_a_run_with_huge_metrics_and_environment_files_gets_a_bounded_page(root, monkeypatch):
    """A run page of a 100 MB metrics.jsonl and a 100 MB conda.yml was a 115 MB page: now the charts hold at most
    CHART_POINTS points of the newest METRICS_BYTES, and conda.yml a preview with a link to the whole file."""
    from hopsml.ui import views

    monkeypatch.setattr(views, "METRICS_BYTES", 1 << 20)   # the same limits, at a size a test writes quickly
    monkeypatch.setattr(views, "PREVIEW_BYTES", 64 << 10)
    storage = Storage(str(root))
    run = records.ExperimentRun.start(storage, PROJECT, "local-1700000000001", name="huge", fn=_train,
                                      hyperparameters={"lr": 0.1})
    lines = "".join(json.dumps({"step": s, "name": "loss", "value": 1 / (s + 1)}) + "\n" for s in range(60_000))
    storage.write_text(run.dir.metrics, lines)                      # ~3 MB: three times the window
    storage.write_text(run.dir.environment, "dependencies:\n" + "  - pkg==1.0\n" * 40_000)   # ~0.5 MB
    run.finish(metric=0.9)
    app = create_app(config.load(environ={}, root=str(root), project=PROJECT))
    page = app.test_client().get(f"/p/{PROJECT}/runs/{run.id}").get_data(as_text=True)
    assert len(page) < 400_000                                       # not the files' megabytes
    assert f'data-points="{views.CHART_POINTS}"' in page             # thinned to the chart's points
    assert "the charts show its newest 1 MiB" in page
    assert "The first 64 KiB; the whole file:" in page and "files/conda.yml" in page
