"""What each serving feature costs, for `bench/serving.py --features`: the digits MLP served batched, one instance,
against the same serving with one feature more (a canary split, the autoscaler's metering, several models per
server, the v2 JSON and binary paths, inference logging off), all started at once and loaded in turns; then the
time a scale-out step takes to its new instance's first answer, and a cold start from zero."""

from __future__ import annotations

import json
import time
from typing import Any

import numpy as np
from serving import Load, Target, measure, post, server_pid


def binary_request(path: str, row: list[float]) -> bytes:
    """A v2 request in the binary tensor extension, as Triton's clients send it: a JSON head, then raw FP64 bytes."""
    data = np.asarray([row], dtype="<f8").tobytes()
    head = json.dumps({"inputs": [{"name": "x", "shape": [1, len(row)], "datatype": "FP64",
                                   "parameters": {"binary_data_size": len(data)}}],
                       "outputs": [{"name": "output-0", "parameters": {"binary_data": True}}]}).encode()
    return (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/octet-stream\r\n"
            f"Inference-Header-Content-Length: {len(head)}\r\nContent-Length: {len(head) + len(data)}\r\n\r\n"
            ).encode() + head + data


def feature_costs(settings: Any, model_path: str, row: list[float], clients: int, seconds: float, repeat: int,
                  results: dict[tuple[str, str], dict[int, Load]]) -> None:
    from hopsml.model import registry
    from hopsml.serving import Canary, Models, Scaling
    from hopsml.serving.control import lifecycle

    registry.export(model_path, "digitsF", settings=settings)
    registry.export(model_path, "digitsF", settings=settings)   # version 2, the canary: the same model
    registry.export(model_path, "digitsB", settings=settings)   # another model beside it on a server of several
    v1 = json.dumps({"instances": [row]}).encode()
    v2 = json.dumps({"inputs": [{"name": "x", "shape": [1, len(row)], "datatype": "FP64", "data": row}]}).encode()
    variants: list[tuple[str, dict[str, Any], str]] = [
        ("base", {}, "v1"), ("canary10", {"canary": Canary(version=2, traffic_percent=10)}, "v1"),
        ("canary50", {"canary": Canary(version=2, traffic_percent=50)}, "v1"),
        ("autoscaler", {"scaling": Scaling(min_instances=1, max_instances=2, target=1e6)}, "v1"),
        ("nolog", {"inference_logging": None}, "v1"), ("models", {"models": Models(names=["digitsB"])}, "v1"),
        ("plain", {"batching_enabled": False}, "v1"),
        ("plain canary10", {"batching_enabled": False, "canary": Canary(version=2, traffic_percent=10)}, "v1")]
    targets, started = [], []
    try:
        for name, extra, _ in variants:
            serving = "f" + name.replace(" ", "")
            lifecycle.create_or_update(serving, "Models/digitsF", "PYTHON", model_version=1,
                                       settings=settings, **{"batching_enabled": True, **extra})
            started.append(serving)
            s = lifecycle.start(serving, settings=settings)
            targets.append(Target(f"hopsml {name}", "127.0.0.1", s.internal_port,
                                  post(f"/v1/models/{serving}:predict", v1), v1, server_pid(settings, serving)))
        base = targets[0]
        targets += [Target("hopsml v2 JSON", "127.0.0.1", base.port, post("/v2/models/fbase/infer", v2), v2, base.pid),
                    Target("hopsml v2 binary", "127.0.0.1", base.port, binary_request("/v2/models/fbase/infer", row),
                           None, base.pid)]
        print(f"hopsml digits batched, one feature more each, in turns ({clients} clients):", flush=True)
        loads = measure(targets, [clients], seconds, repeat)
    finally:
        for name in started:
            lifecycle.stop(name, settings=settings)
    triton = results.get(("digits", "triton"))
    reference = loads["hopsml base"][clients]
    print(f"\nfeature costs at {clients} clients (targets: each >= 1.5x Triton's req/s with p99 no worse; a canary "
          "split costs < 5%)")
    for name, by_clients in loads.items():
        r = by_clients[clients]
        line = f"  {name:<22} {r.rps:8.0f} req/s ({r.rps / reference.rps:.2f}x base)  p99 {r.p99_ms:6.2f} ms"
        if triton:
            line += f"  {r.rps / triton[clients].rps:.2f}x Triton (p99 {triton[clients].p99_ms:.2f} ms)"
        print(line)

    def cost(split: str, base: str) -> str:
        return f"{1 - loads[split][clients].rps / loads[base][clients].rps:+.1%}"

    print(f"  a canary split's cost in req/s: batched 10% {cost('hopsml canary10', 'hopsml base')}, 50% "
          f"{cost('hopsml canary50', 'hopsml base')}; batching off 10% {cost('hopsml plain canary10', 'hopsml plain')}"
          " (batched, the canary's batches hold its share of the requests while each model call has its fixed cost)")


def scaling_times(settings: Any, row: list[float]) -> None:
    """A serving that scales to zero: the first request's wait at zero (cold start), then a scale-out under load."""
    from serving import run_load

    from hopsml.serving import Scaling
    from hopsml.serving.control import lifecycle

    lifecycle.create_or_update("fscaled", "Models/digitsF", "PYTHON", model_version=1, batching_enabled=True,
                               scaling=Scaling(min_instances=0, max_instances=2, target=4, window_s=2),
                               settings=settings)
    s = lifecycle.start("fscaled", settings=settings)
    body = json.dumps({"instances": [row]}).encode()
    try:
        deadline = time.monotonic() + 60
        while lifecycle.get("fscaled", settings).requested_instances != 0 and time.monotonic() < deadline:
            time.sleep(0.1)
        start = time.perf_counter()
        lifecycle.make_inference_request("fscaled", [row], settings=settings)
        waited = time.perf_counter() - start
        cold = lifecycle.get("fscaled", settings).scaling[-1]
        print(f"\ncold start: the first request at zero instances waited {waited * 1e3:.0f} ms (the instance was "
              f"ready {cold.ready_s} s after the connection arrived)")
        run_load("127.0.0.1", s.internal_port, post("/v1/models/fscaled:predict", body), 64, 3.0)
        outs = [step for step in lifecycle.get("fscaled", settings).scaling if step.after > step.before > 0]
        for step in outs:
            print(f"scale-out {step.before} -> {step.after}: the new instance answered {step.ready_s} s after the "
                  f"decision ({step.reason})")
        if not outs:
            print("no scale-out step under 64 clients (the load stayed under the target)")
    finally:
        lifecycle.stop("fscaled", settings=settings)
