"""hopsml's Spark worker daemon: zip importers re-read an archive only when it changed."""

import importlib
import os
import sys
import zipfile
import zipimport

import pytest

from hopsml.cluster import worker_daemon

pytestmark = pytest.mark.skipif(sys.version_info[:2] not in ((3, 10), (3, 11)),
                                reason="only Python 3.10 and 3.11 re-read zip archives eagerly")


@pytest.fixture
def installed(monkeypatch):
    monkeypatch.setattr(zipimport.zipimporter, "invalidate_caches", worker_daemon._eager_invalidate)
    assert worker_daemon.install()
    return zipimport.zipimporter.invalidate_caches


def _archive(path, names):
    with zipfile.ZipFile(path, "w") as archive:
        for name in names:
            archive.writestr(f"{name}.py", f"NAME = {name!r}\n")


def test_an_unchanged_archive_is_not_read_again(tmp_path, installed):
    path = str(tmp_path / "lib.zip")
    _archive(path, ["alpha"])
    importer = zipimport.zipimporter(path)
    importer.invalidate_caches()   # the first call reads, as Python's own does
    files = importer._files
    for _ in range(3):
        importer.invalidate_caches()
    assert importer._files is files
    assert importer.find_spec("alpha") is not None


def test_a_changed_archive_is_read_again(tmp_path, installed):
    path = str(tmp_path / "lib.zip")
    _archive(path, ["alpha"])
    importer = zipimport.zipimporter(path)
    importer.invalidate_caches()
    _archive(path, ["alpha", "beta"])
    stat = os.stat(path)
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))  # a coarse clock changes too
    importer.invalidate_caches()
    assert importer.find_spec("beta") is not None
    os.remove(path)
    importer.invalidate_caches()   # a vanished archive empties the importer, as Python's own does
    assert importer.find_spec("alpha") is None


def test_importlib_invalidation_goes_through_the_lazy_path(tmp_path, installed, monkeypatch):
    path = str(tmp_path / "lib.zip")
    _archive(path, ["gamma_from_zip"])
    monkeypatch.syspath_prepend(path)
    module = importlib.import_module("gamma_from_zip")
    assert module.NAME == "gamma_from_zip"
    importer = sys.path_importer_cache[path]
    importlib.invalidate_caches()
    files = importer._files
    importlib.invalidate_caches()
    assert importer._files is files
    sys.modules.pop("gamma_from_zip")
