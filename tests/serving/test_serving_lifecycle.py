"""A serving's life over real processes: it outlives the process that started it (a killed kernel), a
crashed instance is restarted and the status says so, a model that cannot load fails the start with the
reason and the log, and a missing model or version fails before any process starts."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time

import pytest
from conftest import assert_nothing_left, base_url, export_sklearn, http, port_free, recorded, running, settings_for
from own_processes import processes_of_this_test

from hopsml import cli, layout
from hopsml.processes import wait_gone
from hopsml.serving.control import lifecycle


def wait_for(condition, what: str, timeout_s: float = 120.0):
    """Poll `condition` until it holds; the limit only turns a hang into a failure naming `what`."""
    deadline = time.monotonic() + timeout_s
    while not (value := condition()):
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.05)
    return value


def test_a_crashed_instance_is_restarted_and_the_status_says_so(settings, tmp_path):
    fitted = export_sklearn(settings, tmp_path / "model")
    lifecycle.create_or_update("iris", "Models/iris", "PYTHON", instances=2, settings=settings)
    with running(settings, "iris") as serving:
        victim = recorded(settings, "iris")[0][0]
        assert victim.signal(signal.SIGKILL)
        assert wait_gone(victim, 60)
        after = wait_for(lambda: (s := lifecycle.get("iris", settings)).restarts and s.available_instances == 2 and s,
                         "the instance to be restarted")
        assert after.status == "Running"
        assert len(after.restarts) == 1
        assert "instance 0" in after.restarts[0].reason and "SIGKILL" in after.restarts[0].reason
        assert victim.pid not in [p.pid for p in recorded(settings, "iris")[0]]
        status, body = http("POST", base_url(serving) + ":predict", {"instances": [[5.1, 3.5, 1.4, 0.2]]})
        assert (status, body) == (200, {"predictions": fitted.predict([[5.1, 3.5, 1.4, 0.2]]).tolist()})
        assert "restarts (1):" in _cli(settings, "serving", "status", "iris")


KERNEL = """
import sys
from hopsml import serving
serving.start("iris")
print("started", flush=True)
sys.stdin.read()  # a notebook kernel that goes on until it is killed
"""


def test_the_serving_outlives_a_killed_kernel_and_a_fresh_process_stops_it(settings, tmp_path, root):
    export_sklearn(settings, tmp_path / "model")
    lifecycle.create_or_update("iris", "Models/iris", "PYTHON", settings=settings)
    kernel = subprocess.Popen([sys.executable, "-c", KERNEL], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              env={**os.environ, "HOPSML_ROOT": settings.root, "HOPSML_PROJECT": "test"})
    assert kernel.stdout is not None and kernel.stdout.readline() == b"started\n"
    procs, port, host = recorded(settings, "iris")
    try:
        kernel.kill()
        kernel.wait()
        assert lifecycle.get_status("iris", settings) == "Running"
        serving = lifecycle.get("iris", settings)
        assert http("POST", base_url(serving) + ":predict", {"instances": [[5.1, 3.5, 1.4, 0.2]]})[0] == 200
        stopper = subprocess.run([sys.executable, "-m", "hopsml.cli", "--root", settings.root, "--project", "test",
                                  "serving", "stop", "iris"], capture_output=True, text=True)
        assert stopper.returncode == 0, stopper.stderr
        assert "iris: Stopped" in stopper.stdout
    finally:
        for proc in procs:  # whatever happened, nothing is left running
            proc.signal(signal.SIGKILL)
    assert_nothing_left(procs, port, host)
    assert lifecycle.get_status("iris", settings) == "Stopped"


def test_a_killed_server_reads_as_failed_with_the_log_and_stop_cleans_up(settings, tmp_path):
    export_sklearn(settings, tmp_path / "model")
    lifecycle.create_or_update("iris", "Models/iris", "PYTHON", instances=2, settings=settings)
    before = processes_of_this_test()
    lifecycle.start("iris", settings=settings)
    procs, port, host = recorded(settings, "iris")
    supervisor = procs[-1]
    assert supervisor.signal(signal.SIGKILL)
    assert wait_gone(supervisor, 60)
    status = lifecycle.get_status("iris", settings)
    assert status == "Failed"
    assert "is gone without stopping" in status.reason and "ready" in status.log_tail
    for proc in procs[:-1]:  # the instances die with their supervisor
        assert wait_gone(proc, 60)
    lifecycle.stop("iris", settings=settings)
    assert lifecycle.get_status("iris", settings) == "Stopped"
    assert_nothing_left(procs, port, host, before)


def test_a_model_that_cannot_load_fails_the_start_with_reason_and_log(settings, tmp_path):
    (tmp_path / "weights.npz").write_bytes(b"not a model this server knows")
    from hopsml.model import registry

    registry.export(str(tmp_path / "weights.npz"), "odd", settings=settings)
    lifecycle.create_or_update("odd", "Models/odd", "PYTHON", instances=2, settings=settings)
    before = processes_of_this_test()
    with pytest.raises(lifecycle.ServingError) as failure:
        lifecycle.start("odd", settings=settings)
    message = str(failure.value)
    assert "no servable model file" in message and "weights.npz" in message
    assert "Last lines of" in message
    status = lifecycle.get_status("odd", settings)
    assert status == "Failed" and "no servable model file" in status.reason
    procs, port, host = recorded(settings, "odd")
    assert_nothing_left(procs, port, host, before)


def test_a_missing_model_or_version_fails_before_any_process_starts(settings, tmp_path):
    export_sklearn(settings, tmp_path / "model")
    with pytest.raises(lifecycle.ServingError, match=r"no version 3 .*versions: 1"):
        lifecycle.create_or_update("iris", "Models/iris/3", "PYTHON", settings=settings)
    with pytest.raises(lifecycle.ServingError, match=r"no model 'mnist' .*models: iris"):
        lifecycle.create_or_update("mnist", "Models/mnist", "PYTHON", settings=settings)
    lifecycle.create_or_update("iris", "Models/iris", "PYTHON", settings=settings)
    shutil.rmtree(os.path.join(settings.root, layout.model_dir("test", "iris", 1)))  # removed after the definition
    before = processes_of_this_test()
    with pytest.raises(lifecycle.ServingError, match=r"cannot serve 'iris' version 1: no model 'iris'"):
        lifecycle.start("iris", settings=settings)
    assert processes_of_this_test() == before
    assert lifecycle.get_status("iris", settings) == "Stopped"


def test_updating_a_running_serving_restarts_it_with_the_new_definition(settings, tmp_path):
    export_sklearn(settings, tmp_path / "model")
    lifecycle.create_or_update("iris", "Models/iris", "PYTHON", settings=settings)
    with running(settings, "iris"):
        first, port, _ = recorded(settings, "iris")
        updated = lifecycle.create_or_update("iris", "Models/iris", "PYTHON", instances=2, settings=settings)
        assert updated.status == "Running" and updated.available_instances == 2
        assert all(not p.alive() for p in first)
        assert port_free("127.0.0.1", port) or updated.port == port


def _cli(settings, *argv: str) -> str:
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert cli.main(["--root", settings.root, "--project", settings.project, *argv]) == 0
    return out.getvalue()


def test_the_cli_creates_starts_lists_shows_logs_stops_and_deletes(settings, tmp_path):
    export_sklearn(settings, tmp_path / "model")
    assert "no servings" in _cli(settings, "serving", "list")
    assert "serves iris version 1" in _cli(settings, "serving", "create", "flowers", "Models/iris", "--instances", "2")
    before = processes_of_this_test()
    started = _cli(settings, "serving", "start", "flowers")
    assert "flowers: Running at http://127.0.0.1:" in started
    procs, port, host = recorded(settings, "flowers")
    try:
        table = _cli(settings, "serving", "list")
        assert "flowers" in table and "Running" in table and "2/2" in table
        status = _cli(settings, "serving", "status", "flowers")
        assert "status: Running" in status and ":predict" in status
        assert "ready" in _cli(settings, "serving", "logs", "flowers", "-n", "5")
    finally:
        assert "flowers: Stopped" in _cli(settings, "serving", "stop", "flowers")
    assert_nothing_left(procs, port, host, before)
    assert "flowers: deleted" in _cli(settings, "serving", "delete", "flowers")
    assert "no servings" in _cli(settings, "serving", "list")
    from hopsml.errors import HopsmlError

    with pytest.raises(HopsmlError, match="no serving 'flowers'"):
        lifecycle.get_status("flowers", settings_for(tmp_path.parent / tmp_path.name / "root"))


SLOW_PREDICTOR = '''
import os
import time


class Predict:
    def __init__(self):
        while True:  # a model that takes long to load: loading never ends in this test
            time.sleep(0.05)

    def predict(self, inputs):
        return inputs
'''

INTERRUPTED_KERNEL = """
from hopsml import serving
try:
    serving.start("slow")
