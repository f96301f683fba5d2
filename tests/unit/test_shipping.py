"""`hopsml env pack`: a venv packed into the project once per set of packages, usable where it is unpacked,
found again at no cost, packed again when its archive is cut off or damaged, and refused with the reason when it holds
editable installs or is no environment at all."""

import json
import os
import subprocess
import sys
import tarfile
import venv

import pytest

from hopsml.cli import main as cli_main
from hopsml.cluster import shipping
from hopsml.fs import Storage


def _site(prefix):
    return os.path.join(prefix, "lib", f"python{sys.version_info[0]}.{sys.version_info[1]}", "site-packages")


def _install(prefix, name, version, editable_from=None):
    """A package as pip leaves it: its code and its dist-info (with direct_url.json for an editable one)."""
    site = _site(prefix)
    os.makedirs(os.path.join(site, name), exist_ok=True)
    with open(os.path.join(site, name, "__init__.py"), "w") as f:
        f.write(f"VERSION = {version!r}\n")
    info = os.path.join(site, f"{name}-{version}.dist-info")
    os.makedirs(info, exist_ok=True)
    with open(os.path.join(info, "METADATA"), "w") as f:
        f.write(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    if editable_from:
        with open(os.path.join(info, "direct_url.json"), "w") as f:
            json.dump({"url": f"file://{editable_from}", "dir_info": {"editable": True}}, f)


@pytest.fixture()
def env(tmp_path):
    prefix = str(tmp_path / "venv")
    venv.EnvBuilder(with_pip=False).create(prefix)
    _install(prefix, "mymodel", "1.0")
    _install(prefix, "pyspark", "4.0.0")   # Spark brings its own to the executors: left out
    os.makedirs(os.path.join(_site(prefix), "mymodel", "__pycache__"))
    open(os.path.join(_site(prefix), "mymodel", "__pycache__", "x.pyc"), "wb").close()
    return prefix


def test_a_venv_is_packed_once_and_runs_where_it_is_unpacked(env, tmp_path):
    storage = Storage(str(tmp_path / "root"))
    packed = shipping.pack(storage, "demo", prefix=env)
    assert not packed.reused
    rel = f"Projects/demo/Resources/environments/{packed.fingerprint}.tar.gz"
    assert packed.uri == storage.uri(rel) and packed.size == storage.info(rel).size

    with tarfile.open(storage.local_path(rel)) as tar:
        names = set(tar.getnames())
        tar.extractall(tmp_path / "executor" / "environment", filter="fully_trusted")   # as Spark unpacks it
    assert {"bin/python", "pyvenv.cfg"} <= names
    assert not any("/pyspark" in n or "__pycache__" in n or n.endswith("bin/activate") for n in names)
    python = tmp_path / "executor" / "environment" / "bin" / "python"   # where spark.pyspark.python points
    done = subprocess.run([str(python), "-c", "import mymodel; print(mymodel.VERSION)"], capture_output=True,
                          text=True, env={"PATH": os.environ["PATH"]})
    assert done.stdout.strip() == "1.0", done.stderr

    again = shipping.pack(storage, "demo", prefix=env)
    assert again.reused and again.fingerprint == packed.fingerprint
    assert storage.info(rel).mtime == storage.info(rel).mtime   # same file, not rewritten
    assert again.spark_conf() == {"spark.archives": f"{packed.uri}#environment",
                                  "spark.pyspark.python": "./environment/bin/python"}


def test_another_set_of_packages_is_another_archive_and_a_cut_or_damaged_archive_is_packed_again(env, tmp_path):
    storage = Storage(str(tmp_path / "root"))
    first = shipping.pack(storage, "demo", prefix=env)
    _install(env, "mymodel", "1.0")
    _install(env, "extra", "0.1")
    second = shipping.pack(storage, "demo", prefix=env)
    assert second.fingerprint != first.fingerprint and not second.reused

    rel = f"Projects/demo/Resources/environments/{second.fingerprint}.tar.gz"
    storage.overwrite_bytes(rel, storage.read_bytes(rel)[:100])   # a copy that stopped half-way
    repacked = shipping.pack(storage, "demo", prefix=env)
    assert not repacked.reused and storage.info(rel).size == repacked.size == second.size

    data = bytearray(storage.read_bytes(rel))
    data[len(data) // 2] ^= 0xFF                                   # the same size, other bytes
    storage.overwrite_bytes(rel, bytes(data))
    assert not shipping.pack(storage, "demo", prefix=env).reused
    assert shipping.pack(storage, "demo", prefix=env).reused        # whole again


def test_editable_installs_and_a_system_python_are_refused_with_what_to_do(env, tmp_path):
    storage = Storage(str(tmp_path / "root"))
    _install(env, "mylib", "0.0.1", editable_from="/home/me/mylib")
    with pytest.raises(shipping.PackError, match=r"editable mode.*mylib \(from file:///home/me/mylib\).*without -e"):
        shipping.pack(storage, "demo", prefix=env)
    with pytest.raises(shipping.PackError, match="neither a venv nor a conda environment"):
        shipping.pack(storage, "demo", prefix=str(tmp_path))


def test_the_cli_prints_the_spark_submit_words_and_the_python_the_executors_need(env, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(sys, "prefix", env)
    assert cli_main(["--root", str(tmp_path / "root"), "env", "pack", "--print-submit-args"]) == 0
    words = capsys.readouterr().out.split()
    assert words[0] == "--archives" and words[1].endswith(".tar.gz#environment")
    assert "spark.pyspark.python=./environment/bin/python" in words
    assert f"spark.pyspark.driver.python={sys.executable}" in words
    assert cli_main(["--root", str(tmp_path / "root"), "env", "pack"]) == 0
    said = capsys.readouterr().out
    home = os.path.dirname(os.path.realpath(sys.executable))
    assert "found (packed before)" in said and "spark-submit --archives " in said
    assert said.rstrip().endswith(f"every executor needs this venv's base Python at {shipping.base_python(env)}")
    assert os.path.realpath(shipping.base_python(env)) == home   # the Python the venv was made from


def test_a_session_on_a_cluster_master_ships_the_environment_unless_told_otherwise(env, tmp_path, monkeypatch):
    from hopsml import config
    from hopsml.cluster import session

    monkeypatch.setattr(sys, "prefix", env)
    monkeypatch.delenv("PYSPARK_PYTHON", raising=False)
    settings = config.load({}, root=str(tmp_path / "root"), master="spark://cluster:7077", shared_root=True)
    conf = session.ship_environment(settings, {})
    assert conf["spark.archives"].endswith(".tar.gz#environment")
    assert os.environ["PYSPARK_PYTHON"] == "./environment/bin/python"   # what a Python-started session reads

    monkeypatch.delenv("PYSPARK_PYTHON")
    assert session.ship_environment(settings, {"spark.pyspark.python": "/opt/python/bin/python"}) == {}
    off = config.load({"HOPSML_SHIP_ENVIRONMENT": "false"}, root=str(tmp_path / "root"), master="spark://c:7077")
    assert session.ship_environment(off, {}) == {}
    monkeypatch.setenv("PYSPARK_PYTHON", "/opt/python/bin/python")
    assert session.ship_environment(settings, {}) == {}
    assert os.environ["PYSPARK_PYTHON"] == "/opt/python/bin/python"
