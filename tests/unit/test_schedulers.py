"""Every asynchronous search strategy is a Scheduler that the same loop drives to its end: jobs handed out,
metrics told back, a resumed search taking up its trials."""

import pytest

from hopsml.search.asha import SuccessiveHalving, budgets
from hopsml.search.scheduler import PointList, Scheduler
from hopsml.search.space import Direction, Space
from hopsml.search.tpe import ModelBased

SPACE = {"x": [0.0, 1.0]}


def _schedulers():
    points = Space.from_bounds(SPACE).sample(9, seed=3)
    return {
        "points": PointList(points[:4]),
        "asha": SuccessiveHalving(points.__getitem__, budgets(1, 9, 3), eta=3, direction=Direction.MAX,
                                  num_trials=9),
        "hyperband": SuccessiveHalving(points.__getitem__, budgets(1, 9, 3), eta=3, direction=Direction.MAX,
                                       num_trials=9, brackets=2),
        "tpe": ModelBased(Space.from_bounds(SPACE), direction=Direction.MAX, samples=5, seed=3),
    }


def _drive(scheduler: Scheduler) -> list:
    """The search loop with one slot: ask, run (the metric is x itself), tell, until nothing is left."""
    jobs = []
    while (job := scheduler.next_job()) is not None:
        jobs.append(job)
        scheduler.job_done(job, job.params["x"])
    return jobs


@pytest.mark.parametrize("name", ["points", "asha", "hyperband", "tpe"])
def test_each_strategy_is_a_scheduler_the_loop_runs_to_its_end(name):
    scheduler = _schedulers()[name]
    assert isinstance(scheduler, Scheduler)
    jobs = _drive(scheduler)
    configurations = {job.key for job in jobs}
    assert len(configurations) == {"points": 4, "asha": 9, "hyperband": 9, "tpe": 5}[name]
    if name in ("asha", "hyperband"):
        assert list(scheduler.budgets) == [1, 3, 9]
        assert any(job.promoted for job in jobs) and max(job.rung for job in jobs) == 2
    else:
        assert list(scheduler.budgets) == [] and all(job.rung is None for job in jobs)
    assert isinstance(scheduler.describe(), dict)


def test_a_restored_point_list_runs_the_interrupted_trial_first_and_skips_the_ended_ones():
    points = [{"x": 0.1}, {"x": 0.2}, {"x": 0.3}, {"x": 0.4}]
    scheduler = PointList(points)
    scheduler.restore([{"params": points[0], "state": "FINISHED"}, {"params": points[1], "state": "RUNNING"}])
    assert [job.key for job in _drive(scheduler)] == [1, 2, 3]
