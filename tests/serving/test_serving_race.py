"""Two processes start the same serving at the same moment (two notebooks, or a notebook and the CLI): one
server runs, and both see it."""

from __future__ import annotations

import os
import subprocess
import sys

from conftest import assert_nothing_left, export_sklearn, recorded
from own_processes import processes_of_this_test

from hopsml.serving import lifecycle

KERNEL = """
import os, sys, time
from hopsml import serving
go = sys.argv[1]
while not os.path.exists(go):   # both kernels start together, as far as the machine lets them
    time.sleep(0.001)
found = serving.start("iris")
print(found.status, found.internal_port, flush=True)
"""


def test_two_processes_starting_one_serving_get_one_server_and_both_see_it(settings, tmp_path):
    export_sklearn(settings, tmp_path / "model")
    lifecycle.create_or_update("iris", "Models/iris", "PYTHON", instances=2, settings=settings)
    before = processes_of_this_test()
    go = str(tmp_path / "go")
    env = {**os.environ, "HOPSML_ROOT": settings.root, "HOPSML_PROJECT": "test"}
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
