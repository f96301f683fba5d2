"""Execute every notebook in notebooks/ in a fresh kernel of this environment, as a user would."""

import json
import pathlib

import nbformat
import pytest
from nbclient import NotebookClient

NOTEBOOKS = sorted((pathlib.Path(__file__).parents[2] / "notebooks").glob("*.ipynb"))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_runs_and_is_versioned(path, root, monkeypatch, tmp_path):
    # Jupyter tells a kernel its notebook through JPY_SESSION_NAME; do the same.
    monkeypatch.setenv("JPY_SESSION_NAME", str(path))
    monkeypatch.setenv("HOPSML_LOG_DIR", str(tmp_path / "logs"))
    temp = tmp_path / "tmp"
    temp.mkdir()
    monkeypatch.setenv("TMPDIR", str(temp))   # the kernel's temporary folder: what it leaves there is seen
    notebook = nbformat.read(path, as_version=4)
    NotebookClient(notebook, timeout=600, kernel_name="python3",
                   resources={"metadata": {"path": str(path.parent)}}).execute()
    assert not [p.name for p in temp.iterdir() if p.name.startswith("hopsml-samples-")], "samples left behind"
    datasets = root / "Projects" / "test" / "Datasets"
    made = {p.name for p in datasets.iterdir()} if datasets.exists() else set()
    assert not made & {"digits", "iris"}, "a notebook took the quickstart's dataset names, so a quickstart " \
        "after it would refuse to prepare them"

    streams = [out.get("text", "") for cell in notebook.cells for out in cell.get("outputs", [])
               if out.get("output_type") == "stream"]
    assert not any("IProgress not found" in text for text in streams), "tqdm's widget warning in the output"
    assert not any("\r" in text for text in streams), "a progress bar's carriage returns in the output"

    experiments = root / "Projects" / "test" / "Experiments"
    runs = sorted(p for p in experiments.iterdir() if p.is_dir()) if experiments.exists() else []
    assert runs, f"{path.name} ran no experiment"
    for run in runs:
        record = json.loads((run / "experiment.json").read_text())
        assert record["state"] == "FINISHED", record.get("error")
        assert record["program"] == str(path)
        assert json.loads((run / "program.ipynb").read_text())["cells"], "the notebook was not versioned"


def test_a_notebook_whose_file_the_kernel_does_not_know_is_versioned_from_its_cells(root, monkeypatch, tmp_path):
    """nbclient, papermill or a remote front end tell the kernel no notebook path: what ran is kept."""
    monkeypatch.delenv("JPY_SESSION_NAME", raising=False)
    monkeypatch.setenv("HOPSML_LOG_DIR", str(tmp_path / "logs"))
    notebook = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell("from hopsml import experiment\ndef train(lr):\n    return {'metric': lr}"),
        nbformat.v4.new_code_cell("logdir, result = experiment.launch(train, {'lr': 0.5}, name='from-cells')"),
    ])
    NotebookClient(notebook, timeout=600, kernel_name="python3",
                   resources={"metadata": {"path": str(tmp_path)}}).execute()
    (run,) = [p for p in (root / "Projects" / "test" / "Experiments").iterdir() if p.is_dir()]
    record = json.loads((run / "experiment.json").read_text())
    assert record["state"] == "FINISHED" and record["program"] == "<the kernel's executed cells>"
    cells = [cell["source"] for cell in json.loads((run / "program.ipynb").read_text())["cells"]]
    assert cells == [cell.source for cell in notebook.cells]
