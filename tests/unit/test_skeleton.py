"""A project's default datasets, as Hopsworks makes them: made once, each with a README.md; a changed
README is kept and a removed folder is not brought back."""

from hopsml import layout, skeleton
from hopsml.fs import Storage


def test_the_default_datasets_are_made_once_and_user_changes_are_kept(tmp_path, monkeypatch):
    storage = Storage(str(tmp_path / "root"))
    skeleton.ensure(storage, "demo")
    base = tmp_path / "root" / "Projects" / "demo"
    for name in ("Logs", "Resources", "Jupyter", "Experiments", "Models", "demo_Training_Datasets"):
        assert (base / name / "README.md").read_text().startswith(f"# {name}\n")
    (base / "Logs" / "README.md").write_text("mine")
    (base / "Jupyter" / "README.md").unlink()
    (base / "Jupyter").rmdir()
    monkeypatch.setattr(skeleton, "_made", set())  # as a new process would
    skeleton.ensure(storage, "demo")
    assert (base / "Logs" / "README.md").read_text() == "mine" and not (base / "Jupyter").exists()
    skeleton.ensure(storage, "other")
    assert storage.exists(layout.join("Projects", "other", "Resources", "README.md"))
