"""hopsml.run_catalog.list (also hopsml.experiments.list): the runs of a project as records, filtered and
sorted, and the CLI's --sort."""

import pytest

from hopsml import cli, config, experiments, layout, run_catalog
from hopsml.errors import SettingsError
from hopsml.fs import Storage
from hopsml.tracking.record import ExperimentRecord


def _write(settings, run_id, name, metric, *, state="FINISHED", type="EXPERIMENT",  # noqa: A002 - the record field
           start="2026-01-01T00:00:00", duration=None):
    exp_dir = layout.ExperimentDir.of(settings.project, "app-1", run_id)
    rec = ExperimentRecord(id=exp_dir.id, name=name, app_id="app-1", run_id=run_id, state=state, type=type,
                           metric=metric, start=f"{start[:-2]}{run_id:02d}", duration=duration, direction="max")
    Storage(settings.root).write_json(exp_dir.record, rec.to_dict())


@pytest.fixture
def settings(root):
    settings = config.load()
    _write(settings, 1, "mnist-a", 0.91, duration=5.0)
    _write(settings, 2, "mnist-b", 0.97, duration=2.0)
    _write(settings, 3, "iris", None, state="FAILED")
    _write(settings, 4, "mnist-grid", 0.95, type="PARALLEL_EXPERIMENTS", duration=9.0)
    return settings


def test_list_returns_records_newest_first(settings):
    runs = run_catalog.list(settings=settings)
    assert [r.name for r in runs] == ["mnist-grid", "iris", "mnist-b", "mnist-a"]
    assert isinstance(runs[0], ExperimentRecord) and runs[0].metric == 0.95


def test_list_filters_by_name_state_and_type(settings):
    assert [r.name for r in run_catalog.list(name="mnist", settings=settings)] == ["mnist-grid", "mnist-b", "mnist-a"]
    assert [r.name for r in run_catalog.list(state="failed", settings=settings)] == ["iris"]
    assert [r.name for r in run_catalog.list(type="parallel_experiments", settings=settings)] == ["mnist-grid"]
    with pytest.raises(SettingsError, match="use one of"):
        run_catalog.list(state="done", settings=settings)


def test_list_sorts_by_metric_best_first_with_runs_without_a_metric_last(settings):
    assert [r.metric for r in run_catalog.list(sort="metric", settings=settings)] == [0.97, 0.95, 0.91, None]
    assert [r.metric for r in run_catalog.list(sort="metric", direction="min",
                                               settings=settings)][:3] == [0.91, 0.95, 0.97]
    assert [r.name for r in run_catalog.list(sort="duration", limit=2, settings=settings)] == ["mnist-grid", "mnist-a"]


def test_cli_list_sorts_by_metric(settings, capsys):
    assert cli.main(["experiments", "list", "--sort", "metric"]) == 0
    rows = capsys.readouterr().out.splitlines()[1:]
    assert [row.split()[2] for row in rows] == ["mnist-b", "mnist-grid", "mnist-a", "iris"]
    assert cli.main(["experiments", "list", "--type", "parallel_experiments"]) == 0
    assert [row.split()[2] for row in capsys.readouterr().out.splitlines()[1:]] == ["mnist-grid"]


def test_the_documented_older_name_is_the_same_catalog():
    assert experiments.list is run_catalog.list and experiments.sort_records is run_catalog.sort_records
