"""Symbolic links in a run folder, through a real `hopsml ui` server and the real `hopsml` command:
a link to a file or a folder outside the root shows nothing of it, and link loops end (two loops in
one folder made the run page and `hopsml experiments show` walk 2**40 paths)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.error
import urllib.request

import pytest
from browser import ui_server

from hopsml import layout
from hopsml.fs import Storage
from hopsml.tracking import record as records

pytest.importorskip("flask")

PROJECT = "test"
SECRET = "outside-secret-text"
SOCKET_TIMEOUT_S = 120   # only so that a hanging server fails the test instead of blocking the suite


def _train(lr):
    return {"accuracy": lr}


@pytest.fixture
def linked_run(root, tmp_path):
    """A finished run whose program.py and conda.yml are links to files outside the root, with a
    link to an outside folder of many files, and two link loops in one folder."""
    return _linked_run(root, tmp_path, loops=True)


def _linked_run(root, tmp_path, loops: bool) -> str:
    storage = Storage(str(root))
    run = records.ExperimentRun.start(storage, PROJECT, "local-1700000000000", name="linked", fn=_train)
    storage.write_text(run.dir.output_log, "epoch 1\n")
    run.finish(metric=0.5)
    outside = tmp_path / "outside"
    (outside / "many").mkdir(parents=True)
    (outside / "program.py").write_text(f"print('{SECRET}')\n")
    (outside / "conda.yml").write_text(f"name: {SECRET}\n")
    for index in range(300):
        (outside / "many" / f"leak_{index}.txt").write_text(SECRET)
    folder = root / run.dir.path
    for name, target in (("program.py", outside / "program.py"), (layout.ENVIRONMENT, outside / "conda.yml")):
        if os.path.lexists(folder / name):   # versioned by the run: replaced by a link
            os.remove(folder / name)
        os.symlink(target, folder / name)
    os.symlink(outside / "many", folder / "many")
    (outside / "metrics.jsonl").write_text(json.dumps({"step": 0, "name": SECRET, "value": 1}) + "\n")
    os.symlink(outside / "metrics.jsonl", folder / layout.METRICS)
    if loops:
        os.symlink(".", folder / "loop_a")
        os.symlink(".", folder / "loop_b")
    return run.id


def _get(site, url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(site.request(url), timeout=SOCKET_TIMEOUT_S) as response:
            return response.status, response.read().decode("utf-8", errors="replace")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode("utf-8", errors="replace")


def test_the_run_page_shows_nothing_through_links_out_of_the_root_and_ends_on_loops(root, linked_run):
    env = dict(os.environ, HOPSML_ROOT=str(root), HOPSML_PROJECT=PROJECT)
    with ui_server(env) as base:
        status, page = _get(base, f"{base}p/{PROJECT}/runs/{linked_run}")
        assert status == 200, page[:400]
        assert SECRET not in page and "leak_" not in page and "loop_a/loop" not in page
        assert "output.log" in page
        for rel in ("program.py", layout.ENVIRONMENT, "many/leak_1.txt"):
            status, body = _get(base, f"{base}p/{PROJECT}/runs/{linked_run}/files/{rel}")
            assert status == 404 and SECRET not in body, rel
        status, body = _get(base, f"{base}p/{PROJECT}/runs/{linked_run}/tail/program.py")
        assert SECRET not in body


def test_experiments_show_lists_no_file_through_links_out_of_the_root_and_ends_on_loops(root, linked_run):
    env = dict(os.environ, HOPSML_ROOT=str(root), HOPSML_PROJECT=PROJECT)
    shown = subprocess.run([sys.executable, "-m", "hopsml.cli", "experiments", "show", linked_run], env=env,
                           capture_output=True, text=True, timeout=SOCKET_TIMEOUT_S)
    assert shown.returncode == 0, shown.stderr
    files = shown.stdout.split("files in ", 1)[1].splitlines()[1:]
    names = [line.strip() for line in files if line.startswith("  ")]
    assert "output.log" in names
    assert not any(n.startswith(("many", "program.py", layout.ENVIRONMENT)) for n in names), names
    assert not any(n.startswith("loop_a/") or n.startswith("loop_b/") for n in names), names
    assert SECRET not in shown.stdout


def test_without_loops_the_outside_files_are_not_shown_either(root, tmp_path):
    """The same links without the loops: the page answers, and the outside text is still not on it."""
    exp_id = _linked_run(root, tmp_path, loops=False)
    env = dict(os.environ, HOPSML_ROOT=str(root), HOPSML_PROJECT=PROJECT)
    with ui_server(env) as base:
        status, page = _get(base, f"{base}p/{PROJECT}/runs/{exp_id}")
        assert status == 200 and "output.log" in page
        assert SECRET not in page and "leak_" not in page
