"""Servings scale with their load: the policy on a synthetic load, the load file between real processes' writes and
the supervisor's reads, and real servings scaling out under a load test, in after it with no failed request, and to
zero and back on the next connection."""

from __future__ import annotations

import http.client
import json
import os
import textwrap
import threading
import time

import pytest
from conftest import assert_nothing_left, export_sklearn, recorded
from test_serving_lifecycle import wait_for

from hopsml.serving import autoscale
from hopsml.serving.control import lifecycle
from hopsml.serving.definition import Scaling, ServingDefinition, ServingError

SLOW = '''
import time


class Predict:
    def predict(self, inputs):
        time.sleep({seconds})   # a model that holds its instance: the load is concurrency
        return [0 for _ in inputs]
'''


def _policy(low: int, high: int, target: float = 2.0, window: float = 10.0) -> autoscale.Autoscaler:
    return autoscale.Autoscaler(autoscale.Policy(low, high, target, window), now=0.0)


def _load(scaler: autoscale.Autoscaler, start: float, end: float, concurrency: float, requests_per_s: float,
          integral: float = 0.0, requests: float = 0.0) -> tuple[float, float]:
    """Samples every TICK_S from `start` to `end` of a steady load; returns the totals at the end."""
    t = start
    while t <= end + 1e-9:
        scaler.observe(t, integral, requests)
        t += autoscale.TICK_S
        integral += concurrency * autoscale.TICK_S
        requests += requests_per_s * autoscale.TICK_S
    return integral, requests


def test_a_burst_scales_out_within_the_panic_window_and_in_only_after_a_whole_window():
    scaler = _policy(1, 4, target=2.0, window=10.0)
    totals = _load(scaler, 0.0, 2.0, concurrency=7.0, requests_per_s=100)
    wanted, why = scaler.wanted(1, 2.0)
    assert wanted == 4 and "concurrency 7.0" in why            # ceil(7 / 2) = 4, at once
    scaler.changed(2.0)
    totals = _load(scaler, 2.5, 8.0, 0.5, 10, *totals)
    assert scaler.wanted(4, 8.0) == (4, "")                    # the load fell, but not for a whole window yet
    _load(scaler, 8.5, 14.0, 0.5, 10, *totals)
    assert scaler.wanted(4, 14.0)[0] == 1                      # a whole window of 0.5: one instance


def test_scaling_stays_within_its_bounds_and_reaches_zero_only_when_allowed_and_idle():
    bounded = _policy(2, 3, target=1.0, window=4.0)
    totals = _load(bounded, 0.0, 5.0, concurrency=50.0, requests_per_s=1000)
    assert bounded.wanted(2, 5.0)[0] == 3                      # not 50
    _load(bounded, 5.5, 12.0, 0.0, 0, *totals)
    assert bounded.wanted(3, 12.0)[0] == 2                     # min_instances 2: not 0, not 1
    to_zero = _policy(0, 2, target=1.0, window=4.0)
    totals = _load(to_zero, 0.0, 5.0, concurrency=0.01, requests_per_s=0.5)
    assert to_zero.wanted(1, 5.0)[0] == 1                      # a trickle keeps one
    totals = _load(to_zero, 5.5, 10.0, 0.0, 0, *totals)
    assert to_zero.wanted(1, 10.0) == (0, "no request for 4 s")
    to_zero.changed(10.0)
    _load(to_zero, 10.5, 12.0, 0.0, 0, *totals)
    assert to_zero.wanted(0, 12.0) == (0, "")                  # at zero and idle it stays there (a connection wakes it)


def test_the_load_file_sums_what_the_instances_write_and_survives_an_instance_restarting_in_its_slot():
    fd = autoscale.make_load_file(2)
    reader = autoscale.LoadReader(fd, 2)
    meters = [autoscale.LoadMeter(fd, 0), autoscale.LoadMeter(fd, 1)]
    start = time.monotonic()
    integral, requests = reader.read(start)
    for meter in meters:
        meter.begin()
        meter.begin()
    time.sleep(0.2)
    during, _ = reader.read(time.monotonic())
    assert during - integral >= 4 * 0.2 * 0.9                  # four in flight for 0.2 s, counted before they end
    for meter in meters:
        meter.end()
        meter.end()
    after, answered = reader.read(time.monotonic())
    assert answered - requests == 4
    reader.clear(1)
    autoscale.LoadMeter(fd, 1).begin()                         # a new instance in slot 1: totals only grow
    grown, same = reader.read(time.monotonic())
    assert grown >= after and same == answered
    reader.close()
    os.close(fd)


def test_a_definition_refuses_bounds_that_cannot_hold():
    base = {"name": "s", "model_path": "Models/m", "model_name": "m", "model_version": 1, "model_server": "PYTHON"}
    with pytest.raises(ServingError, match=r"Scaling.min_instances \(3\) is more than Scaling.max_instances \(2\)"):
        ServingDefinition(**base, min_instances=3, max_instances=2)
    with pytest.raises(ServingError, match="Scaling.target must be a number above 0"):
        ServingDefinition(**base, max_instances=2, scale_target=0)
    assert ServingDefinition(**base, instances=2, max_instances=4).scaling_bounds == (2, 4)
    assert not ServingDefinition(**base, instances=3).autoscaled


