"""hopsml.timeline without Spark: recorder and spans, the Chrome trace and its merge, clock offsets, the
batches a rank sends, and the driver's straggler verdicts."""

import json
import threading
import time

import pytest

from hopsml import timeline
from hopsml.fs import Storage
from hopsml.launcher.driver import StageMonitor
from hopsml.launcher.messages import Clock, Timing, decode, to_wire
from hopsml.layout import RunDir
from hopsml.timeline import chrome, clock, merge
from hopsml.timeline.recorder import Recorder, current, recording
from hopsml.timeline.reporter import Reporter
from hopsml.timeline.stragglers import StragglerSettings, StragglerWatch


def test_spans_record_only_while_recording_and_make_a_valid_trace():
    with timeline.span("outside"):
        pass
    assert current() is None
    recorder = Recorder(rank=1, size=2)
    with recording(recorder):
        with timeline.span("step", lr=0.1):
            for _ in timeline.input_waits(iter([1, 2, 3])):
                pass
        recorder.op("allreduce", 1, 100, 150, 400, 4096)
    assert current() is None
    names = [s[1] for s in recorder.spans]
    assert names.count("waiting for input") == 3 and names[-1] == "step"
    assert len(recorder.inputs) == 3
    trace = chrome.rank_trace(recorder)
    assert chrome.problems(trace) == []
    events = trace["traceEvents"]
    op = next(e for e in events if e["name"] == "allreduce")
    assert op["pid"] == 1 and op["dur"] == pytest.approx(0.3) and op["args"]["wait_us"] == pytest.approx(0.05)
    assert any(e["name"] == chrome.WAITING and e["dur"] == pytest.approx(0.05) for e in events)
    assert {e["args"]["name"] for e in events if e["name"] == "process_name"} == {"rank 1"}
    step = next(e for e in events if e["name"] == "step")
    assert step["args"] == {"lr": 0.1} and step["cat"] == "compute"


def test_a_span_is_recorded_when_its_block_raises():
    recorder = Recorder()
    with recording(recorder), pytest.raises(ValueError), timeline.span("failing"):
        raise ValueError("boom")
    assert [s[1] for s in recorder.spans] == ["failing"]


def test_recorder_keeps_its_first_records_and_counts_the_rest():
    recorder = Recorder(capacity=2)
    for seq in range(5):
        recorder.op("allreduce", seq, 0, 0, 1, 8)
    assert len(recorder.ops) == 2 and recorder.dropped == 3


def test_problems_names_what_breaks_the_format():
    assert chrome.problems([]) == ["the trace is not an object with a traceEvents list"]
    bad = {"traceEvents": [{"ph": "X", "ts": 0, "pid": 0, "tid": 0, "name": "a", "dur": -1},
                           {"ph": "X", "ts": 0, "pid": 0, "name": "b"}]}
    found = chrome.problems(bad)
    assert "event 0 ('X') has no dur >= 0" in found and "event 1 lacks tid" in found


def test_clock_offset_takes_the_ping_with_the_shortest_round_trip():
    # reference is 1000 ns ahead; the fast ping (round trip 10) bounds it to +-5, the slow one to +-200
    samples = [(0, 1300, 400), (1000, 2005, 1010)]
    offset = clock.estimate(samples)
    assert offset == clock.Offset(1000, 5)
    assert clock.estimate([]) is None
    measured = clock.measure(lambda t0: t0 + 7_000)  # a reference 7 us ahead, answering at once
    assert measured is not None and abs(measured.ns - 7_000) <= measured.error_ns
    assert clock.measure(lambda t0: None) is None  # no answers: no offset


