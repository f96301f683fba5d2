"""Instances that keep crashing are given up on alone: the supervisor backs off, stops restarting an instance that
crashes too often (in a row without becoming ready, or too many times a minute), keeps serving on the healthy ones
and names the failing ones; a serving with no healthy instance left fails with the reason. Nothing is left
running."""

from __future__ import annotations

import json
import os
import signal
import textwrap
import time

from conftest import assert_nothing_left, base_url, export_sklearn, http, recorded, running
from test_serving_lifecycle import wait_for

from hopsml.processes import wait_gone
from hopsml.serving.control import lifecycle
from hopsml.serving.server.supervisor import MAX_CRASHES_IN_A_ROW, MAX_RESTARTS_IN_WINDOW

PREDICTOR = '''
import os


class Predict:
    def __init__(self):
        if os.path.exists({marker!r}):
            os._exit(3)  # every restart dies before it is ready

    def predict(self, inputs):
        return [0 for _ in inputs]
'''


def _script(settings, text: str) -> None:
    resources = os.path.join(settings.root, "Projects/test/Resources")
    os.makedirs(resources, exist_ok=True)
    with open(os.path.join(resources, "predict.py"), "w") as out:
        out.write(textwrap.dedent(text))


def test_an_instance_that_dies_at_once_every_time_fails_the_serving_without_endless_restarts(settings, tmp_path):
    export_sklearn(settings, tmp_path / "model")
    marker = str(tmp_path / "broken")
    _script(settings, PREDICTOR.format(marker=marker))
    lifecycle.create_or_update("crashy", "Models/iris", "PYTHON", predictor="Resources/predict.py", instances=1,
                               settings=settings)
    serving = lifecycle.start("crashy", settings=settings)
    procs, port, host = recorded(settings, "crashy")
    open(marker, "w").close()
    victim = procs[0]
    assert victim.signal(signal.SIGKILL) and wait_gone(victim, 60)
    status = wait_for(lambda: (s := lifecycle.get_status("crashy", settings)) == "Failed" and s,
                      "the serving to give up")
    assert "in a row" in status.reason and "exited with code 3" in status.reason, status.reason
    assert "every instance crashed too often" in status.reason, status.reason
    restarts = lifecycle.get("crashy", settings).restarts
    assert len(restarts) == MAX_CRASHES_IN_A_ROW
    assert all(r.instance == 0 for r in restarts)
    assert wait_gone(procs[-1], 60)   # the supervisor
    assert_nothing_left(procs, serving.port, host)
    lifecycle.stop("crashy", settings=settings)
    assert lifecycle.get_status("crashy", settings) == "Failed"  # stop keeps the reason it failed


FLAKY = '''
import json, os, threading


class Predict:
    def __init__(self):
        if json.loads(os.environ["HOPSML_SERVING_INSTANCE"])["index"] == 1 and os.path.exists({marker!r}):
            threading.Timer(0.3, os._exit, (3,)).start()   # ready, then dead: every time

    def predict(self, inputs):
        return [0 for _ in inputs]
'''


def test_an_instance_that_crashes_too_often_is_given_up_on_and_the_healthy_one_keeps_serving(settings, tmp_path):
    export_sklearn(settings, tmp_path / "model")
    marker = str(tmp_path / "flaky")
    _script(settings, FLAKY.format(marker=marker))
    open(marker, "w").close()
    lifecycle.create_or_update("flaky", "Models/iris", "PYTHON", predictor="Resources/predict.py", instances=2,
                               settings=settings)
    with running(settings, "flaky") as serving:
        # instance 1 becomes ready and dies 0.3 s later, MAX_RESTARTS_IN_WINDOW + 1 times in well under a minute
        given_up = wait_for(lambda: (s := lifecycle.get("flaky", settings)).failing_instances and s,
                            "instance 1 to be given up on", timeout_s=150)
        assert [f.instance for f in given_up.failing_instances] == [1]
        assert f"crashed {MAX_RESTARTS_IN_WINDOW + 1} times within 60 s" in given_up.failing_instances[0].reason
        status = lifecycle.get_status("flaky", settings)
        assert status == "Running" and "1 of 2 instances failing" in status.reason, (status, status.reason)
        assert given_up.available_instances == 1
        time.sleep(0.5)   # the last crash's connections are gone
        answers = [http("POST", base_url(serving) + ":predict", {"instances": [[1, 2, 3, 4]]}) for _ in range(20)]
        assert answers == [(200, {"predictions": [0]})] * 20
        assert json.dumps(lifecycle.get_status("flaky", settings)) == '"Running"'
