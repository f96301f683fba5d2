"""`experiments show` and the run page name the environment a run used (fingerprint, the archive its
executors unpacked) and the packages that differ from the project's run before it."""

from __future__ import annotations

import re

import numpy
import pytest

from hopsml import cli, config
from hopsml.cluster import shipping
from hopsml.fs import Storage
from hopsml.tracking import environment
from hopsml.tracking import record as records
from hopsml.ui import create_app

ARCHIVE = "file:///cluster/Projects/test/Resources/environments/abc.tar.gz"


def _train(lr):
    return {"accuracy": lr}


def _run(storage: Storage, app: str, **fields) -> records.ExperimentRun:
    """A run as the verbs start one: the environment file written from this Python, and its fingerprint."""
    run = records.ExperimentRun.start(storage, "test", app, name="digits", fn=_train, heartbeat_s=0,
                                      python_environment=shipping.describe(), **fields)
    run.finish()
    return run


def _edit_environment(storage: Storage, run: records.ExperimentRun, edit) -> None:
    """What the run would have written in another environment, and that environment's fingerprint."""
    storage.write_text(run.dir.environment, edit(storage.read_text(run.dir.environment)))
    run.record.python_environment = {"fingerprint": "0" * 16, "archive": None}
    run.save()


def _older(text: str) -> str:
    """numpy one version back, scipy... removed, an old package that the newer run no longer has."""
    text = re.sub(rf"- numpy=={re.escape(numpy.__version__)}\n", "- numpy==1.26.4\n", text)
    return text + "    - left-behind==0.1\n"


@pytest.fixture
def runs(root):
    storage = Storage(str(root))
    first = _run(storage, "local-1")
    second = _run(storage, "local-2")
    return storage, first, second


def test_the_conda_yml_a_run_writes_is_read_back_as_packages(runs):
    storage, first, _ = runs
    found = environment.packages(storage.read_text(first.dir.environment))
    assert found["numpy"] == numpy.__version__
    assert found["python"].count(".") == 2
    conda = ("dependencies:\n  - python=3.11.9=hab00c5b_0\n  - numpy=1.26.4=py311h64a7726_0\n"
             "  - pip:\n    - Torch==2.3\n")
    assert environment.packages(conda) == {"python": "3.11.9", "numpy": "1.26.4", "torch": "2.3"}


def test_show_names_the_packages_that_differ_from_the_run_before(runs, capsys):
    storage, first, second = runs
    _edit_environment(storage, first, _older)
    change = environment.since_previous(storage, "test", second.record)
    assert change is not None and change.previous == first.record.id
    assert change.changed == {"numpy": ("1.26.4", numpy.__version__)}
    assert change.removed == {"left-behind": "0.1"} and change.added == {}
    assert cli.main(["experiments", "show", second.record.id]) == 0
    out = capsys.readouterr().out
    assert f"packages that differ from {first.record.id}'s: 2" in out
    assert f"  numpy 1.26.4 -> {numpy.__version__}" in out and "  - left-behind 0.1" in out
    fingerprint = second.record.python_environment["fingerprint"]
    assert f"python environment  {fingerprint} (not shipped: the executors ran their own Python)" in out


def test_the_same_fingerprint_differs_in_nothing_and_the_first_run_has_nothing_to_compare(runs, capsys):
    storage, first, second = runs
    assert environment.since_previous(storage, "test", first.record) is None
    same = environment.since_previous(storage, "test", second.record)
    assert same is not None and not same and same.lines() == []
    assert cli.main(["experiments", "show", second.record.id]) == 0
    assert f"packages that differ from {first.record.id}'s: none" in capsys.readouterr().out


def test_a_shipped_run_names_its_archive_and_the_run_page_shows_the_changes(runs):
    storage, first, second = runs
    _edit_environment(storage, first, _older)
    second.record.python_environment = {**second.record.python_environment, "archive": ARCHIVE}
    second.save()
    app = create_app(config.load())
    page = app.test_client().get(f"/p/test/runs/{second.record.id}").get_data(as_text=True)
    assert second.record.python_environment["fingerprint"] in page
    assert f"unpacked <code>{ARCHIVE}</code>" in page
    assert f"<code>numpy 1.26.4 -&gt; {numpy.__version__}</code>" in page
    assert f'href="/p/test/runs/{first.record.id}"' in page
    older = app.test_client().get(f"/p/test/runs/{first.record.id}").get_data(as_text=True)
    assert "ran their own Python (nothing shipped)" in older and 'id="package-changes"' not in older
