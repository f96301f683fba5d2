"""`hopsml ui` in a real headless Chromium over runs made by hopsml's own API (a launch, a failed
launch, a 2-rank all-reduce that exports a model, a grid search with early stopping, a prepared
digits and iris dataset): every page loads without console errors, tables hold the right rows,
charts have data, script in names does not run, RUNNING rows and logs follow the run. Screenshots
go to $HOPSML_TEST_ARTIFACTS/ui-screenshots (else the test's tmp folder)."""

from __future__ import annotations

import os

import pytest
from browser import artifacts_dir, chrome, chromium_paths, login, ui_server

from hopsml.fs import Storage
from hopsml.tracking import record as records

pytest.importorskip("selenium")
PATHS = chromium_paths()
pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(PATHS is None, reason="Chromium and chromedriver are not installed "
                                 "(apt-get install chromium chromium-driver): the browser tests cannot run")]
WAIT_S = 30


def _idle(lr):
    return {"accuracy": lr}


@pytest.fixture(scope="module")
def site(spark, tmp_path_factory):
    """The runs, datasets and model of sample_root, a RUNNING run, the server and a browser."""
    import sample_root

    tmp = tmp_path_factory.mktemp("ui-site")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("HOPSML_ROOT", str(tmp / "root"))
        patch.setenv("HOPSML_PROJECT", sample_root.PROJECT)
        patch.delenv("HOPSML_CONF", raising=False)
        ids = sample_root.build(str(tmp))
        storage = Storage(str(tmp / "root"))
        live = records.ExperimentRun.start(storage, sample_root.PROJECT, "local-1900000000000", name="live",
                                           fn=_idle, heartbeat_s=1)
        storage.write_text(live.dir.output_log, "first line\n")
        try:
            with ui_server(dict(os.environ)) as base:
                driver = chrome(PATHS)
                try:
                    login(driver, base)
                    yield {"base": base, "ids": ids, "driver": driver, "live": live, "storage": storage,
                           "shots": artifacts_dir(str(tmp)), "project": sample_root.PROJECT}
                finally:
                    driver.quit()
        finally:
            if live.record.state == "RUNNING":
                live.finish()


def _open(site, path: str, shot: str):
    """Load a page, check the console and that no injected script ran, save a full-page screenshot."""
    from selenium.webdriver.support.ui import WebDriverWait

    driver = site["driver"]
    driver.get(site["base"] + path.lstrip("/"))
    WebDriverWait(driver, WAIT_S).until(lambda d: d.execute_script("return document.readyState") == "complete")
    WebDriverWait(driver, WAIT_S).until(
        lambda d: d.execute_script("return Array.from(document.querySelectorAll('pre.tail'))"
                                   ".every(p => p.dataset.loaded)"))
    errors = [e for e in driver.get_log("browser") if e["level"] in ("SEVERE", "ERROR")]
    assert errors == [], f"console errors on {path}: {errors}"
    assert driver.execute_script("return window.hacked") is None, f"script from the root ran on {path}"
    height = driver.execute_script("return document.documentElement.scrollHeight")
    driver.set_window_size(1400, min(max(height, 800), 6000))
    driver.save_screenshot(os.path.join(site["shots"], f"{shot}.png"))
    driver.set_window_size(1400, 1000)
    return driver


def _rows(driver, table_id: str) -> list:
    return driver.find_elements("css selector", f"#{table_id} tbody tr")


def _charts(driver) -> list[int]:
    return [int(svg.get_attribute("data-points")) for svg in driver.find_elements("css selector", "svg.chart")]


def test_projects_and_experiments(site):
    driver = _open(site, "/", "01-projects")
    assert [r.get_attribute("data-id") for r in _rows(driver, "projects")] == [site["project"]]
    driver = _open(site, f"/p/{site['project']}/", "02-experiments")
    ids = site["ids"]
    states = {r.get_attribute("data-id"): r.get_attribute("data-state") for r in _rows(driver, "experiments")}
    assert states[ids["launch"]] == "FINISHED" and states[ids["allreduce"]] == "FINISHED"
    assert states[ids["search"]] == "FINISHED" and states[ids["lost"]] == "LOST" and states[ids["broken"]] == "BROKEN"
    assert states[site["live"].id] == "RUNNING"
    assert states[ids["random"]] == "FINISHED"
    assert list(states.values()).count("FAILED") == 1 and len(states) == 8
    assert "<script>window.hacked=1<" in driver.page_source.replace("&lt;", "<").replace("&gt;", ">")

    box = driver.find_element("id", "filter-name")
    box.send_keys("grid")
    visible = [r.get_attribute("data-id") for r in _rows(driver, "experiments") if r.is_displayed()]
    assert visible == [ids["search"]]
    box.clear()
    box.send_keys(" ")  # an input event with an empty filter shows every row again
    from selenium.webdriver.support.ui import Select

    Select(driver.find_element("id", "filter-state")).select_by_value("LOST")
    assert [r.get_attribute("data-id") for r in _rows(driver, "experiments") if r.is_displayed()] == [ids["lost"]]