except KeyboardInterrupt:
    print("interrupted", flush=True)
"""


def test_ctrl_c_while_a_serving_starts_stops_it(settings, tmp_path):
    export_sklearn(settings, tmp_path / "model")
    resources = tmp_path / "root" / "Projects" / "test" / "Resources"
    resources.mkdir(parents=True, exist_ok=True)
    (resources / "slow.py").write_text(SLOW_PREDICTOR)
    lifecycle.create_or_update("slow", "Models/iris", "PYTHON", predictor="Resources/slow.py", instances=2,
                               settings=settings)
    kernel = subprocess.Popen([sys.executable, "-c", INTERRUPTED_KERNEL], stdout=subprocess.PIPE,
                              env={**os.environ, "HOPSML_ROOT": settings.root, "HOPSML_PROJECT": "test"})
    try:
        # the supervisor has recorded itself and its instances, which are loading the model
        wait_for(lambda: len(recorded(settings, "slow")[0]) == 3, "the instances to start")
        procs, port, host = recorded(settings, "slow")
        assert lifecycle.get_status("slow", settings) == "Starting"
        kernel.send_signal(signal.SIGINT)
        out, _ = kernel.communicate()
        assert out == b"interrupted\n"
    finally:
        if kernel.poll() is None:
            kernel.kill()
            kernel.wait()
    assert_nothing_left(procs, port, host)
    assert lifecycle.get_status("slow", settings) == "Stopped"


def test_a_model_on_an_s3_root_is_served_from_a_private_copy_removed_at_stop(tmp_path):
    import glob
    import tempfile

    from s3 import s3_root, s3_server

    from hopsml import config

    with s3_server() as endpoint:
        settings = config.load(environ={}, root=s3_root(endpoint), project="test", log_dir=str(tmp_path / "logs"))
        fitted = export_sklearn(settings, tmp_path / "model")
        lifecycle.create_or_update("iris", "Models/iris", "PYTHON", settings=settings)
        copies = os.path.join(tempfile.gettempdir(), "hopsml-serving-iris-*")
        before = set(glob.glob(copies))
        with running(settings, "iris") as serving:
            assert serving.log.startswith(str(tmp_path / "logs"))  # a remote root keeps the log under log_dir
            assert len(set(glob.glob(copies)) - before) == 1
            status, body = http("POST", base_url(serving) + ":predict", {"instances": [[5.1, 3.5, 1.4, 0.2]]})
            assert (status, body) == (200, {"predictions": fitted.predict([[5.1, 3.5, 1.4, 0.2]]).tolist()})
        assert set(glob.glob(copies)) == before


def test_a_server_whose_serving_was_deleted_by_hand_stops_by_itself(settings, tmp_path):
    export_sklearn(settings, tmp_path / "model")
    lifecycle.create_or_update("iris", "Models/iris", "PYTHON", settings=settings)
    lifecycle.start("iris", settings=settings)
    procs, port, host = recorded(settings, "iris")
    try:
        shutil.rmtree(os.path.join(settings.root, layout.ServingDir.of("test", "iris").path))  # not with delete()
        assert all(wait_gone(proc, 120) for proc in procs)
        assert not os.path.exists(os.path.join(settings.root, layout.ServingDir.of("test", "iris").path))
    finally:
        for proc in procs:
            proc.signal(signal.SIGKILL)
    assert wait_for(lambda: port_free(host, port), "the port to be released")


def test_the_cli_create_takes_the_batching_logging_and_body_knobs_the_python_api_has(settings, tmp_path):
    export_sklearn(settings, tmp_path / "model")
    _cli(settings, "serving", "create", "knobs", "Models/iris", "--batching", "--max-batch-size", "16",
         "--batch-timeout-micros", "2000", "--inference-logging", "PREDICTIONS", "--max-body-bytes", "4096")
    made = lifecycle.get("knobs", settings)
    assert (made.batching_enabled, made.inference_logging) == (True, "PREDICTIONS")
    from hopsml.fs import Storage
    from hopsml.serving import definition as defs

    stored = defs.read(Storage(settings.root), settings.project, "knobs")
    assert (stored.max_batch_size, stored.batch_timeout_micros, stored.max_body_bytes) == (16, 2000, 4096)
    _cli(settings, "serving", "create", "quiet", "Models/iris", "--inference-logging", "NONE")
    assert lifecycle.get("quiet", settings).inference_logging is None
    out = _cli(settings, "serving", "create", "elastic", "Models/iris", "--min-instances", "0", "--max-instances", "3",
               "--scale-target", "4", "--scale-window", "12")
    assert "0 to 3 instances with load" in out
    stored = defs.read(Storage(settings.root), settings.project, "elastic")
    assert (stored.min_instances, stored.max_instances, stored.scale_target, stored.scale_window_s) == (0, 3, 4, 12)
