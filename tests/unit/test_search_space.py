import pytest

from hopsml.search.early_stopping import MedianStoppingRule
from hopsml.search.evolution import DifferentialEvolution, Member
from hopsml.search.space import Direction, SearchSpaceError, Space, grid


def test_grid_is_the_full_product():
    combos = grid({"a": [1, 2, 3], "b": ["x", "y"]})
    assert len(combos) == 6 and {"a": 3, "b": "y"} in combos
    with pytest.raises(SearchSpaceError, match="empty"):
        grid({})
    with pytest.raises(SearchSpaceError, match="'b'"):
        grid({"a": [1], "b": []})
    with pytest.raises(SearchSpaceError, match="identifier"):
        grid({"not valid": [1]})


def test_random_samples_respect_bounds_types_and_seed():
    space = Space.from_bounds({"units": [8, 64], "lr": [1e-5, 1e-1], "opt": ["adam", "sgd"]}, log_scale=["lr"])
    points = space.sample(200, seed=7)
    assert points == space.sample(200, seed=7) and points != space.sample(200, seed=8)
    assert all(isinstance(p["units"], int) and 8 <= p["units"] <= 64 for p in points)
    assert all(isinstance(p["lr"], float) and 1e-5 <= p["lr"] <= 1e-1 for p in points)
    assert {p["opt"] for p in points} == {"adam", "sgd"}
    # log scale: about half the samples below the geometric middle (1e-3), far more than a linear scale gives
    assert 60 < sum(p["lr"] < 1e-3 for p in points) < 140


@pytest.mark.parametrize("bounds, match", [({"lr": "fast"}, "lr"), ({}, "empty"), ({"lr": []}, "lr")])
def test_bad_bounds(bounds, match):
    with pytest.raises(SearchSpaceError, match=match):
        Space.from_bounds(bounds)


def test_bounds_given_high_to_low_are_accepted_as_hops_did():
    space = Space.from_bounds({"lr": [0.1, 0.001], "layers": [9, 2]}, log_scale=["lr"])
    lr, layers = space.dimensions
    assert (lr.low, lr.high, layers.low, layers.high, layers.integer) == (0.001, 0.1, 2, 9, True)
    points = space.sample(50, seed=0)
    assert all(0.001 <= p["lr"] <= 0.1 and 2 <= p["layers"] <= 9 for p in points)
    assert len({p["layers"] for p in points}) > 3
    de = DifferentialEvolution(space, population=6, mutation=0.5, crossover=0.7, direction=Direction.MAX, seed=0)
    members = [Member(p, -p["lr"]) for p in de.initial()]
    assert all(0.001 <= t["lr"] <= 0.1 and 2 <= t["layers"] <= 9 for t in de.offspring(members))


def test_log_scale_needs_positive_bounds():
    with pytest.raises(SearchSpaceError, match="> 0"):
        Space.from_bounds({"lr": [0, 1]}, log_scale=["lr"])


def test_direction():
    assert Direction.of("MAX") is Direction.MAX and Direction.MIN.better(1, 2)
    with pytest.raises(SearchSpaceError):
        Direction.of("up")


def test_direction_equals_the_strings_hops_used():
    assert Direction.MAX == "MAX" and Direction.MAX == "max" and "MAX" == Direction.MAX and "max" == Direction.MAX
    assert Direction.MIN == "MIN" and Direction.MIN != "MAX" and not (Direction.MAX != "MAX")
    assert Direction.MAX != Direction.MIN and Direction.MAX != 1 and Direction.MAX != "maximum"
    assert Direction("MAX") is Direction.MAX and Direction.of(" min ") is Direction.MIN
    assert hash(Direction.MAX) == hash("max") and {"max": 1}[Direction.MAX] == 1
    assert {Direction.MAX: "a"}[Direction.of("MAX")] == "a" and len({Direction.MAX, Direction.of("max")}) == 1
    assert Direction.MAX.value == "max" and f"{Direction.MAX.value}" == "max"
    with pytest.raises(ValueError):
        Direction("up")


def test_differential_evolution_improves_a_smooth_function():
    space = Space.from_bounds({"x": [-5.0, 5.0], "y": [-5.0, 5.0]})
    de = DifferentialEvolution(space, population=8, mutation=0.6, crossover=0.8, direction=Direction.MIN, seed=1)

    def score(p):
        return (p["x"] - 1) ** 2 + (p["y"] + 2) ** 2

    members = [Member(p, score(p)) for p in de.initial()]
    first = min(m.metric for m in members)
    for _ in range(15):
        trials = [Member(p, score(p)) for p in de.offspring(members)]
        assert all(-5 <= t.params["x"] <= 5 for t in trials)
        members = de.select(members, trials)
    assert min(m.metric for m in members) < first and min(m.metric for m in members) < 0.5


def test_median_rule_stops_the_clearly_worse_only():
    rule = MedianStoppingRule(Direction.MAX, min_steps=2, min_completed=2)
    for trial in ("a", "b"):
        for step, value in enumerate([0.5, 0.7, 0.9]):
            assert not rule.report(trial, step, value)  # nothing completed yet: never stop
        rule.complete(trial)
    assert not rule.report("bad", 0, 0.1)  # before min_steps
    assert rule.report("bad", 1, 0.2)  # 0.2 < median 0.7 at step 1
    assert not rule.report("good", 0, 0.6) and not rule.report("good", 1, 0.8)
