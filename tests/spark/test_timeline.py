"""The timeline of experiment.allreduce on local Spark: one merged trace in the run folder, and stragglers named
while the run goes (in the output and the record) with the right cause; none in a balanced run."""

import json
import os
import time

import pytest
from timeline_steps import STEPS, slowed_train

from hopsml import cli, experiment
from hopsml.timeline import chrome


def _record(logdir):
    with open(os.path.join(logdir, "experiment.json")) as f:
        return json.load(f)


def _trace(logdir):
    with open(os.path.join(logdir, "timeline", "trace.json")) as f:
        return json.load(f)


@pytest.mark.parametrize("where", ["input", "compute"])
def test_a_slow_rank_is_named_with_its_cause(spark, root, capsys, where):
    logdir, result = experiment.allreduce(slowed_train(1, where), name=f"slow-{where}", num_workers=2)
    assert result["total"] == 2 * sum(range(STEPS))
    record = _record(logdir)
    (named,) = record["stragglers"]["named"]
    assert named["rank"] == 1 and named["cause"] == where and named["late_ms"] >= 20
    assert named["message"].startswith("rank 1 is a straggler: last into ")
    out = capsys.readouterr().out  # named while it ran, in the output
    assert "hopsml: rank 1 is a straggler: last into " in out and "rank 0 is a straggler" not in out
    trace = _trace(logdir)
    assert chrome.problems(trace) == []
    assert record["timeline"]["trace"].endswith("timeline/trace.json")
    ops = [e for e in trace["traceEvents"] if e.get("cat") == "collective" and e["name"] == "allreduce"]
    assert sorted({e["pid"] for e in ops}) == [0, 1] and len(ops) == 2 * STEPS
    # the fast rank waits for the slow one inside its all-reduces; the slow one hardly waits
    waits = {rank: sorted(e["args"]["wait_us"] for e in ops if e["pid"] == rank)[STEPS // 2] for rank in (0, 1)}
    assert waits[0] > 20_000 > waits[1]
    assert {r["rank"] for r in trace["metadata"]["ranks"]} == {0, 1}
    assert trace["metadata"]["clock_error_bound_us"] is not None
    names = {e["name"] for e in trace["traceEvents"]}
    assert {"waiting for input", "compute", "waiting for peers", "process_name"} <= names
    assert set(record["system"]["peaks"]) == {"0", "1"} and record["system"]["peaks"]["0"]["rss_mib"] > 0


def test_a_balanced_run_names_no_straggler(spark, root, capsys):
    logdir, _ = experiment.allreduce(slowed_train(None, "compute"), name="balanced", num_workers=2)
    record = _record(logdir)
    assert record["stragglers"]["named"] == [] and record["stragglers"]["ops_compared"] >= 10
    assert "straggler" not in capsys.readouterr().out


def test_four_ranks_name_the_slow_one(spark, root, tmp_path, capsys):
    logdir, _ = experiment.allreduce(slowed_train(2, "input"), name="slow-of-4", num_workers=4)
    named = _record(logdir)["stragglers"]["named"]
    assert [(n["rank"], n["cause"]) for n in named] == [(2, "input")]
    assert sorted({e["pid"] for e in _trace(logdir)["traceEvents"]}) == [0, 1, 2, 3]
    capsys.readouterr()
    exp_id = logdir.rsplit("/", 1)[-1]
    copy = tmp_path / "out" / "trace.json"
    assert cli.main(["experiments", "timeline", exp_id, "-o", str(copy)]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"timeline of {exp_id} (4 ranks): ") and "ui.perfetto.dev" in out
    assert "straggler: rank 2 is a straggler" in out
    trace = json.loads(copy.read_text())
    assert chrome.problems(trace) == [] and trace["metadata"]["stragglers"][0]["rank"] == 2


def test_timeline_off_records_nothing(spark, root, capsys):
    logdir, _ = experiment.allreduce(slowed_train(1, "input", steps=5), name="no-timeline", num_workers=2,
                                     timeline=False)
    record = _record(logdir)
    assert record["timeline"] == {"enabled": False} and "stragglers" not in record
    assert not os.path.exists(os.path.join(logdir, "timeline"))
    assert cli.main(["experiments", "timeline", logdir.rsplit("/", 1)[-1]]) == 1
    assert "has no timeline" in capsys.readouterr().err


def test_a_rank_slow_in_its_backward_is_named_for_compute(spark, root):
    pytest.importorskip("torch")

    def train():
        import torch

        import hopsml.torch as ht
        from hopsml import collective

        torch.set_num_threads(1)
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 2))
        if collective.rank() == 1:  # a slow backward: a gradient hook that takes 40 ms
            model[0].weight.register_hook(lambda grad: time.sleep(0.04))
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
        with ht.distribute(model, optimizer):
            for _ in range(STEPS):
                optimizer.zero_grad()
                model(torch.randn(8, 16)).sum().backward()
                optimizer.step()
        return {"checksum": ht.parameters_checksum(model)}

    logdir, _ = experiment.allreduce(train, name="slow-backward", num_workers=2)
    record = _record(logdir)
    assert len({r["checksum"] for r in record["results"]}) == 1
    assert [(n["rank"], n["cause"]) for n in record["stragglers"]["named"]] == [(1, "compute")]
    names = {e["name"] for e in _trace(logdir)["traceEvents"]}
    assert {"gradient bucket", "waiting for gradients"} <= names