def test_a_running_row_and_its_log_follow_the_run(site):
    from selenium.webdriver.support.ui import WebDriverWait

    live, storage = site["live"], site["storage"]
    driver = _open(site, f"/p/{site['project']}/runs/{live.id}", "03-run-live")
    tail = driver.find_element("css selector", "pre.tail")
    assert "first line" in tail.text
    storage.append_text(live.dir.output_log, "second line\n")
    WebDriverWait(driver, WAIT_S).until(lambda d: "second line" in tail.text)
    driver = _open(site, f"/p/{site['project']}/", "04-experiments-live")
    live.finish(metric=0.75)
    row = driver.find_element("css selector", f'#experiments tr[data-id="{live.id}"]')
    WebDriverWait(driver, WAIT_S).until(lambda d: row.get_attribute("data-state") == "FINISHED")
    assert row.find_element("css selector", "span.state").text == "FINISHED"


def test_run_pages(site):
    ids, project = site["ids"], site["project"]
    driver = _open(site, f"/p/{project}/runs/{ids['launch']}", "05-run")
    assert len(_charts(driver)) == 2 and all(n == 4 for n in _charts(driver))
    assert "trained with lr=0.5" in driver.find_element("css selector", "pre.tail").text
    assert "tensorboard --logdir" in driver.find_element("id", "tb-command").text
    assert driver.find_element("id", "parameters").text.split() == ["lr", "0.5"]

    driver = _open(site, f"/p/{project}/runs/{ids['allreduce']}", "06-run-allreduce")
    files = [r.text.split()[0] for r in _rows(driver, "files")]
    assert "logs/worker_0.log" in files and "logs/worker_1.log" in files and "model.npz" in files
    assert max(_charts(driver)) > 0
    link = driver.find_element("link text", "model.npz").get_attribute("href")
    assert link.endswith(f"/runs/{ids['allreduce']}/files/model.npz")

    failed = [r for r in _open(site, f"/p/{project}/", "02-experiments").find_elements(
        "css selector", '#experiments tr[data-state="FAILED"] a')][0].get_attribute("href")
    driver = _open(site, failed.replace(site["base"], "/"), "07-run-failed")
    assert "diverged at lr=9.0" in driver.find_element("id", "error").text