def test_reporter_splits_the_time_before_each_op_into_input_and_compute():
    recorder = Recorder(rank=0, size=2)
    recorder.anchor_perf, recorder.anchor_wall, recorder.offset_ns = 0, 1_000_000, 500
    recorder.op("allreduce", 1, 100, 110, 200, 8)
    recorder.span("input", "waiting for input", 250, 650)   # 400 ns of input before op 2
    recorder.op("allreduce", 2, 1200, 1300, 1400, 8)         # 1000 ns since op 1: 600 compute
    sent = []
    reporter = Reporter(recorder, sent.append, interval_s=3600)
    reporter.flush()
    ops = sent[0]["ops"]
    assert ops[0] == [1, 1_000_600, 10, 90, 0, 0]
    assert ops[1] == [2, 1_001_700, 100, 100, 400, 600]
    assert sent[0]["system"]["rss_mib"] > 0
    assert "cpu_pct" not in sent[0]["system"]  # the first sample: no interval to measure CPU % over yet
    assert sent[0]["system"]["net_sent_mib"] >= 0  # since the rank started, not the host's total
    reporter.flush()
    assert len(sent) == 1  # nothing new, no sample due: nothing sent
    reporter._next_sample = 0.0  # a sample due: CPU % since the first one
    reporter.flush()
    assert sent[1]["system"]["cpu_pct"] >= 0 and "ops" in sent[1]


def _ops(rank, count, *, late_ms=0.0, input_ms=0.0, compute_ms=5.0, jitter=None):
    """count ops of one rank, 50 ms apart, arriving `late_ms` after the others."""
    out = []
    for seq in range(1, count + 1):
        extra = jitter(seq) if jitter else 0.0
        arrive = int((seq * 50 + late_ms + extra) * 1e6)
        out.append([seq, arrive, 1000, 2000, int(input_ms * 1e6), int(compute_ms * 1e6)])
    return out


def test_a_rank_late_for_input_is_named_with_its_cause():
    announced = []
    watch = StragglerWatch(announce=announced.append)
    watch.add(0, 4, _ops(0, 30))
    watch.add(1, 4, _ops(1, 30))
    watch.add(2, 4, _ops(2, 30))
    fresh = watch.add(3, 4, _ops(3, 30, late_ms=40, input_ms=40))
    assert [s.rank for s in fresh] == [3] and fresh[0].cause == "input"
    assert announced == [fresh[0].message]
    assert announced[0].startswith("rank 3 is a straggler: last into 100% of the last 30 collectives, 40 ms late "
                                   "(median); its extra time goes to waiting for input (100%)")
    assert watch.add(3, 4, []) == []  # named once
    summary = watch.summary()
    assert summary["named"][0]["rank"] == 3 and summary["ops_compared"] == 30


def test_a_rank_late_for_compute_is_named_with_compute():
    watch = StragglerWatch()
    watch.add(0, 2, _ops(0, 20))
    (straggler,) = watch.add(1, 2, _ops(1, 20, late_ms=30, compute_ms=35))
    assert straggler.rank == 1 and straggler.cause == "compute" and straggler.late_s == pytest.approx(0.03)


def test_a_balanced_run_names_no_one():
    watch = StragglerWatch()
    watch.add(0, 2, _ops(0, 50, jitter=lambda s: (s * 7919 % 13) / 10))   # up to 1.2 ms of noise
    assert watch.add(1, 2, _ops(1, 50, jitter=lambda s: (s * 104729 % 11) / 10)) == []
    # last into every op, but by too little to matter
    watch = StragglerWatch()
    watch.add(0, 2, _ops(0, 50))
    assert watch.add(1, 2, _ops(1, 50, late_ms=1)) == []


def test_straggler_settings_check_themselves():
    with pytest.raises(ValueError, match="fraction"):
        StragglerSettings(fraction=0)


def test_driver_answers_clock_pings_and_takes_timing_batches():
    answers = []

    class Connection:
        def send(self, message):
            answers.append(message)

    monitor = StageMonitor(echo=False)
    before = time.time_ns()
    monitor(to_wire(Clock(1, 123)), Connection())
    (answer,) = answers
    reply = decode(answer)
    assert isinstance(reply, Clock) and reply.t0 == 123 and reply.t1 >= before
    monitor(to_wire(Timing(0, 2, _ops(0, 12), {"cpu_pct": 50.0, "rss_mib": 10.0})), None)
    monitor(to_wire(Timing(1, 2, _ops(1, 12, late_ms=20, input_ms=20), {"cpu_pct": 20.0, "rss_mib": 30.0})), None)
    monitor(to_wire(Timing(1, 2, [], {"cpu_pct": 90.0, "rss_mib": 5.0})), None)
    assert [s.rank for s in monitor.timeline.stragglers.named()] == [1]
    assert monitor.timeline.peaks[1] == {"cpu_pct": 90.0, "rss_mib": 30.0}