def _launched(steps):
    """A launched function with spans of its own, input waits and a checkpoint save, long enough for the system
    sampler to take samples in its loop (every 2 s) besides the last one."""

    def train(lr):
        import numpy as np

        from hopsml import checkpoint, timeline

        def batches():
            for step in range(steps):
                time.sleep(0.01)
                yield np.full(1 << 16, step, np.float32)

        kept = []
        for batch in timeline.input_waits(batches()):
            with timeline.span("forward", lr=lr):
                kept.append(batch * lr)  # memory that grows: the RSS samples show it
                time.sleep(0.02)
        checkpoint.save({"w": np.ones(4)}, step=steps)
        return {"metric": float(sum(float(b[0]) for b in kept))}

    return train


def test_launch_records_its_timeline_and_system_metrics(spark, root, capsys):
    logdir, result = experiment.launch(_launched(80), {"lr": 0.5}, name="launched")
    assert result["metric"] == 0.5 * sum(range(80))
    record = _record(logdir)
    assert record["timeline"]["enabled"] and record["timeline"]["trace"].endswith("timeline/trace.json")
    assert "stragglers" not in record  # one task: nobody to straggle behind
    peaks = record["system"]["peaks"]["0"]
    assert peaks["rss_mib"] > 0 and peaks["cpu_pct"] >= 0 and "net_sent_mib" in peaks
    trace = _trace(logdir)
    assert chrome.problems(trace) == [] and {e["pid"] for e in trace["traceEvents"]} == {0}
    spans = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    assert sum(e["name"] == "forward" for e in spans) == 80 and sum(e["cat"] == "input" for e in spans) == 80
    assert [e["args"]["step"] for e in spans if e["cat"] == "checkpoint"] == [80]
    assert next(e for e in spans if e["name"] == "forward")["args"] == {"lr": 0.5}
    with open(os.path.join(logdir, "timeline", "system.json")) as f:
        samples = json.load(f)["ranks"]["0"]
    assert len(samples["t_s"]) >= 2 and samples["t_s"] == sorted(samples["t_s"])  # in the loop, and at the end
    assert max(samples["rss_mib"]) == peaks["rss_mib"] and record["system"]["samples"].endswith("system.json")
    assert "straggler" not in capsys.readouterr().out
    assert cli.main(["experiments", "timeline", os.path.basename(logdir)]) == 0
    assert capsys.readouterr().out.startswith(f"timeline of {os.path.basename(logdir)} (1 rank): ")


def test_launch_with_timeline_off_records_nothing(spark, root):
    logdir, _ = experiment.launch(_launched(3), {"lr": 1.0}, name="launched-off", timeline=False)
    record = _record(logdir)
    assert record["timeline"] == {"enabled": False} and "system" not in record
    assert not os.path.exists(os.path.join(logdir, "timeline"))
