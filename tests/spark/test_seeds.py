"""One seed per run: Python's, numpy's and torch's generators start from the run's seed in every rank and
trial, the record keeps it (and what was seeded), and the same seed draws the same numbers again."""

import json
import os
import random

import numpy as np
import pytest

from hopsml import experiment
from hopsml.data import readers
from hopsml.errors import HopsmlError
from hopsml.fs import Storage
from hopsml.layout import RunDir
from hopsml.tracking.run_context import active_run


def draws():
    import torch

    return {"python": random.random(), "numpy": float(np.random.rand()), "torch": float(torch.rand(1)[0])}


def _record(logdir):
    with open(os.path.join(logdir, "experiment.json")) as f:
        return json.load(f)


def _expected(seed):
    import torch

    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    return draws()


def test_a_seeded_launch_draws_what_the_seed_gives_and_records_it(spark, root):
    logdir, result = experiment.launch(draws, name="seeded", seed=7)
    assert result == pytest.approx(_expected(7))
    record = _record(logdir)
    assert record["seed"] == 7 and record["seeds"] == {"python": 7, "numpy": 7, "torch": 7}

    _, again = experiment.launch(draws, name="seeded-again", seed=7)
    assert again == result


def test_without_a_seed_a_run_records_the_one_it_drew(spark, root):
    logdir, result = experiment.launch(draws, name="unseeded")
    seed = _record(logdir)["seed"]
    assert isinstance(seed, int) and result == pytest.approx(_expected(seed))


def test_every_rank_and_every_trial_starts_from_the_run_seed(spark, root):
    def rank_draws():
        from hopsml import collective

        return {"numpy": float(np.random.rand()), "all": collective.allgather(float(np.random.rand()))}

    logdir, result = experiment.allreduce(rank_draws, name="seeded-ranks", num_workers=2, seed=3)
    np.random.seed(3)
    first, second = np.random.rand(), np.random.rand()
    assert result["numpy"] == first and result["all"] == [second, second]   # the same on both ranks

    def trial(lr):
        return {"metric": lr + float(np.random.rand())}

    logdir, _, best = experiment.grid_search(trial, {"lr": [0.0, 1.0]}, name="seeded-grid", seed=5)
    np.random.seed(5)
    assert best["metric"] == 1.0 + np.random.rand()
    assert _record(logdir)["seed"] == 5 and _record(logdir)["seeds"]["numpy"] == 5


def test_a_reader_without_a_seed_shuffles_from_the_run_seed(tmp_path):
    assert readers._seed(None) == 0 and readers._seed(4) == 4
    with active_run(Storage(str(tmp_path)), RunDir("Projects/p/Experiments/a_1"), seed=11):
        assert readers._seed(None) == 11 and readers._seed(4) == 4


@pytest.mark.parametrize("seed", [-1, 2**32, 1.5, "7", True])
def test_a_seed_that_is_no_whole_number_is_refused_before_spark(spark, root, seed):
    with pytest.raises(HopsmlError, match="seed must be a whole number"):
        experiment.launch(draws, seed=seed)
