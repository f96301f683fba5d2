"""Checkpoint and resume: a rank killed mid-training costs at most one checkpoint interval."""

import json
import os

import numpy as np
import pytest

from hopsml import experiment
from hopsml.errors import ExperimentFailed, HopsmlError

STEPS, EVERY = 20, 5


def _train(marker: str | None, die_at: int = 12):
    """A deterministic 'training' of 20 all-reduce steps that checkpoints every 5 steps; with a marker
    file path, rank 1 dies (os._exit) at `die_at` the first time only."""

    def train():
        from hopsml import checkpoint, collective

        loaded = checkpoint.load()
        state, start = loaded if loaded is not None else ({"w": np.zeros(4)}, -1)
        print(f"rank {collective.rank()} starts after step {start}")
        computed = 0
        for step in range(start + 1, STEPS):
            grad = collective.allreduce(np.full(4, float(step + collective.rank())), op="mean")
            state["w"] = state["w"] + grad
            computed += 1
            if marker and collective.rank() == 1 and step == die_at and not os.path.exists(marker):
                open(marker, "w").close()
                os._exit(3)
            if step % EVERY == 0:
                checkpoint.save(state, step)
        return {"w": float(state["w"].sum()), "start": start, "computed": computed}

    return train


def test_a_killed_rank_is_retried_from_the_last_checkpoint(spark, root, tmp_path):
    _, whole = experiment.allreduce(_train(None), name="uninterrupted", num_workers=2)
    logdir, result = experiment.allreduce(_train(str(tmp_path / "died")), name="killed", num_workers=2,
                                          retries=1)
    assert (tmp_path / "died").exists()  # rank 1 really died once
    assert result["w"] == whole["w"]  # the same training, finished
    assert result["start"] == 10  # the checkpoint before the death at step 12
    assert STEPS - result["computed"] - 1 == 10  # only the steps after it were computed again
    record = json.load(open(os.path.join(logdir, "experiment.json")))
    assert record["state"] == "FINISHED" and record["attempts"] == 2
    steps = sorted(os.listdir(os.path.join(logdir, "checkpoint")))
    assert steps == ["step-000000005.pkl", "step-000000010.pkl", "step-000000015.pkl"]  # newest 3 kept


def test_without_retries_a_killed_rank_fails_the_run(spark, root, tmp_path):
    with pytest.raises(ExperimentFailed, match="rank 1"):
        experiment.allreduce(_train(str(tmp_path / "died")), name="killed-no-retry", num_workers=2)


def test_resume_starts_a_new_run_from_an_earlier_runs_checkpoint(spark, root, tmp_path):
    with pytest.raises(ExperimentFailed):
        experiment.allreduce(_train(str(tmp_path / "died"), die_at=7), name="first", num_workers=2)
    first_id = sorted(os.listdir(root / "Projects" / "test" / "Experiments"))[-1]
    logdir, result = experiment.allreduce(_train(None), name="second", num_workers=2, resume=first_id)
    assert result["start"] == 5
    record = json.load(open(os.path.join(logdir, "experiment.json")))
    assert record["resumed_from"] == {"experiment": first_id, "step": 5}


def test_resume_from_a_run_without_checkpoints_is_refused_before_it_starts(spark, root):
    logdir, _ = experiment.allreduce(lambda: 1.0, name="no-checkpoints", num_workers=2)
    before = len(os.listdir(root / "Projects" / "test" / "Experiments"))
    with pytest.raises(HopsmlError, match="no checkpoint to resume from"):
        experiment.allreduce(lambda: 1.0, name="x", num_workers=2, resume=os.path.basename(logdir))
    assert len(os.listdir(root / "Projects" / "test" / "Experiments")) == before
