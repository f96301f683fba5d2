"""The user's own modules travel with a run: a module beside the notebook that the training function imports,
one that hops' `hdfs.add_module` put on the driver's path, and an edit to either between two runs reach every
rank. The driver is a process of the test's own whose executors start in another folder, so they can import
those modules only when the run ships them (as on a cluster)."""

import hashlib
import json
import os
import subprocess
import sys
import textwrap

from hopsml.cluster import local_modules

THIS_FILE = os.path.basename(__file__)

DRIVER = textwrap.dedent("""
    import json, os, sys
    notebook_folder, root = sys.argv[1], sys.argv[2]
    os.environ["HOPSML_ROOT"] = root
    from hopsml import experiment, hdfs
    sys.path.insert(0, notebook_folder)   # the notebook's folder: the driver imports from it, executors cannot

    def train():
        import model_def
        import project_helper
        return {"metric": model_def.scale(2.0) + project_helper.offset()}

    hdfs.mkdir("Resources/code")
    hdfs.copy_to_hdfs(os.path.join(notebook_folder, "project_helper.py"), "Resources/code", overwrite=True)
    hdfs.add_module("Resources/code/project_helper.py")
    os.remove(os.path.join(notebook_folder, "project_helper.py"))   # only add_module's copy is left

    first = experiment.launch(train, name="modules")[1]["metric"]
    with open(os.path.join(notebook_folder, "model_def.py"), "w") as f:   # edited between two runs
        f.write("def scale(x):\\n    return 10 * x\\n")
    second = experiment.allreduce(train, num_workers=2, name="modules")[1]["metric"]
    print(json.dumps({"first": first, "second": second}))
""")


def test_a_module_beside_the_notebook_and_an_added_module_reach_every_rank_with_their_edits(tmp_path):
    notebook = tmp_path / "notebook"
    notebook.mkdir()
    (notebook / "model_def.py").write_text("import helpers_of_model_def\n\ndef scale(x):\n"
                                          "    return helpers_of_model_def.factor() * x\n")
    (notebook / "helpers_of_model_def.py").write_text("def factor():\n    return 3\n")
    (notebook / "project_helper.py").write_text("def offset():\n    return 0.5\n")
    elsewhere = tmp_path / "elsewhere"   # where the driver, and so the local executors, start
    elsewhere.mkdir()
    root = tmp_path / "root"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run([sys.executable, "-c", DRIVER, str(notebook), str(root)], cwd=elsewhere, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    results = json.loads(done.stdout.strip().splitlines()[-1])
    assert results == {"first": 6.5, "second": 20.5}   # 3*2 + 0.5, then the edited 10*2 + 0.5

    runs = sorted(d for d in (root / "Projects" / "demo" / "Experiments").iterdir() if d.is_dir())
    records = [json.loads((run / "experiment.json").read_text()) for run in runs]
    assert [r["state"] for r in records] == ["FINISHED", "FINISHED"]
    environment = records[0]["python_environment"]   # a local session ships nothing: the driver's is named
    assert environment["archive"] is None and len(environment["fingerprint"]) == 20
    assert {m["path"] for m in records[0]["modules"]} == {"model_def.py", "helpers_of_model_def.py",
                                                           "project_helper.py"}
    shipped = {m["path"]: m["sha256"] for m in records[1]["modules"]}
    assert set(shipped) == {"model_def.py", "project_helper.py"}   # the edit no longer imports the helper
    kept = runs[1] / "modules" / "model_def.py"
    assert "10 * x" in kept.read_text()   # the run keeps the version it ran
    assert shipped["model_def.py"] == hashlib.sha256(kept.read_bytes()).hexdigest()


def test_installed_packages_the_standard_library_and_hopsml_stay_behind(tmp_path, monkeypatch):
    (tmp_path / "mine.py").write_text("import json\nimport numpy\nimport hopsml\n")
    monkeypatch.syspath_prepend(str(tmp_path))

    def train():
        import os  # noqa: F401

        import mine  # noqa: F401
        import numpy  # noqa: F401

    assert set(local_modules.collect(train)) == {"mine.py", THIS_FILE}   # and the file that defines train


def test_a_package_goes_whole_and_an_edited_module_is_imported_again(tmp_path, monkeypatch):
    package = tmp_path / "src" / "mypkg"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "layers.py").write_text("WIDTH = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path / "src"))

    def train():
        from mypkg import layers
        return layers.WIDTH

    files = local_modules.collect(train)
    assert set(files) == {os.path.join("mypkg", "__init__.py"), os.path.join("mypkg", "layers.py"), THIS_FILE}

    # in a worker: the shipped files, first on the path; an edit is imported again, the rest stays
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setattr(local_modules, "_folder", str(tmp_path / "worker"))
    monkeypatch.setattr(local_modules, "_installed", {})
    for name in ("mypkg", "mypkg.layers"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    local_modules.install(files)
    assert train() == 1
    local_modules.install({**files, os.path.join("mypkg", "layers.py"): b"WIDTH = 2\n"})
    assert train() == 2
    assert sys.path[0] == str(tmp_path / "worker")