class Clients:
    """Threads posting rows over keep-alive connections until stopped; every failure is kept."""

    def __init__(self, port: int, count: int) -> None:
        self.port = port
        self.stopped = threading.Event()
        self.answered = 0
        self.failures: list[str] = []
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self.run, daemon=True) for _ in range(count)]
        for thread in self.threads:
            thread.start()

    def run(self) -> None:
        body = json.dumps({"instances": [[5.1, 3.5, 1.4, 0.2]]})
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        while not self.stopped.is_set():
            try:
                connection.request("POST", "/v1/models/scaled:predict", body,
                                   {"Content-Type": "application/json"})
                answer = connection.getresponse()
                answer.read()
                with self.lock:
                    if answer.status == 200:
                        self.answered += 1
                    else:
                        self.failures.append(f"HTTP {answer.status}")
                if answer.getheader("connection", "").lower() == "close":   # a draining instance: reconnect
                    connection.close()
            except (OSError, http.client.HTTPException) as exc:
                with self.lock:
                    self.failures.append(f"{type(exc).__name__}: {exc}")
                connection.close()

    def stop(self) -> None:
        self.stopped.set()
        for thread in self.threads:
            thread.join(60)


def _slow_serving(settings, tmp_path, seconds: float, scaling: Scaling) -> lifecycle.Serving:
    export_sklearn(settings, tmp_path / "model")
    resources = os.path.join(settings.root, "Projects/test/Resources")
    os.makedirs(resources, exist_ok=True)
    with open(os.path.join(resources, "slow.py"), "w") as out:
        out.write(textwrap.dedent(SLOW.format(seconds=seconds)))
    lifecycle.create_or_update("scaled", "Models/iris", "PYTHON", predictor="Resources/slow.py", settings=settings,
                               scaling=scaling)
    return lifecycle.start("scaled", settings=settings)


def test_a_serving_scales_out_under_load_and_in_after_it_without_a_failed_request(settings, tmp_path):
    serving = _slow_serving(settings, tmp_path, 0.02, Scaling(min_instances=1, max_instances=3, target=2, window_s=4))
    assert serving.requested_instances == 1
    heavy = Clients(serving.port, 8)   # 8 in flight against a target of 2: as many instances as allowed
    try:
        wait_for(lambda: (s := lifecycle.get("scaled", settings)).available_instances == 3 and s,
                 "the serving to scale out to 3 instances")
    finally:
        heavy.stop()
    light = Clients(serving.port, 1)   # one client keeps sending through the scale-in
    try:
        scaled_in = wait_for(lambda: (s := lifecycle.get("scaled", settings)).requested_instances == 1 and
                             s.available_instances == 1 and s, "the serving to scale in to 1 instance", 120)
    finally:
        light.stop()
    assert heavy.failures == [] and light.failures == [], (heavy.failures[:5], light.failures[:5])
    assert heavy.answered > 0 and light.answered > 0
    steps = [(step.before, step.after) for step in scaled_in.scaling]
    assert steps[0][0] == 1 and max(after for _, after in steps) == 3 and steps[-1][1] == 1, steps
    assert all(step.ready_s is not None for step in scaled_in.scaling if step.after > step.before)
    from hopsml.ui import create_app

    page = create_app(settings).test_client().get("/p/test/servings/scaled").get_data(as_text=True)
    assert "1 to 3 instances, 2 concurrent requests each" in page
    assert "&rarr; 3: concurrency" in page and "ready after" in page and "&rarr; 1: concurrency" in page
    procs, port, host = recorded(settings, "scaled")
    assert len(procs) == 2   # the supervisor and the one instance left
    lifecycle.stop("scaled", settings=settings)
    assert_nothing_left(procs, port, host)


def test_a_serving_scales_to_zero_and_the_next_connection_waits_for_its_cold_start(settings, tmp_path):
    serving = _slow_serving(settings, tmp_path, 0.0, Scaling(min_instances=0, max_instances=1, window_s=1))
    first = lifecycle.make_inference_request("scaled", [[5.1, 3.5, 1.4, 0.2]], settings=settings)
    assert first == {"predictions": [0]}
    wait_for(lambda: (s := lifecycle.get("scaled", settings)).requested_instances == 0 and
             s.available_instances == 0 and s, "the serving to scale to zero")
    procs, _, _ = recorded(settings, "scaled")
    assert len(procs) == 1   # the supervisor alone holds the port
    assert lifecycle.get_status("scaled", settings) == "Running"
    again = lifecycle.make_inference_request("scaled", [[5.1, 3.5, 1.4, 0.2]], settings=settings)
    assert again == {"predictions": [0]}
    # the supervisor records the step's time once it has seen the instance ready (maybe after the answer went out)
    woken = wait_for(lambda: (s := lifecycle.get("scaled", settings)).scaling[-1].ready_s is not None and s,
                     "the cold start to be recorded")
    cold = woken.scaling[-1]
    assert (cold.before, cold.after) == (0, 1) and "connection arrived" in cold.reason
    assert cold.ready_s is not None and cold.ready_s > 0
    procs, port, host = recorded(settings, "scaled")
    lifecycle.stop("scaled", settings=settings)
    assert_nothing_left(procs, port, host)
    assert serving.port == port
