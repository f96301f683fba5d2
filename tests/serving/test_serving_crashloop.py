"""A serving whose instance dies at once every time it is restarted: the supervisor backs off, gives up after a
few crashes in a row, and the status says Failed with the reason; nothing is left running."""

from __future__ import annotations

import os
import signal
import textwrap

from conftest import assert_nothing_left, export_sklearn, recorded
from test_serving_lifecycle import wait_for

from hopsml.serving import lifecycle
from hopsml.serving.processes import wait_gone
from hopsml.serving.supervisor import MAX_CRASHES_IN_A_ROW

PREDICTOR = '''
import os


class Predict:
    def __init__(self):
        if os.path.exists({marker!r}):
            os._exit(3)  # every restart dies before it is ready

    def predict(self, inputs):
        return [0 for _ in inputs]
'''


def test_an_instance_that_dies_at_once_every_time_fails_the_serving_without_endless_restarts(settings, tmp_path):
    export_sklearn(settings, tmp_path / "model")
    marker = str(tmp_path / "broken")
    resources = os.path.join(settings.root, "Projects/test/Resources")
    os.makedirs(resources)
    with open(os.path.join(resources, "predict.py"), "w") as out:
        out.write(textwrap.dedent(PREDICTOR.format(marker=marker)))
    lifecycle.create_or_update("crashy", "Models/iris", "PYTHON", predictor="Resources/predict.py", instances=2,
                               settings=settings)
    serving = lifecycle.start("crashy", settings=settings)
    procs, port, host = recorded(settings, "crashy")
    open(marker, "w").close()
    victim = procs[0]
    assert victim.signal(signal.SIGKILL) and wait_gone(victim, 60)
    status = wait_for(lambda: (s := lifecycle.get_status("crashy", settings)) == "Failed" and s,
                      "the serving to give up")
    assert "in a row" in status.reason and "exited with code 3" in status.reason, status.reason
    restarts = lifecycle.get("crashy", settings).restarts
    assert len(restarts) == MAX_CRASHES_IN_A_ROW
    assert all(r.instance == 0 for r in restarts)
    assert wait_gone(procs[-1], 60)   # the supervisor, once it has stopped the other instance
    assert_nothing_left(procs, serving.port, host)
    lifecycle.stop("crashy", settings=settings)
    assert lifecycle.get_status("crashy", settings) == "Failed"  # stop keeps the reason it failed
