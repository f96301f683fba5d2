"""installed.distributions: what a folder holds, read again when a distribution comes or goes."""

import shutil

from hopsml import installed


def add_distribution(folder, name: str, version: str) -> None:
    info = folder / f"{name}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")


def test_installs_and_removals_are_seen(tmp_path):
    add_distribution(tmp_path, "Alpha", "1.0")
    assert installed.distributions([str(tmp_path)]) == [("Alpha", "1.0")]
    assert installed.distributions([str(tmp_path)]) == [("Alpha", "1.0")]  # from the cache
    add_distribution(tmp_path, "beta_pkg", "2.5")
    assert sorted(installed.distributions([str(tmp_path)])) == [("Alpha", "1.0"), ("beta_pkg", "2.5")]
    shutil.rmtree(tmp_path / "Alpha-1.0.dist-info")  # an upgrade: the old folder goes, a new one comes
    add_distribution(tmp_path, "Alpha", "1.1")
    assert sorted(installed.distributions([str(tmp_path)])) == [("Alpha", "1.1"), ("beta_pkg", "2.5")]


def test_the_default_is_this_python(tmp_path):
    names = {name.lower() for name, _ in installed.distributions()}
    assert {"numpy", "pyarrow", "pyspark"} <= names
