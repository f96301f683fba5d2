"""The run's timeline page of `hopsml ui`: linked from the run page when the run has a trace, it serves the trace
to its script, and shows the stragglers and system peaks from the record."""

import json
import os

import pytest

from hopsml import config
from hopsml.fs import Storage
from hopsml.timeline import chrome
from hopsml.timeline.recorder import Recorder
from hopsml.timeline.watch import RunWatch
from hopsml.tracking import record as records
from hopsml.ui.app import create_app

PROJECT = "demo"


def _train():
    return 1


def _runs(root):
    """A 2-rank run whose rank 1 is 40 ms late for input into each of 20 all-reduces, and a run without a timeline."""
    storage = Storage(str(root))
    run = records.ExperimentRun.start(storage, PROJECT, "local-1700000000000", name="ddp", fn=_train)
    watch = RunWatch()
    for rank in (0, 1):
        recorder = Recorder(rank, 2)
        base = recorder.anchor_perf
        for seq in range(1, 21):
            late = 40_000_000 if rank == 1 else 0
            start = base + seq * 50_000_000 + late
            recorder.span("input", "waiting for input", start - late - 1_000_000, start, None)
            recorder.op("allreduce", seq, start, start + (40_000_000 - late) + 1000, start + 45_000_000 - late, 4096)
        for i in range(5):  # system samples every 0.25 s; rank 1 has a GPU
            gpu = {"gpu_util_pct": 20.0 * i, "gpu_mem_mib": 512.0} if rank == 1 else {}
            recorder.counters.append(("system", base + i * 250_000_000,
                                      {"cpu_pct": 50.0 + rank + i, "rss_mib": 100.0 + 10 * i,
                                       "net_sent_mib": 0.5 * i, "net_recv_mib": 0.25 * i, **gpu}))
        storage.write_bytes(run.dir.timeline_part(rank), json.dumps(chrome.rank_trace(recorder)).encode())
        watch.add(rank, 2, [[seq, seq * 50_000_000 + (40_000_000 if rank else 0), 0, 0,
                             40_000_000 if rank else 0, 5_000_000] for seq in range(1, 21)],
                  {"cpu_pct": 50.0 + rank, "rss_mib": 100.0})
    run.finish(**watch.finish(storage, run.dir))
    plain = records.ExperimentRun.start(storage, PROJECT, "local-1700000000000", name="plain", fn=_train)
    plain.finish(timeline={"enabled": False})
    return run.id, plain.id


@pytest.fixture
def site(root):
    run, plain = _runs(root)
    app = create_app(config.load(root=str(root), project=PROJECT))
    return {"client": app.test_client(), "run": run, "plain": plain}


def test_the_run_page_links_its_timeline_page(site):
    page = site["client"].get(f"/p/{PROJECT}/runs/{site['run']}").get_data(as_text=True)
    assert f'href="/p/{PROJECT}/runs/{site["run"]}/timeline"' in page and "1 straggler(s) named" in page
    plain = site["client"].get(f"/p/{PROJECT}/runs/{site['plain']}").get_data(as_text=True)
    assert 'id="timeline-link"' not in plain


def test_the_timeline_page_shows_stragglers_system_peaks_and_serves_the_trace(site):
    response = site["client"].get(f"/p/{PROJECT}/runs/{site['run']}/timeline")
    assert response.status_code == 200
    page = response.get_data(as_text=True)
    assert "rank 1 is a straggler: last into 100% of the last 20 collectives, 40 ms late" in page
    assert 'id="system-peaks"' in page and "<th>cpu_pct</th>" in page and "51.0" in page
    assert "/static/timeline.js" in page and "<script>" not in page
    trace_url = page.split('data-trace="', 1)[1].split('"', 1)[0]
    trace = site["client"].get(trace_url).get_data()
    parsed = json.loads(trace)
    assert chrome.problems(parsed) == [] and {e["pid"] for e in parsed["traceEvents"]} == {0, 1}
    assert site["client"].get("/static/timeline.js").status_code == 200


def test_the_timeline_page_charts_each_ranks_system_metrics_over_time(site):
    page = site["client"].get(f"/p/{PROJECT}/runs/{site['run']}/timeline").get_data(as_text=True)
    charts = page.split('id="system-charts"', 1)[1].split("</div>\n</div>", 1)[0]
    shown = [part.split('"', 1)[0] for part in charts.split('data-metric="')[1:]]
    assert shown == ["cpu_pct", "rss_mib", "net_sent_mib", "net_recv_mib", "gpu_util_pct", "gpu_mem_mib"]
    by_metric = dict(zip(shown, charts.split('data-metric="')[1:]))
    cpu = by_metric["cpu_pct"]
    assert cpu.count('<polyline class="series"') == 2 and 'data-points="10"' in cpu  # 5 samples of 2 ranks
    assert "CPU % (of one core): peak 55 on rank 1" in cpu and "rank 0 (peak 54)" in cpu and ">seconds<" in cpu
    assert "memory, resident (MiB): peak 140" in by_metric["rss_mib"]
    gpu = by_metric["gpu_util_pct"]  # only rank 1 had a GPU
    assert gpu.count('<polyline class="series"') == 1 and "rank 1 (peak 80)" in gpu
    assert "<script>" not in page


def test_a_run_without_a_timeline_says_so(site):
    page = site["client"].get(f"/p/{PROJECT}/runs/{site['plain']}/timeline").get_data(as_text=True)
    assert 'id="no-timeline"' in page and "timeline=False" in page
    assert 'id="system-charts"' not in page and 'id="stragglers"' not in page  # one rank, nothing sampled
    assert site["client"].get(f"/p/{PROJECT}/runs/nothere_9/timeline").status_code == 404


@pytest.mark.slow
def test_the_page_draws_every_rank_in_a_browser(root, tmp_path):
    from browser import artifacts_dir, chrome, chromium_paths, login, ui_server

    pytest.importorskip("selenium")
    paths = chromium_paths()
    if paths is None:
        pytest.skip("Chromium and chromedriver are not installed (apt-get install chromium chromium-driver)")
    from selenium.webdriver.support.ui import WebDriverWait

    run, _ = _runs(root)
    env = {**os.environ, "HOPSML_ROOT": str(root), "HOPSML_PROJECT": PROJECT}
    env.pop("HOPSML_CONF", None)
    with ui_server(env) as base:
        driver = chrome(paths)
        try:
            login(driver, base)
            driver.get(f"{base}p/{PROJECT}/runs/{run}/timeline")
            WebDriverWait(driver, 30).until(
                lambda d: d.execute_script("return document.getElementById('timeline').dataset.events"))
            box = driver.find_element("id", "timeline")
            assert box.get_attribute("data-ranks") == "0,1" and int(box.get_attribute("data-events")) >= 80
            canvas = driver.find_element("id", "timeline-canvas")
            driver.execute_script("arguments[0].dispatchEvent(new WheelEvent('wheel', {deltaY: -100, clientX: 400,"
                                  " clientY: 30, bubbles: true, cancelable: true}))", canvas)
            errors = [e for e in driver.get_log("browser") if e["level"] in ("SEVERE", "ERROR")]
            assert errors == []
            driver.save_screenshot(os.path.join(artifacts_dir(str(tmp_path)), "timeline.png"))
        finally:
            driver.quit()
