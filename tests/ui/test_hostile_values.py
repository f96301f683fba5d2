"""Every page of `hopsml ui` rendered over a root whose names, keys, parameters, file names and texts are HTML: the
DOM each page makes (parsed here as a browser tokenizes it) holds no element or attribute that came from the root,
and the hostile text is there as text. A search's optimization key that closes an SVG <title> and opens a
<meta http-equiv=refresh> is the case found in Chromium; the browser test at the end checks that one there."""

from __future__ import annotations

import json
import os
import time
from html.parser import HTMLParser

import pytest

from hopsml import config, layout
from hopsml.data import dataset as ds
from hopsml.fs import Storage
from hopsml.serving import definition as defs
from hopsml.serving.server import state as states
from hopsml.tracking import record as records
from hopsml.ui import create_app

pytest.importorskip("flask")

PROJECT = "test"
# Closes whatever element it lands in (a <title>, an attribute) and opens elements that navigate or run script.
HOSTILE = ('"\'></title></textarea></style><meta http-equiv="refresh" content="0;url=http://127.0.0.1:9/away">'
           '<img src=x onerror="window.hacked=1"><script>window.hacked=2</script><svg onload="window.hacked=3">')
# The same without '/' and '.', for names that become folder names.
HOSTILE_NAME = "\"'><meta http-equiv=refresh content=0><img src=x onerror=window.hacked=4><b onclick=x>"
ALLOWED_SCRIPTS = {"/static/ui.js", "/static/timeline.js"}


