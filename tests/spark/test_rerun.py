"""`hopsml experiments rerun`: the quickstart's three runs (launch, allreduce, grid search) rerun from their
records as new experiments linked to the old ones and reproduce their metrics exactly; a changed dataset
file is named before the rerun starts (and --force goes on); a run recorded from a notebook reruns from
its program.ipynb. One quickstart serves the module."""

import json
import os
import shutil

import nbformat
import pyarrow.parquet as pq
import pytest
from nbclient import NotebookClient

from hopsml import cli, config, experiments
from hopsml.data import dataset as ds
from hopsml.fs import Storage
from hopsml.layout import ExperimentDir
from hopsml.runs import rerun as reruns
from hopsml.tracking import lineage
from hopsml.tracking.record import list_records, read_record

QUICKSTART = ("quickstart-digits", "quickstart-allreduce", "quickstart-grid")


@pytest.fixture(scope="module")
def project(spark, tmp_path_factory):
    """A project in which the quickstart ran once: its settings and its runs by name."""
    root = tmp_path_factory.mktemp("rerun") / "root"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("HOPSML_ROOT", str(root))
        patch.setenv("HOPSML_PROJECT", "test")
        patch.delenv("HOPSML_CONF", raising=False)
        settings = config.load()
        cli.quickstart(settings)
        storage = Storage(settings.root)
        yield settings, storage, {rec.name: rec for rec in list_records(storage, settings.project)}


def test_the_quickstarts_three_runs_rerun_and_reproduce_their_metrics_exactly(project, capsys):
    settings, storage, runs = project
    for name in QUICKSTART:
        original = runs[name]
        assert cli.main(["experiments", "rerun", original.id]) == 0
        out = capsys.readouterr().out
        assert "reproduced exactly" in out, out
        (new,) = reruns.reruns_of(storage, settings.project, original.id)
        assert new.rerun_of == original.id and new.name == name and new.state == "FINISHED"
        assert new.metric == original.metric and new.seed == original.seed
        assert new.hyperparameters == original.hyperparameters
        assert new.reproduced == {"metric_key": original.optimization_key or original.metric_key,
                                  "recorded": original.metric, "now": new.metric, "exactly": True}
        assert f"experiment {new.id} reran {original.id} (function)" in out
    assert reruns.verb_of(runs["quickstart-grid"]) == "grid_search"
    grid = reruns.reruns_of(storage, settings.project, runs["quickstart-grid"].id)[0]
    assert grid.extra["best_hyperparameters"] == runs["quickstart-grid"].extra["best_hyperparameters"]
    # the rerun of the data-parallel run read the same bytes, and says so in its lineage
    dp = runs["quickstart-allreduce"]
    (dp_rerun,) = reruns.reruns_of(storage, settings.project, dp.id)
    read = [reruns.read_lineage(storage, ExperimentDir.from_id(settings.project, i))[0] for i in (dp.id, dp_rerun.id)]
    assert read[0]["name"] == "digits" and read[0]["fingerprint"]
    assert [{s: f["fingerprint"] for s, f in r[lineage.SPLIT_FINGERPRINTS].items()} for r in read] == \
        [{s: f["fingerprint"] for s, f in read[0][lineage.SPLIT_FINGERPRINTS].items()}] * 2


def test_other_package_versions_are_named(project):
    settings, storage, runs = project
    rec = read_record(storage, settings.project, runs["quickstart-digits"].id)
    assert reruns.differences(storage, settings.project, rec) == []
    rec.versions["numpy"] = "0.1"
    assert reruns.differences(storage, settings.project, rec) == \
        [f"numpy 0.1 recorded, {reruns.versioning.stack_versions()['numpy']} now"]


def test_a_changed_dataset_file_is_named_before_the_rerun_starts_and_force_goes_on(project, tmp_path):
    settings, storage, runs = project
    dp = runs["quickstart-allreduce"]
    folder = storage.local_path(ds.DatasetDir.of(settings.project, "digits").parquet("train"))
    part = sorted(f for f in os.listdir(folder) if f.endswith(".parquet"))[-1]
    shutil.copy(os.path.join(folder, part), tmp_path / part)
    before = {rec.id for rec in list_records(storage, settings.project)}
    try:
        table = pq.read_table(os.path.join(folder, part))
        pq.write_table(table.slice(0, table.num_rows - 1), os.path.join(folder, part))
        with pytest.raises(experiments.RerunRefusedError) as refused:
            experiments.rerun(dp.id)
        assert f"dataset 'digits' split 'train': parquet/train/{part} changed" in str(refused.value)
        assert "--force" in str(refused.value)
        assert {rec.id for rec in list_records(storage, settings.project)} == before   # nothing started

        result = experiments.rerun(dp.id, force=True)
        new = read_record(storage, settings.project, result.rerun)
        assert new.rerun_of == dp.id and new.state == "FINISHED"
        assert result.differences == new.rerun_differences
        assert any(f"parquet/train/{part} changed" in line for line in new.rerun_differences)
    finally:
        shutil.copy(tmp_path / part, os.path.join(folder, part))
    assert reruns.differences(storage, settings.project, dp) == []