def test_merge_makes_one_trace_of_the_parts(tmp_path):
    storage = Storage(str(tmp_path))
    run = RunDir("Projects/p/Experiments/app_1")
    with pytest.raises(merge.TimelineError, match="timeline=True"):
        merge.merge(storage, run)
    for rank in (0, 1):
        recorder = Recorder(rank, 2)
        recorder.offset_error_ns = 2000 * (rank + 1)
        recorder.op("allreduce", 1, recorder.anchor_perf + 1000, recorder.anchor_perf + 2000,
                    recorder.anchor_perf + 5000, 64)
        storage.write_bytes(run.timeline_part(rank), json.dumps(chrome.rank_trace(recorder)).encode())
    path = merge.merge(storage, run, {"stragglers": []})
    assert path == run.timeline_trace
    trace = json.loads(storage.read_bytes(path))
    assert chrome.problems(trace) == []
    ops = [e for e in trace["traceEvents"] if e["name"] == "allreduce"]
    assert sorted(e["pid"] for e in ops) == [0, 1] and min(e["ts"] for e in ops) < 1
    assert trace["metadata"]["clock_error_bound_us"] == 4.0
    assert [r["rank"] for r in trace["metadata"]["ranks"]] == [0, 1]


def test_recording_reaches_threads_started_inside():
    recorder = Recorder()
    seen = []
    with recording(recorder):
        thread = threading.Thread(target=lambda: seen.append(current()))
        thread.start()
        thread.join()
    assert seen == [recorder]


def test_reader_waits_and_checkpoint_saves_are_spans(tmp_path):
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    from hopsml import checkpoint, config
    from hopsml.data import dataset as ds
    from hopsml.data.readers import reader
    from hopsml.tracking.run_context import active_run

    storage = Storage(str(tmp_path))
    with ds.staged(storage, "p", "tiny", overwrite=False) as stage:
        storage.makedirs(stage.parquet("train"))
        values = np.arange(10)
        pq.write_table(pa.table({"x": values.astype(np.float32), "label": values}),
                       f"{storage.path(stage.parquet('train'))}/part-00000.parquet")
        storage.write_json(stage.manifest, {
            "kind": "table", "name": "tiny", "fields": {"x": {"dtype": "float32", "shape": []},
                                                       "label": {"dtype": "int64", "shape": []}},
            "default_fields": ["x", "label"], "splits": {"train": {"rows": 10, "parquet": "parquet/train"}}})
    settings = config.load(environ={}, root=str(tmp_path), project="p")
    recorder = Recorder()
    with recording(recorder), active_run(storage, RunDir("Projects/p/Experiments/app_1")):
        batches = list(reader("tiny", 0, 1, batch_size=4, settings=settings))
        checkpoint.save({"w": 1}, 7)
    assert [len(b["x"]) for b in batches] == [4, 4, 2]
    assert [s[1] for s in recorder.spans if s[0] == "input"] == ["waiting for input"] * 3
    (saved,) = [s for s in recorder.spans if s[0] == "checkpoint"]
    assert saved[1] == "checkpoint save" and saved[5] == {"step": 7}


def test_perfetto_trace_processor_reads_the_merged_trace(tmp_path):
    """Perfetto's own trace processor loads the trace and finds every rank's ops (needs its binary: the perfetto
    package downloads trace_processor_shell from Google's storage on first use, so point HOPSML_TRACE_PROCESSOR
    at one fetched beforehand)."""
    import os

    shell = os.environ.get("HOPSML_TRACE_PROCESSOR")
    if not shell:
        pytest.skip("HOPSML_TRACE_PROCESSOR is not set: Perfetto's trace_processor_shell is not available offline")
    processor = pytest.importorskip("perfetto.trace_processor", reason="pip install perfetto")
    traces = {}
    for rank in (0, 1):
        recorder = Recorder(rank, 2)
        for seq in range(1, 4):
            start = recorder.anchor_perf + seq * 10_000
            recorder.op("allreduce", seq, start, start + 1000, start + 3000, 4096)
        traces[rank] = chrome.rank_trace(recorder)
    path = tmp_path / "trace.json"
    path.write_text(json.dumps(merge.merge_traces(traces)))
    tp = processor.TraceProcessor(trace=str(path), config=processor.TraceProcessorConfig(bin_path=shell))
    try:
        rows = list(tp.query("select count(*) as n from slice where name = 'allreduce'"))
        assert rows[0].n == 6
    finally:
        tp.close()


