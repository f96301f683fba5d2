"""Two processes start the same serving at the same moment (two notebooks, or a notebook and the CLI): one
server runs, and both see it; under a local root and under an S3 root (a real S3 API on this host), which
has no lock of its own."""

from __future__ import annotations

import os
import subprocess
import sys

from conftest import assert_nothing_left, export_sklearn, recorded
from own_processes import processes_of_this_test

from hopsml import config
from hopsml.serving.control import lifecycle

KERNEL = """
import os, sys, time
from hopsml import serving
go = sys.argv[1]
while not os.path.exists(go):   # both kernels start together, as far as the machine lets them
    time.sleep(0.001)
found = serving.start("iris")
print(found.status, found.internal_port, flush=True)
"""


def _race(settings: config.Settings, tmp_path) -> None:
    """Two kernels start 'iris' at once; exactly one launches a server, and both report it running."""
    export_sklearn(settings, tmp_path / "model")
    lifecycle.create_or_update("iris", "Models/iris", "PYTHON", instances=2, settings=settings)
    before = processes_of_this_test()
    go = str(tmp_path / "go")
    env = {**os.environ, "HOPSML_ROOT": settings.root, "HOPSML_PROJECT": "test", "HOPSML_LOG_DIR": settings.log_dir}
    kernels = [subprocess.Popen([sys.executable, "-c", KERNEL, go], env=env, stdout=subprocess.PIPE, text=True)
               for _ in range(2)]
    open(go, "w").close()
    outs = [k.communicate()[0].split() for k in kernels]
    procs, port, host = recorded(settings, "iris")
    try:
        assert [k.returncode for k in kernels] == [0, 0]
        assert outs == [["Running", str(port)], ["Running", str(port)]]
        assert len(procs) == 3   # one supervisor, two instances
        with open(lifecycle.get("iris", settings).log) as log:
            text = log.read()
        assert text.count("starting serving iris") == 1, text   # one launch: the other start found it running
        assert text.count("instance 0 started") == 1, text
    finally:
        lifecycle.stop("iris", settings=settings)
    assert_nothing_left(procs, port, host, before)


def test_two_processes_starting_one_serving_get_one_server_and_both_see_it(settings, tmp_path):
    _race(settings, tmp_path)
    assert os.path.exists(lifecycle.start_lock_path(settings, "test", "iris"))   # in the serving's folder
    assert lifecycle.start_lock_path(settings, "test", "iris").startswith(settings.root)


def test_under_an_s3_root_two_starts_get_one_server_too(tmp_path):
    from s3 import s3_root, s3_server

    with s3_server() as endpoint:
        settings = config.load(environ={}, root=s3_root(endpoint), project="test", log_dir=str(tmp_path / "logs"))
        _race(settings, tmp_path)
        lock = lifecycle.start_lock_path(settings, "test", "iris")
        assert lock.startswith(str(tmp_path / "logs")) and os.path.exists(lock)   # on this host, under log_dir
        other = config.load(environ={}, root=s3_root(endpoint), project="test", log_dir=str(tmp_path / "logs"))
        assert lifecycle.start_lock_path(other, "test", "iris") != lock   # another root (prefix): another lock