def test_search_page(site):
    driver = _open(site, f"/p/{site['project']}/runs/{site['ids']['search']}", "08-search")
    rows = _rows(driver, "trials")
    assert [r.find_elements("css selector", "td")[1].text for r in rows] == ["lr=0.9", "lr=0.7", "lr=0.5", "lr=0.05"]
    assert rows[-1].get_attribute("data-state") == "EARLY_STOPPED" and "stopped early" in rows[-1].text
    parallel = driver.find_element("css selector", "svg.chart.parallel")
    assert int(parallel.get_attribute("data-points")) == 4
    assert len(driver.find_elements("css selector", "svg.chart.line polyline.series")) == 4

    # the '#' column numbers each trial as its log does ("trial 3 stopped early at step 4")
    storage, search_dir = site["storage"], _run_dir(site, "search")
    stopped = rows[-1]
    folder = stopped.find_element("css selector", "td.trial").get_attribute("title")
    said = storage.read_text(f"{search_dir}/{folder}/output.log")
    number = stopped.find_elements("css selector", "td")[0].text
    assert f"trial {number} stopped early" in said, said
    # recorded strings are shown as they are: no quotes, no JSON escapes
    extra = {c.get_attribute("data-key"): c.text for c in driver.find_elements("css selector", "#summary code")}
    assert extra["strategy"] == "grid"
    # the parallel coordinates: labels drawn over the lines, a colour legend
    assert _labels_after_lines(driver, parallel)
    assert len(parallel.find_elements("css selector", "g.legend rect.swatch")) == 5
    assert "accuracy" in parallel.find_element("css selector", "g.legend").text
    # which trial ran on which slot when: a bar per trial on a lane of this host, none overlapping another
    gantt = driver.find_element("id", "slots")
    bars = gantt.find_elements("css selector", "rect.job")
    assert sorted(b.get_attribute("data-trial") for b in bars) == sorted(r.find_elements("css selector", "td")[0].text
                                                                         for r in rows)
    # coloured by state: the trials the median rule stopped (the last one at least; on a busy machine one more
    # may be stopped too), as the table says
    stopped_early = sorted(r.find_elements("css selector", "td")[0].text for r in rows
                           if r.get_attribute("data-state") == "EARLY_STOPPED")
    assert number in stopped_early
    assert sorted(b.get_attribute("data-trial") for b in bars
                  if "EARLY_STOPPED" in b.get_attribute("class")) == stopped_early
    lanes = gantt.find_elements("css selector", "g.lane")
    assert 1 <= len(lanes) <= 4 and all(" slot " in lane.get_attribute("data-lane") for lane in lanes)
    for lane in lanes:
        spans = sorted((float(b.get_attribute("x")), float(b.get_attribute("width")))
                       for b in lane.find_elements("css selector", "rect.job"))
        assert all(x + w <= next_x + 0.2 for (x, w), (next_x, _) in zip(spans, spans[1:])), spans
    assert "of the slots' time" in driver.find_element("xpath", "//h3[contains(., 'Slots')]").text


def _run_dir(site, key: str) -> str:
    return f"Projects/{site['project']}/Experiments/{site['ids'][key]}"


def _labels_after_lines(driver, svg) -> bool:
    return driver.execute_script(
        "const kids = Array.from(arguments[0].children);"
        "const lastLine = kids.map(e => e.classList.contains('trial')).lastIndexOf(true);"
        "const labels = kids.map((e, i) => [e, i]).filter(([e]) => e.classList.contains('label'));"
        "return lastLine >= 0 && labels.length > 0 && labels.every(([, i]) => i > lastLine);", svg)


def test_random_search_page(site):
    import re

    driver = _open(site, f"/p/{site['project']}/runs/{site['ids']['random']}", "08b-random-search")
    rows = _rows(driver, "trials")
    assert len(rows) == 4
    for row in rows:
        cell = row.find_element("css selector", "td.trial")
        folder, label = cell.get_attribute("title"), cell.text
        match = re.fullmatch(r"lr=([^&]+)&dropout=([^&]+)", label)
        assert match, label
        for shown_value in match.groups():  # 4 significant digits at most, as the folder keeps them all
            assert shown_value == f"{float(shown_value):.4g}", label
        assert len(label) < len(folder) and folder.startswith("lr=")
    extra = {c.get_attribute("data-key"): c.text for c in driver.find_elements("css selector", "#summary code")}
    assert extra["strategy"] == "random"
    assert "\\u0026" not in extra["best_logdir"] and "&dropout=" in extra["best_logdir"]
    assert extra["best_logdir"].endswith(rows[0].find_element("css selector", "td.trial").get_attribute("title"))
    parallel = driver.find_element("css selector", "svg.chart.parallel")
    scales = {a.get_attribute("data-axis"): a.get_attribute("data-scale")
              for a in parallel.find_elements("css selector", "line.axis")}
    assert scales == {"lr": "log", "dropout": "linear", "accuracy": "linear"}
    assert _labels_after_lines(driver, parallel)
    assert len(parallel.find_elements("css selector", "g.legend rect.swatch")) == 5
    legend = [t.text for t in driver.find_elements("css selector", "svg.chart.line text")]
    assert any(re.fullmatch(r"lr=[^&]{1,8}&dropout=[^&]{1,8}", t) for t in legend), legend


def test_compare_two_runs(site):
    from selenium.webdriver.support.ui import WebDriverWait

    ids = site["ids"]
    driver = _open(site, f"/p/{site['project']}/", "02-experiments")
    for exp_id in (ids["launch"], ids["allreduce"]):
        driver.find_element("css selector", f'input[value="{exp_id}"]').click()
    driver.find_element("id", "compare-button").click()
    WebDriverWait(driver, WAIT_S).until(lambda d: "/compare?" in d.current_url)
    driver = _open(site, driver.current_url.replace(site["base"], "/"), "09-compare")
    header = driver.find_element("css selector", "#compare thead").text
    assert ids["launch"] in header and ids["allreduce"] in header
    assert max(_charts(driver)) > 0


