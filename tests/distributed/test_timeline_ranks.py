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


def test_nothing_is_recorded_without_a_recorder(ranks):
    outcomes = ranks(scenario_recorded_ops, 2, False)
    assert all(o.ok for o in outcomes.values()), outcomes
    assert [o.value["ops"] for o in outcomes.values()] == [0, 0]
    assert [o.value["value"] for o in outcomes.values()] == [8.0, 8.0]  # the collectives still work: 3 sums of 2
