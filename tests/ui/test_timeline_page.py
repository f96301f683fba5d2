"""The run's timeline page of `hopsml ui`: linked from the run page when the run has a trace, it serves the trace
to its script, and shows the stragglers and system peaks from the record."""

import json

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


@pytest.fixture
def site(root):
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
        storage.write_bytes(run.dir.timeline_part(rank), json.dumps(chrome.rank_trace(recorder)).encode())
        watch.add(rank, 2, [[seq, seq * 50_000_000 + (40_000_000 if rank else 0), 0, 0,
                             40_000_000 if rank else 0, 5_000_000] for seq in range(1, 21)],
                  {"cpu_pct": 50.0 + rank, "rss_mib": 100.0})
    run.finish(**watch.finish(storage, run.dir))
    plain = records.ExperimentRun.start(storage, PROJECT, "local-1700000000000", name="plain", fn=_train)
    plain.finish(timeline={"enabled": False})
    app = create_app(config.load(root=str(root), project=PROJECT))
    return {"client": app.test_client(), "run": run.id, "plain": plain.id}


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


def test_a_run_without_a_timeline_says_so(site):
    page = site["client"].get(f"/p/{PROJECT}/runs/{site['plain']}/timeline").get_data(as_text=True)
    assert 'id="no-timeline"' in page and "timeline=False" in page
    assert site["client"].get(f"/p/{PROJECT}/runs/nothere_9/timeline").status_code == 404