def test_datasets_and_models(site):
    project = site["project"]
    driver = _open(site, f"/p/{project}/datasets/", "10-datasets")
    assert sorted(r.get_attribute("data-id") for r in _rows(driver, "datasets")) == ["digits", "iris"]
    driver = _open(site, f"/p/{project}/datasets/digits", "11-dataset-digits")
    thumbs = driver.find_elements("css selector", "#thumbnails img")
    assert len(thumbs) >= 20 and all(driver.execute_script("return arguments[0].naturalWidth", t) > 0 for t in thumbs)
    assert len(_rows(driver, "rejected")) == 3
    assert sum(_charts(driver)) > 0
    driver = _open(site, f"/p/{project}/datasets/iris", "12-dataset-iris")
    histograms = driver.find_elements("css selector", "svg.chart.histogram")
    assert len(histograms) == 4 and all(int(h.get_attribute("data-points")) == 20 for h in histograms)
    assert len(_rows(driver, "rejected")) == 2
    driver = _open(site, f"/p/{project}/models/", "13-models")
    row = _rows(driver, "models")[0]
    assert row.get_attribute("data-id") == "digits:1"
    assert row.find_element("link text", site["ids"]["allreduce"])


def test_timeline_pages_chart_the_system_metrics_of_real_runs(site):
    """The 2-rank all-reduce and the launch sampled their system metrics: a chart per metric on the timeline page,
    a line per rank, its peak the record's."""
    from selenium.webdriver.support.ui import WebDriverWait

    ids, project = site["ids"], site["project"]
    for key, ranks in (("allreduce", 2), ("launch", 1)):
        driver = _open(site, f"/p/{project}/runs/{ids[key]}", f"14-run-{key}-link")
        driver.find_element("id", "timeline-link").click()
        driver = _open(site, driver.current_url.replace(site["base"], "/"), f"15-timeline-{key}")
        WebDriverWait(driver, WAIT_S).until(lambda d: d.find_element("id", "timeline").get_attribute("data-ranks"))
        assert driver.find_element("id", "timeline").get_attribute("data-ranks") == ",".join(map(str, range(ranks)))
        if key == "launch":  # its function has no spans: the lane is there, and the page says how to add some
            assert "timeline.span" in driver.find_element("id", "timeline-detail").text
        charts = {c.get_attribute("data-metric"): c.find_element("css selector", "svg.chart.line")
                  for c in driver.find_elements("css selector", "#system-charts .system-chart")}
        assert {"cpu_pct", "rss_mib", "net_sent_mib", "net_recv_mib"} <= set(charts), list(charts)
        for metric, svg in charts.items():
            lines = svg.find_elements("css selector", "polyline.series")
            assert len(lines) == ranks, metric
            if metric == "cpu_pct":  # CPU % needs an interval: these runs, shorter than 2 s, have it at their end
                continue
            # samples at the start and the end of each rank's function at least: a line across the chart, not a dot
            assert int(svg.get_attribute("data-points")) >= 2 * ranks, metric
            assert all(driver.execute_script("return arguments[0].getBoundingClientRect().width", line) > 100
                       for line in lines), metric
        peaks = _rows_of(driver, "system-peaks")
        rss = max(float(row["rss_mib"]) for row in peaks)
        assert rss > 20  # a Python process with numpy: tens of MiB at least
        title = charts["rss_mib"].find_element("css selector", "title").get_attribute("textContent")
        assert title.startswith(f"memory, resident (MiB): peak {rss:g}"), (title, peaks)
        assert [row["rank"] for row in peaks] == [str(r) for r in range(ranks)]
        gpu = any("gpu_util_pct" in row for row in peaks)
        assert ("gpu_util_pct" in charts) == gpu


def _rows_of(driver, table_id: str) -> list[dict[str, str]]:
    """A table whose first row names its columns, as one dict per further row (empty cells left out)."""
    rows = driver.find_elements("css selector", f"#{table_id} tr")
    names = [th.text for th in rows[0].find_elements("css selector", "th")]
    return [{n: td.text for n, td in zip(names, r.find_elements("css selector", "td")) if td.text}
            for r in rows[1:]]