class _Dom(HTMLParser):
    """The elements and attributes a page makes, and its text."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.problems: list[str] = []
        self.text: list[str] = []
        self.in_title = 0
        self.titles: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        named = dict(attrs)
        for name, _ in attrs:
            if name.startswith("on") or name in ("formaction", "srcdoc"):
                self.problems.append(f"<{tag} {name}=...>")
        if tag == "meta" and (set(named) - {"charset", "name", "content"} or named.get("name") not in
                              (None, "viewport")):
            self.problems.append(f"<meta {named}>")
        if tag == "script" and named.get("src") not in ALLOWED_SCRIPTS:
            self.problems.append(f"<script {named}>")
        if tag == "img" and not str(named.get("src") or "").startswith("data:image/png;base64,"):
            self.problems.append(f"<img {named}>")
        if tag in ("iframe", "object", "embed", "base", "textarea", "style"):
            self.problems.append(f"<{tag}>")
        if tag == "title":
            self.in_title += 1

    def handle_endtag(self, tag: str) -> None:
        if tag == "title":
            self.in_title = max(0, self.in_title - 1)

    def handle_data(self, data: str) -> None:
        self.text.append(data)
        if self.in_title:
            self.titles.append(data)


def _dom(page: str) -> _Dom:
    dom = _Dom()
    dom.feed(page)
    dom.close()
    return dom


def _train(lr):
    return {"accuracy": lr}


@pytest.fixture
def hostile(root, tmp_path):
    """A root with HTML in every value a page shows: a run, a search keyed by HTML, a dataset, a model, a serving
    and a feature group."""
    storage = Storage(str(root))
    run = records.ExperimentRun.start(storage, PROJECT, "local-1700000000000", name=HOSTILE_NAME, fn=_train,
                                      hyperparameters={HOSTILE: HOSTILE}, metric_key=HOSTILE, description=HOSTILE,
                                      user=HOSTILE)
    for step in range(3):
        storage.append_text(run.dir.metrics, json.dumps({"step": step, "name": HOSTILE, "value": step}) + "\n")
    storage.write_text(run.dir.output_log, HOSTILE + "\n")
    storage.write_text(layout.join(run.dir.path, HOSTILE_NAME + ".txt"), "a file with an HTML name\n")
    storage.write_json(run.dir.timeline_system, {"ranks": {HOSTILE: {"t_s": [0, 1], HOSTILE: [1.0, 2.0]}}})
    run.finish(metric=0.5)

    search = records.ExperimentRun.start(storage, PROJECT, "local-1700000000000", name="grid", fn=_train,
                                         type=records.ExperimentType.PARALLEL_EXPERIMENTS.value,
                                         optimization_key=HOSTILE, direction="max", extra={"log_scale": [HOSTILE]})
    trials = []
    for index, lr in enumerate((0.1, 0.5, 0.9)):
        trial = search.dir.trial({"lr": lr})
        for step in range(3):
            storage.append_text(trial.metrics, json.dumps({"step": step, "name": HOSTILE, "value": lr * step}) + "\n")
        trials.append({"index": index, "params": {HOSTILE: lr, "opt": HOSTILE}, "dir": trial.path,
                       "state": "FINISHED" if index else HOSTILE, "metric": lr, "duration": 1.0, "error": HOSTILE,
                       "note": HOSTILE})
    storage.write_json(search.dir.summary, {"trials": trials})
    search.finish(metric=0.9)

    ddir = ds.DatasetDir.of(PROJECT, "shapes")
    storage.write_json(ddir.manifest, {"kind": HOSTILE, "name": "shapes", "created": HOSTILE, "source": HOSTILE,
                                       "labels": [HOSTILE], "counts": {HOSTILE: 3},
                                       "rejected_reasons": {HOSTILE: 1}, "skipped_reasons": {HOSTILE: 1},
                                       "fields": {HOSTILE: {"dtype": "float32", "shape": []}},
                                       "splits": {HOSTILE: {"rows": 2}, "train": {"rows": 1}}})
    storage.write_json(ddir.stats_json, {
        "kind": "table", "splits": ["train", HOSTILE], "rows": {"train": 1, HOSTILE: 2},
        "columns": [{"name": HOSTILE, "type": "numeric", "splits": {
            "train": {"count": 1, "missing": 0, "histogram": {"edges": [0, 1], "counts": [1]}},
            HOSTILE: {"count": 2, "missing": 0, "histogram": {"edges": [0, 1], "counts": [2]}}}},
            {"name": "colour", "type": "categorical", "splits": {"train": {"count": 1, "top": [[HOSTILE, 1]]},
                                                                 HOSTILE: {"count": 2, "top": [[HOSTILE, 2]]}}}]})
    storage.write_text(layout.join(ddir.rejected, "part-00000.jsonl"),
                       json.dumps({"path": HOSTILE, "reason": HOSTILE, "detail": HOSTILE}) + "\n")
    storage.write_bytes(ddir.success, b"")

    mdir = layout.ModelDir.of(PROJECT, "shapes", 1)
    storage.write_json(mdir.record, {"name": "shapes", "version": 1, "project": PROJECT, "metrics": {HOSTILE: 0.9},
                                     "description": HOSTILE, "user": HOSTILE, "created": HOSTILE,
                                     "experiment": {"id": run.id, "project": PROJECT},
                                     "datasets": [{"name": HOSTILE}], "files": [{"path": HOSTILE, "size": 7}]})
    storage.write_bytes(mdir.done, b"")

    defs.write(storage, PROJECT, defs.ServingDefinition(name="shapes", model_path="Models/shapes", model_name="shapes",
                                                        model_version=1, model_server=defs.PYTHON, id=1,
                                                        inference_logging=None))
    states.write(storage, PROJECT, "shapes", states.ServerState(state=states.FAILED, reason=HOSTILE))

    group = layout.feature_group_dir(PROJECT, "customers", 1)
    storage.write_json(layout.join(group, layout.GROUP_RECORD), {
        "name": "customers", "version": 1, "description": HOSTILE, "primary_key": [HOSTILE], "event_time": HOSTILE,
        "features": [{"name": HOSTILE, "type": "string", "description": HOSTILE}], "created": HOSTILE})
    settings = config.load(root=str(root), project=PROJECT)
    return {"client": create_app(settings).test_client(), "run": run.id, "search": search.id}


def _pages(site) -> list[str]:
    run, search = site["run"], site["search"]
    return ["/", f"/p/{PROJECT}/", f"/p/{PROJECT}/runs/{run}", f"/p/{PROJECT}/runs/{search}",
            f"/p/{PROJECT}/runs/{run}/timeline", f"/p/{PROJECT}/compare?id={run}&id={search}",
            f"/p/{PROJECT}/datasets/", f"/p/{PROJECT}/datasets/shapes", f"/p/{PROJECT}/models/",
            f"/p/{PROJECT}/servings/", f"/p/{PROJECT}/servings/shapes", f"/p/{PROJECT}/featurestore/",
            f"/p/{PROJECT}/featurestore/groups/customers/1"]


def test_every_page_shows_hostile_values_as_text_only(hostile):
    for url in _pages(hostile):
        response = hostile["client"].get(url)
        page = response.get_data(as_text=True)
        assert response.status_code == 200, (url, page[:600])
        dom = _dom(page)
        assert dom.problems == [], (url, dom.problems)
        if url != "/":
            shown = "".join(dom.text)
            assert HOSTILE in shown or HOSTILE_NAME in shown, f"{url} does not show the hostile value"
        assert "http://127.0.0.1:9/away" not in response.headers.get("Refresh", "")


def test_a_search_keyed_by_html_keeps_it_inside_the_charts_titles(hostile):
    page = hostile["client"].get(f"/p/{PROJECT}/runs/{hostile['search']}").get_data(as_text=True)
    dom = _dom(page)
    assert dom.problems == []
    assert any(HOSTILE in title for title in dom.titles), "the key is not in an SVG <title> as text"
    assert 'class="chart parallel"' in page


def test_the_content_security_policy_allows_no_inline_script_no_base_and_no_frames(hostile):
    policy = hostile["client"].get(f"/p/{PROJECT}/runs/{hostile['search']}").headers["Content-Security-Policy"]
    for directive in ("default-src 'none'", "script-src 'self'", "base-uri 'none'", "form-action 'self'",
                      "frame-ancestors 'none'"):
        assert directive in policy, directive
    assert "unsafe-inline" not in policy and "unsafe-eval" not in policy


def test_the_search_page_stays_put_in_a_browser(hostile, root, tmp_path):
    from browser import chrome, chromium_paths, login, ui_server

    paths = chromium_paths()
    if paths is None:
        pytest.skip("Chromium and chromedriver are not installed (apt-get install chromium chromium-driver)")
    env = {**os.environ, "HOPSML_ROOT": str(root), "HOPSML_PROJECT": PROJECT}
    with ui_server(env) as base:
        driver = chrome(paths)
        try:
            login(driver, base)
            url = f"{base}p/{PROJECT}/runs/{hostile['search']}"
            driver.get(url)
            time.sleep(1.5)   # a meta refresh with content=0 would have navigated by now
            assert driver.current_url == url
            assert driver.execute_script("return window.hacked === undefined")
            assert driver.find_elements("css selector", "svg.chart.parallel")
        finally:
            driver.quit()