def test_fast_ops_are_thinned_to_the_same_seqs_on_every_rank():
    from hopsml.timeline.reporter import thin

    few = [[seq, 0, 0, 0, 0, 0] for seq in range(1, 501)]
    assert thin(few) == few
    many = [[seq, 0, 0, 0, 0, 0] for seq in range(1, 5001)]    # stride 8
    more = [[seq, 0, 0, 0, 0, 0] for seq in range(1, 2501)]    # stride 4 on another rank
    kept, other = {op[0] for op in thin(many)}, {op[0] for op in thin(more)}
    assert len(kept) <= 1000 and all(seq % 8 == 0 for seq in kept)
    assert {seq for seq in kept if seq <= 2500} <= other  # the coarser stride's seqs are in the finer one's


def test_a_batch_of_fast_ops_works_out_only_the_kept_ones_with_the_same_values():
    """The reporter thins before working an op out (a fast loop records hundreds of thousands a second and the
    reporter holds the rank's interpreter meanwhile): the kept ops' input and compute split is what working
    every op out and thinning afterwards gives."""
    import random

    from hopsml.timeline.reporter import thin

    rng = random.Random(7)
    recorder = Recorder(rank=0, size=2)
    t, seq = 0, 0
    for _ in range(5000):
        t += rng.randint(0, 3000)
        if rng.random() < 0.3:   # an input wait before this op, sometimes reaching back over earlier ops
            a = max(0, t - rng.randint(0, 8000))
            recorder.span("input", "waiting for input", a, t)
        seq += 1
        start, peers, end = t, t + rng.randint(0, 500), t + rng.randint(500, 1500)
        recorder.op("allreduce", seq, start, peers, end, 8)
        t = end

    def every_op(ops, inputs):   # the straightforward way: every op worked out, then thinned
        out, prev_end, index = [], None, 0
        for _, s, start, peers, end, _, _ in ops:
            prev = prev_end if prev_end is not None else start
            waited = 0
            while index < len(inputs) and inputs[index][1] <= start:
                a, b = inputs[index]
                waited += max(0, min(b, start) - max(a, prev))
                index += 1
            gap = max(0, start - prev)
            waited = min(waited, gap)
            out.append([s, recorder.to_reference_ns(start), peers - start, end - peers, waited, gap - waited])
            prev_end = end
        return thin(out)

    expected = every_op(recorder.ops, recorder.inputs)
    got = Reporter(recorder, None).pending_ops()
    assert len(got) <= 1000 and got == expected and {op[0] % 8 for op in got} == {0}


def test_a_gpu_span_gets_the_device_time_of_its_cuda_events(monkeypatch):
    """span(gpu=True) records the block and, where cupy is imported, a second span timed by a CUDA event pair,
    whose duration is read only when the trace is resolved (a stand-in cupy here; the real one in
    bench/gpu_smoke.py on a GPU)."""
    import sys
    import types

    from hopsml.timeline import gpu as timeline_gpu

    class Event:
        def record(self, stream=None):
            self.at = time.perf_counter()

        def synchronize(self):
            pass

    recorder = Recorder()
    with recording(recorder), timeline.span("no cupy", gpu=True):
        pass
    assert [s[1] for s in recorder.spans] == ["no cupy"]
    fake = types.SimpleNamespace(cuda=types.SimpleNamespace(
        Event=Event, get_elapsed_time=lambda start, end: (end.at - start.at) * 1e3))
    monkeypatch.setitem(sys.modules, "cupy", fake)
    with recording(recorder), timeline.span("matmul", gpu=True):
        time.sleep(0.01)
    assert [s[1] for s in recorder.spans] == ["no cupy", "matmul", "matmul on the GPU"]
    assert recorder.spans[-1][5] == {"gpu_ms": None}
    timeline_gpu.resolve(recorder)
    category, _, start, end, _, args = recorder.spans[-1]
    assert category == "gpu" and args["gpu_ms"] >= 10 and end - start == pytest.approx(args["gpu_ms"] * 1e6, rel=1e-3)
    assert recorder.gpu_events == []
