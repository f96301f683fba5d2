"""The model servers hopsml's serving is measured against, each started in a Python environment of its own (none is a
hopsml dependency): NVIDIA Triton as `nvidia-pytriton` ships it (its dynamic batcher, the model in its Python
backend, v2 JSON requests) and Ray Serve (`@serve.batch` in one replica, requests through its HTTP proxy). Both serve
the same joblib file as hopsml, so the model's cost is the same everywhere; both get the batching knobs hopsml's
bench uses (at most 32 rows, 1 ms of waiting).

    pip install nvidia-pytriton "ray[serve]" scikit-learn==<the version hopsml's environment has>
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
import urllib.error
import urllib.request

TRITON = textwrap.dedent("""
    import sys, joblib, numpy as np
    from pytriton.decorators import batch
    from pytriton.model_config import DynamicBatcher, ModelConfig, Tensor
    from pytriton.triton import Triton, TritonConfig
    path, port, grpc, metrics, features = sys.argv[1], *map(int, sys.argv[2:6])
    model = joblib.load(path)

    @batch
    def infer(x):
        return {"y": model.predict(x).astype(np.int64).reshape(-1, 1)}

    with Triton(config=TritonConfig(http_port=port, grpc_port=grpc, metrics_port=metrics)) as triton:
        triton.bind(model_name="model", infer_func=infer,
                    inputs=[Tensor(name="x", dtype=np.float64, shape=(features,))],
                    outputs=[Tensor(name="y", dtype=np.int64, shape=(1,))],
                    config=ModelConfig(max_batch_size=32, batcher=DynamicBatcher(max_queue_delay_microseconds=1000)))
        triton.serve()
""")

RAY = textwrap.dedent("""
    import signal, sys, joblib, numpy as np, ray
    from ray import serve
    from starlette.responses import JSONResponse
    path, port = sys.argv[1], int(sys.argv[2])
    ray.init(include_dashboard=False, log_to_driver=False)
    serve.start(http_options={"host": "127.0.0.1", "port": port})

    @serve.deployment(max_ongoing_requests=256)
    class Model:
        def __init__(self):
            self.model = joblib.load(path)

        @serve.batch(max_batch_size=32, batch_wait_timeout_s=0.001)
        async def predict(self, rows):
            return self.model.predict(np.array(rows)).tolist()

        async def __call__(self, request):
            body = await request.json()
            # a whole answer with its length (a returned dict goes out chunked)
            return JSONResponse({"predictions": [await self.predict(body["instances"][0])]})

    serve.run(Model.bind(), route_prefix="/", blocking=False)
    print("READY", flush=True)
    signal.pause()
""")


def free_ports(count: int) -> list[int]:
    socks = [socket.socket() for _ in range(count)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def peer_python(given: str | None, modules: str, what: str) -> str | None:
    """The python to run a peer with, or None (the reason printed) when it cannot import `modules`."""
    candidate = given or sys.executable
    probe = subprocess.run([candidate, "-c", f"import {modules}"], capture_output=True, text=True)
    if probe.returncode != 0:
        last = probe.stderr.strip().splitlines()[-1] if probe.stderr.strip() else "no output"
        print(f"{what} skipped: {candidate} cannot import {modules} ({last}); pass the python of an environment "
              "that has it")
        return None
    return candidate


class PeerServer:
    """A peer model server in its own session, answering `check` at `path` within `timeout_s`, until closed."""

    def __init__(self, name: str, argv: list[str], port: int, path: str, check: bytes, log_path: str,
                 timeout_s: float = 300.0, env: dict[str, str] | None = None) -> None:
        self.name, self.port, self.path = name, port, path
        self.log = open(log_path, "wb")
        self.proc = subprocess.Popen(argv, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True,
                                     env={**os.environ, "RAY_USAGE_STATS_ENABLED": "0", **(env or {})})
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                self.close()
                raise RuntimeError(f"{name} exited ({self.proc.returncode}); see {log_path}")
            try:
                request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=check, method="POST",
                                                 headers={"Content-Type": "application/json"})
                json.loads(urllib.request.urlopen(request, timeout=10).read())
                return
            except (OSError, urllib.error.URLError, ValueError):
                time.sleep(0.5)
        self.close()
        raise RuntimeError(f"{name} did not answer {path} within {timeout_s:.0f} s; see {log_path}")

    def close(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(timeout=30)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait()
        self.log.close()


def triton(python: str, model_path: str, row: list[float], log_path: str) -> tuple[PeerServer, bytes]:
    """Triton serving the model as 'model'; returns the server and the v2 JSON body of one row."""
    port, grpc, metrics = free_ports(3)
    body = json.dumps({"inputs": [{"name": "x", "shape": [1, len(row)], "datatype": "FP64", "data": row}]}).encode()
    # Triton's Python backend stub loads libpython3.x by its soname: the one of the peer's own interpreter must be
    # found first (the system's, of another patch release, fails on the interpreter's standard library)
    libdir = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_config_var('LIBDIR'))"],
                            capture_output=True, text=True, check=True).stdout.strip()
    library_path = ":".join(p for p in (libdir, os.environ.get("LD_LIBRARY_PATH", "")) if p)
    server = PeerServer("triton", [python, "-c", TRITON, model_path, str(port), str(grpc), str(metrics),
                                   str(len(row))], port, "/v2/models/model/infer", body, log_path,
                        env={"LD_LIBRARY_PATH": library_path})
    return server, body


def ray_serve(python: str, model_path: str, row: list[float], log_path: str) -> tuple[PeerServer, bytes]:
    """Ray Serve's proxy in front of one replica of the model; returns the server and the body of one row."""
    (port,) = free_ports(1)
    body = json.dumps({"instances": [row]}).encode()
    server = PeerServer("ray serve", [python, "-c", RAY, model_path, str(port)], port, "/", body, log_path)
    return server, body
