"""The timeline on real rank processes (no Spark): every collective op is recorded with its path, bytes and
the wait/move split, over shared memory and over TCP, and nothing is recorded with the timeline off."""

from __future__ import annotations

import numpy as np
import pytest

from hopsml.collective.options import CollectiveOptions


def scenario_recorded_ops(rank: int, size: int, record: bool) -> dict:
    from hopsml import collective, timeline
    from hopsml.timeline import chrome

    comm = collective.current()
    recorder = timeline.Recorder(rank, size)
    if record:
        comm.attach_timeline(recorder)
    small = np.ones(1024, np.float32)          # 4 KiB: inline in the header exchange
    large = np.ones(1 << 18, np.float32)       # 1 MiB: the large path
    collective.allreduce(small)
    collective.allreduce(large)
    collective.allreduce_many([small, small[:10]])
    collective.broadcast(large, root=0)
    collective.barrier()
    comm.attach_timeline(None)
    collective.allreduce(small)  # after detaching: not recorded
    return {"events": chrome.events(recorder), "problems": chrome.problems(chrome.rank_trace(recorder)),
            "ops": len(recorder.ops), "value": float(small[0])}


@pytest.mark.parametrize("shared_memory", [True, False], ids=["shm", "tcp"])
def test_every_op_is_recorded_with_its_path_and_split(ranks, shared_memory):
    options = CollectiveOptions(timeout_s=30, shared_memory=shared_memory)
    outcomes = ranks(scenario_recorded_ops, 2, True, options=lambda r: options)
    assert all(o.ok for o in outcomes.values()), outcomes
    for rank, outcome in outcomes.items():
        result = outcome.value
        assert result["problems"] == [] and result["ops"] == 5
        ops = [e for e in result["events"] if e.get("cat") == "collective" and e["name"] != "waiting for peers"]
        assert [e["name"] for e in ops] == ["allreduce", "allreduce", "allreduce_many", "broadcast", "barrier"]
        assert [e["args"]["seq"] for e in ops] == [1, 2, 3, 4, 5]
        assert [e["args"]["bytes"] for e in ops[:2]] == [4096, 1 << 20]
        kind = "shm" if shared_memory else "tcp"
        assert ops[0]["args"]["path"] == kind
        assert ops[1]["args"]["path"] == ("shm" if shared_memory else "tcp ring")
        assert ops[3]["args"]["path"] == f"{kind} chain"
        for op in ops:
            assert op["args"]["wait_us"] >= 0 and op["args"]["move_us"] >= 0
            assert op["args"]["wait_us"] + op["args"]["move_us"] == pytest.approx(op["dur"], abs=0.01)
            assert op["pid"] == rank


def scenario_compiled_with_timeline(rank: int, size: int) -> dict:
    from hopsml import collective, timeline
    from hopsml.timeline import chrome

    comm = collective.current()
    recorder = timeline.Recorder(rank, size)
    comm.attach_timeline(recorder)
    data = np.full(1024, rank + 1, np.float32)
    collective.allreduce(data)          # the first of its shape takes the general way and teaches the compiled one
    comm.native_profile(True)
    for _ in range(20):
        data[:] = rank + 1
        collective.allreduce(data)
    calls = (comm.native_profile(False) or {}).get("calls", 0)
    comm.attach_timeline(None)
    ops = [e for e in chrome.events(recorder) if e.get("cat") == "collective" and e["name"] == "allreduce"]
    return {"compiled": comm.small_path, "calls": calls, "seqs": [e["args"]["seq"] for e in ops],
            "splits": [(e["args"]["wait_us"], e["args"]["move_us"], e["dur"]) for e in ops],
            "value": float(data[0])}


def test_the_timeline_keeps_small_allreduces_on_the_compiled_exchange(ranks):
    """Recording used to send every small all-reduce the general (Python) way, 10-50x slower than the compiled
    exchange: the timeline is on by default in experiment.allreduce, so users never had the fast path."""
    outcomes = ranks(scenario_compiled_with_timeline, 2)
    assert all(o.ok for o in outcomes.values()), outcomes
    for outcome in outcomes.values():
        result = outcome.value
        if result["compiled"] != "compiled":
            pytest.skip(f"no compiled same-host exchange here ({result['compiled']})")
        assert result["calls"] == 20 and result["value"] == 3.0
        assert result["seqs"] == list(range(1, 22))
        for wait_us, move_us, dur in result["splits"]:
            assert wait_us >= 0 and move_us >= 0 and wait_us + move_us == pytest.approx(dur, abs=0.01)


def test_nothing_is_recorded_without_a_recorder(ranks):
    outcomes = ranks(scenario_recorded_ops, 2, False)
    assert all(o.ok for o in outcomes.values()), outcomes
    assert [o.value["ops"] for o in outcomes.values()] == [0, 0]
    assert [o.value["value"] for o in outcomes.values()] == [8.0, 8.0]  # the collectives still work: 3 sums of 2


def scenario_torch_steps(rank: int, size: int) -> dict:
    import torch

    import hopsml.torch as ht
    from hopsml import collective, timeline

    torch.set_num_threads(1)
    torch.manual_seed(rank)
    recorder = timeline.Recorder(rank, size)
    collective.current().attach_timeline(recorder)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with timeline.recording(recorder), ht.distribute(model, optimizer, bucket_mb=0.0001):
        for _ in range(3):
            optimizer.zero_grad()
            model(torch.randn(4, 8)).sum().backward()
            optimizer.step()
    return {"spans": [(s[0], s[1]) for s in recorder.spans], "ops": [o[0] for o in recorder.ops]}


def test_torch_gradient_buckets_are_on_the_timeline(ranks):
    outcomes = ranks(scenario_torch_steps, 2)
    assert all(o.ok for o in outcomes.values()), outcomes
    for outcome in outcomes.values():
        spans = outcome.value["spans"]
        buckets = spans.count(("gradients", "gradient bucket"))
        assert buckets >= 3 * 2 and buckets == len(outcome.value["ops"]) - 1  # one op: the first broadcast
        assert spans.count(("gradients", "waiting for gradients")) == 3
