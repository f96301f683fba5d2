"""A driver stopped by Ctrl-C (a script) or by a notebook's interrupt leaves no rank folder (payload,
output) behind in its temp folder: the driver is a process of the test's own, with a TMPDIR of its own."""

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

DRIVER = textwrap.dedent("""
    import sys, time
    from hopsml import experiment

    def nap():
        print("rank ready", flush=True)
        time.sleep(600)

    if sys.argv[1] == "notebook":  # a kernel survives its interrupt: the run stops, the process goes on
        try:
            experiment.launch(nap, name="interrupted")
        except KeyboardInterrupt:
            print("interrupted, still alive", flush=True)
        time.sleep(600)
    else:
        experiment.launch(nap, name="interrupted")
""")


def _rank_folders(tmp):
    return [name for name in os.listdir(tmp) if name.startswith("hopsml-rank-")]


def _wait_for(condition, what, limit_s=120.0):
    deadline = time.monotonic() + limit_s
    while not condition():
        assert time.monotonic() < deadline, f"still waiting for {what}"
        time.sleep(0.2)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["script", "notebook"])
def test_an_interrupted_driver_leaves_no_rank_folder(tmp_path, kind):
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = {**os.environ, "TMPDIR": str(tmp), "HOPSML_ROOT": str(tmp_path / "root"), "HOPSML_PROJECT": "t",
           "HOPSML_MASTER": "local[2]", "HOPSML_LOG_DIR": str(tmp_path / "logs")}
    env.pop("HOPSML_CONF", None)
    (tmp_path / "driver.py").write_text(DRIVER)
    driver = subprocess.Popen([sys.executable, str(tmp_path / "driver.py"), kind], env=env, cwd=tmp_path,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        _wait_for(lambda: _rank_folders(tmp), "the rank's folder")
        time.sleep(2)  # the rank's function is running
        driver.send_signal(signal.SIGINT)
        if kind == "script":
            driver.wait(timeout=120)
        _wait_for(lambda: not _rank_folders(tmp), f"no rank folder after the {kind}'s interrupt")
    finally:
        driver.kill()
        output = driver.communicate(timeout=60)[0]
    if kind == "notebook":
        assert "interrupted, still alive" in output, output[-3000:]