def test_a_notebook_recorded_run_reruns_from_its_program_ipynb(project, tmp_path, monkeypatch):
    settings, storage, _ = project
    path = tmp_path / "draw.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell("import numpy as np\nfrom hopsml import experiment"),
        nbformat.v4.new_code_cell("def draw(scale):\n    return {'metric': scale * float(np.random.rand())}"),
        nbformat.v4.new_code_cell("logdir, result = experiment.launch(draw, {'scale': 2.0}, name='from-notebook')"),
    ]), path)
    monkeypatch.setenv("JPY_SESSION_NAME", str(path))   # as Jupyter tells a kernel its notebook
    notebook = nbformat.read(path, as_version=4)
    NotebookClient(notebook, timeout=600, kernel_name="python3",
                   resources={"metadata": {"path": str(tmp_path)}}).execute()
    (original,) = [rec for rec in list_records(storage, settings.project) if rec.name == "from-notebook"]
    assert original.program == str(path) and original.metric is not None
    monkeypatch.delenv("JPY_SESSION_NAME")
    path.unlink()   # the rerun runs the versioned copy, not the file

    result = experiments.rerun(original.id)
    assert result.how == "notebook" and result.reproduced is True
    new = read_record(storage, settings.project, result.rerun)
    assert new.metric == original.metric and new.seed == original.seed and new.rerun_of == original.id
    cells = [json.loads(storage.read_text(ExperimentDir.from_id(settings.project, i).program(".ipynb")))["cells"]
             for i in (original.id, new.id)]
    assert [c["source"] for c in cells[1]] == [c["source"] for c in cells[0]]


def test_the_run_pages_link_a_rerun_and_its_original_and_show_the_fingerprints(project):
    from hopsml.data import fingerprint
    from hopsml.ui.app import create_app

    settings, storage, runs = project
    dp = runs["quickstart-allreduce"]
    new = reruns.reruns_of(storage, settings.project, dp.id)[-1]   # made by the tests above
    client = create_app(settings).test_client()
    original_page = client.get(f"/p/{settings.project}/runs/{dp.id}").get_data(as_text=True)
    assert f'href="/p/{settings.project}/runs/{new.id}">{new.id}</a>' in original_page
    rerun_page = client.get(f"/p/{settings.project}/runs/{new.id}").get_data(as_text=True)
    assert 'id="rerun-of"' in rerun_page and f'href="/p/{settings.project}/runs/{dp.id}">{dp.id}</a>' in rerun_page
    manifest = storage.read_json(ds.DatasetDir.of(settings.project, "digits").manifest)
    prints = manifest[fingerprint.KEY]
    assert f'<code class="fingerprint" title="{prints["dataset"]}">{prints["dataset"][:12]}</code>' in original_page
    assert f'train <code>{prints["splits"]["train"]["fingerprint"][:12]}</code>' in original_page


SCRIPT = """
import random
import numpy as np
from hopsml import experiment

def train(lr):
    return {"metric": lr + float(np.random.rand())}

if __name__ == "__main__":
    # arguments the program draws anew on every run: a rerun must use the recorded ones
    experiment.launch(train, {"lr": random.random()}, name="from-script")
"""


def test_a_script_reruns_with_its_recorded_arguments_and_seed(project, tmp_path):
    import subprocess
    import sys

    settings, storage, _ = project
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    env = {**os.environ, "HOPSML_ROOT": settings.root, "HOPSML_PROJECT": settings.project,
           "PYTHONPATH": os.pathsep.join(sys.path)}
    subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env, check=True)
    (original,) = [rec for rec in list_records(storage, settings.project) if rec.name == "from-script"]
    assert original.module == "__main__" and original.program == str(script)

    result = experiments.rerun(original.id)
    assert result.how == "script" and result.reproduced is True, result
    new = read_record(storage, settings.project, result.rerun)
    assert new.hyperparameters == original.hyperparameters and new.metric == original.metric
