"""The numeric sketches the table writers keep: histograms, medians and distinct counts, merged across tasks."""

import numpy as np
import pytest

from hopsml.data import stats


def _sketch(values, sampled, edges):
    sketch = stats.NumericSketch(edges)
    sketch.add(np.asarray(values, dtype=np.float64), np.asarray(sampled, dtype=bool))
    return sketch


def test_histograms_put_each_value_in_its_bucket_and_the_largest_in_the_last():
    values = np.array([0.0, 0.1, 0.5, 0.9999999, 1.0, 2.5, 10.0, -3.0, -3.0, 7.25])
    edges = stats._edges(values.min(), values.max())
    counts = stats.histogram_counts(values, edges)
    width = (edges[-1] - edges[0]) / stats.BINS
    expected = np.zeros(stats.BINS, dtype=int)
    for value in values:
        expected[min(int((value - edges[0]) // width), stats.BINS - 1)] += 1
    assert counts.tolist() == expected.tolist() and counts[-1] == 1 and counts.sum() == values.size
    assert stats.histogram_counts(np.array([5.0, 5.0]), stats._edges(5.0, 5.0)).tolist() == [2]


def test_sketches_of_parts_merge_into_the_sketch_of_the_whole():
    rng = np.random.default_rng(3)
    values = np.round(rng.normal(size=3001), 2)
    edges = stats._edges(values.min(), values.max())
    whole = _sketch(values, np.ones(values.size), edges).result()
    parts = [_sketch(part, np.ones(part.size), edges) for part in np.array_split(values, 3)]
    parts[0].merge(parts[1])
    parts[0].merge(parts[2])
    merged = parts[0].result()
    assert merged == whole
    assert whole["median"] == np.sort(values)[1500] and whole["distinct"] == np.unique(values).size
    assert whole["counts"] == stats.histogram_counts(values, edges).tolist() and sum(whole["counts"]) == values.size


def test_a_sampled_sketch_estimates_the_median_and_the_distinct_values():
    rng = np.random.default_rng(5)
    values = rng.permutation(200_000).astype(np.float64)
    sampled = rng.random(values.size) < 0.1
    result = _sketch(values, sampled, None).result()
    assert result["counts"] is None
    assert result["median"] == pytest.approx(100_000, rel=0.02) and result["median"] in values[sampled]
    assert result["distinct"] == pytest.approx(200_000, rel=0.08)
    for keep in (10, 10_000):   # estimated, and exact: 0.0 and -0.0 one value, every NaN one value
        sketch = stats.NumericSketch(None, keep)
        sketch.add(np.repeat([1.0, -0.0, 0.0, np.nan, np.nan], 1000), np.zeros(5000, dtype=bool))
        assert sketch.result()["distinct"] == 3


def test_a_sparse_column_of_a_large_table_gets_its_exact_median():
    """Its few values are kept whether or not their rows are in the median sample."""
    sketch = stats.NumericSketch(None, keep=5)
    for part in ([7.0, 1.0], [3.0], [5.0, 2.0]):
        sketch.add(np.array(part), np.zeros(len(part), dtype=bool))
    assert sketch.result() == {"counts": None, "median": 3.0, "distinct": 5}
    other = stats.NumericSketch(None, keep=5)
    other.add(np.array([4.0]), np.ones(1, dtype=bool))
    sketch.merge(other)   # six values: more than kept, so the sample's one value gives the median
    assert sketch.result()["median"] == 4.0


def test_the_median_sample_is_smaller_for_wide_tables():
    assert stats.median_fraction(1000, 10) == 1.0
    assert stats.median_fraction(10 * stats.MEDIAN_SAMPLE, 10) == pytest.approx(0.1)
    assert stats.median_fraction(10 * stats.MEDIAN_SAMPLE, 1000) * 10 * stats.MEDIAN_SAMPLE * 1000 \
        <= stats.MEDIAN_VALUES
