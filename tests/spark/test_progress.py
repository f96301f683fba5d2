from hopsml.cluster.handle import SparkHandle
from hopsml.progress import _task_counts, spark_progress


def test_jobs_inside_the_block_are_grouped_and_counted(spark):
    sc = spark.sparkContext
    with spark_progress(SparkHandle.of(spark), "counting", enabled=False):
        group = sc.getLocalProperty("spark.jobGroup.id")
        assert sc.parallelize(range(100), 5).map(lambda x: x * 2).sum() == 9900
    assert sc.getLocalProperty("spark.jobGroup.id") is None  # later jobs are not in the group
    assert _task_counts(sc.statusTracker(), group, {}) == (5, 5)


def test_a_bar_of_steps_keeps_its_total(spark):
    sc = spark.sparkContext
    with spark_progress(SparkHandle.of(spark), "steps", enabled=False, steps=3) as progress:
        totals = []
        for name in ("one", "two", "three"):
            progress.step(name)
            sc.parallelize(range(10), 4).count()
            totals.append((progress.bar.total, progress.bar.n))
    assert totals == [(3, 0), (3, 1), (3, 2)]
    assert progress.bar.n == 3


def test_the_last_line_counts_every_task_and_the_time_since_the_work_began(spark, monkeypatch, capsys):
    import time

    from hopsml import progress

    monkeypatch.setattr(progress, "display_kind", lambda stream=None: "lines")
    began = time.monotonic() - 30.0                 # the work began before the block (a listing, a session)
    with spark_progress(SparkHandle.of(spark), "quick", since=began):
        spark.sparkContext.parallelize(range(10), 3).count()   # done before the first poll
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last.startswith("quick: done (3 tasks, ")
    assert float(last.rsplit(", ", 1)[1].split()[0]) >= 30.0
