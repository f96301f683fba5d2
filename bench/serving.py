"""Model serving: hopsml serving against MLflow's scoring server, and batching on against off.

One run, one machine, the same models: a PyTorch MLP and a scikit-learn logistic regression (both on 64
features), each served by hopsml with batching on and off (one instance each) and by `mlflow models serve`
(one uvicorn worker, `--env-manager local`), loaded by 1, 16 and 64 concurrent clients. Each client sends
one row per request over its own HTTP/1.1 keep-alive connection (an asyncio protocol on a raw socket) and
waits for the answer; throughput is answers per second, latency each request's time from send to last
byte. hopsml's batched and plain servings of a model run side by side and take turns, run by run, so that
a change in what else the machine runs falls on both.

The client's own ceiling is measured first against a server that answers a fixed response without reading
the body, so a figure close to it would mean the client, not the server, was the limit. The model's own
call (one row, in this process, one thread) is the floor of the one-client latency. On a shared machine
throughput moves with what else runs; the server's CPU time per answer (all its processes, from /proc)
moves much less, and is printed beside it.

    python bench/serving.py                             # MLflow too when it imports in this python
    python bench/serving.py --mlflow-python /path/to/mlflow-venv/bin/python --repeat 3
    python bench/serving.py --models mlp --no-mlflow --hidden 2048,2048   # a costlier MLP

MLflow is not a hopsml dependency: give the python of an environment that has it (mlflow, torch and
scikit-learn of the same versions as here), else its rows are skipped with a message.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
import urllib.request
from dataclasses import dataclass
from typing import Any

import numpy as np

FEATURES = 64
HIDDEN = (1024, 1024)
CLASSES = 10


@dataclass
class Load:
    """One load run's figures; `cpu_ms` is the server's CPU time (all its processes) per answer."""

    rps: float
    p50_ms: float
    p99_ms: float
    errors: int
    cpu_ms: float = float("nan")


def tree_cpu_s(root: int) -> float:
    """User+system CPU seconds of `root` and every process below it (from /proc)."""
    parents: dict[int, int] = {}
    times: dict[int, float] = {}
    tick = os.sysconf("SC_CLK_TCK")
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as stat:
                fields = stat.read().rsplit(b")", 1)[1].split()
        except OSError:
            continue
        parents[int(entry)] = int(fields[1])
        times[int(entry)] = (int(fields[11]) + int(fields[12])) / tick
    total, todo = 0.0, [root]
    while todo:
        pid = todo.pop()
        total += times.get(pid, 0.0)
        todo += [child for child, parent in parents.items() if parent == pid]
    return total


# --- the client --------------------------------------------------------------------------------------------
class _Client(asyncio.Protocol):
    """One client: a keep-alive connection that sends the request again as soon as the whole answer is in.
    A protocol rather than asyncio's streams: 13 us of CPU per request instead of 16-19 (64 clients), which on
    a small machine is CPU taken from the server being measured, more from a server that uses two cores."""

    def __init__(self, request: bytes, stop_at: float, latencies: list[float], errors: list[int],
                 done: asyncio.Future[None]) -> None:
        self.request, self.stop_at, self.latencies, self.errors, self.done = request, stop_at, latencies, errors, done
        self.buffer = b""
        self.answer_end = -1       # where the answer being read ends in the buffer, once its head is in
        self.sent = 0.0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.send()

    def send(self) -> None:
        self.sent = time.perf_counter()
        self.transport.write(self.request)  # type: ignore[attr-defined]

    def data_received(self, data: bytes) -> None:
        buffer = self.buffer + data if self.buffer else data
        while True:
            if self.answer_end < 0:
                end = buffer.find(b"\r\n\r\n")
                if end < 0:
                    break
                head = buffer[:end].lower()
                at = head.find(b"\r\ncontent-length:")   # not inference-header-content-length
                length = int(head[at + 17:].split(b"\r\n", 1)[0]) if at >= 0 else 0
                if head[9:12] != b"200":
                    self.errors[0] += 1
                self.answer_end = end + 4 + length
            if len(buffer) < self.answer_end:
                break
            buffer, self.answer_end = buffer[self.answer_end:], -1
            now = time.perf_counter()
            self.latencies.append(now - self.sent)
            if now < self.stop_at:
                self.send()
            else:
                self.transport.close()
                break
        self.buffer = buffer

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.done.done():
            self.done.set_result(None)


async def _clients(host: str, port: int, request: bytes, clients: int, stop_at: float, latencies: list[float],
                   errors: list[int]) -> None:
    loop = asyncio.get_running_loop()
    done = [loop.create_future() for _ in range(clients)]
    for finished in done:
        await loop.create_connection(lambda f=finished: _Client(request, stop_at, latencies, errors, f), host, port)
    await asyncio.gather(*done)


async def _load(host: str, port: int, request: bytes, clients: int, seconds: float, server_pid: int | None) -> Load:
    await _clients(host, port, request, clients, time.perf_counter() + 0.3, [], [0])   # warm
    latencies: list[float] = []
    errors = [0]
    cpu = tree_cpu_s(server_pid) if server_pid else 0.0
    start = time.perf_counter()
    await _clients(host, port, request, clients, start + seconds, latencies, errors)
    elapsed = time.perf_counter() - start
    cpu_ms = (tree_cpu_s(server_pid) - cpu) * 1e3 / max(1, len(latencies)) if server_pid else float("nan")
    ms = np.array(latencies) * 1e3
    return Load(len(latencies) / elapsed, float(np.percentile(ms, 50)), float(np.percentile(ms, 99)), errors[0],
                cpu_ms)


def run_load(host: str, port: int, request: bytes, clients: int, seconds: float, server_pid: int | None = None) -> Load:
    try:
        import uvloop

        runner = uvloop.run
    except ImportError:
        runner = asyncio.run
    return runner(_load(host, port, request, clients, seconds, server_pid))


def post(path: str, body: bytes, host: str = "127.0.0.1") -> bytes:
    return (f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode() + body


FIXED_SERVER = textwrap.dedent("""
    import asyncio, socket, sys
    ANSWER = b"HTTP/1.1 200 OK\\r\\ncontent-type: application/json\\r\\ncontent-length: 20\\r\\n\\r\\n" + b" " * 20

    class Fixed(asyncio.Protocol):
        def connection_made(self, transport):
            self.transport = transport
        def data_received(self, data):  # one request per write from the bench's client
            self.transport.write(ANSWER)

    async def main():
        sock = socket.socket(fileno=int(sys.argv[1]))
        server = await asyncio.get_running_loop().create_server(Fixed, sock=sock)
        await server.serve_forever()
    try:
        import uvloop
        uvloop.run(main())
    except ImportError:
        asyncio.run(main())
""")


def _listening_socket() -> socket.socket:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(1024)
    return sock


def client_ceiling(request: bytes, clients: int, seconds: float) -> Load:
    """The client against a server that does no work: an upper bound on what it can measure."""
    sock = _listening_socket()
    proc = subprocess.Popen([sys.executable, "-c", FIXED_SERVER, str(sock.fileno())], pass_fds=[sock.fileno()])
    try:
        return run_load("127.0.0.1", sock.getsockname()[1], request, clients, seconds)
    finally:
        proc.terminate()
        proc.wait()
        sock.close()


# --- the models --------------------------------------------------------------------------------------------
def build_models(folder: str, hidden: tuple[int, ...] = HIDDEN) -> dict[str, str]:
    """The MLP (torch.save) and the logistic regression (joblib), fitted on random data; their paths."""
    import joblib
    import torch
    from sklearn.linear_model import LogisticRegression

    rng = np.random.default_rng(0)
    x = rng.normal(size=(2000, FEATURES)).astype("float32")
    y = (x[:, :CLASSES] ** 2).argmax(axis=1)
    torch.manual_seed(0)
    sizes = (FEATURES, *hidden, CLASSES)
    layers: list[torch.nn.Module] = []
    for a, b in zip(sizes, sizes[1:]):
        layers += [torch.nn.Linear(a, b), torch.nn.ReLU()]
    net = torch.nn.Sequential(*layers[:-1]).eval()
    os.makedirs(folder, exist_ok=True)
    paths = {"mlp": os.path.join(folder, "mlp.pth"), "sklearn": os.path.join(folder, "sklearn.joblib"),
             "digits": os.path.join(folder, "digits.joblib")}
    torch.save(net, paths["mlp"])
    joblib.dump(LogisticRegression(max_iter=300).fit(x, y), paths["sklearn"])
    joblib.dump(digits_mlp(), paths["digits"])
    return paths


def digits_mlp() -> object:
    """scikit-learn's MLP on its bundled digits (64 features): the model the peer servers are compared on."""
    from sklearn.datasets import load_digits
    from sklearn.neural_network import MLPClassifier

    x, y = load_digits(return_X_y=True)
    model = MLPClassifier(hidden_layer_sizes=(64,), max_iter=300, random_state=0).fit(x, y)
    del model._random_state   # a numpy Generator: a peer's environment with numpy 1.x (pytriton) could not load it
    return model


def own_call_ms(paths: dict[str, str], row: list[float]) -> dict[str, float]:
    """Median time of the model's own call on one row, one thread, as a serving instance makes it; and, as
    'mlp per row of 32', the MLP's time per row in a call on a full default batch (what batching can save in
    the model itself)."""
    import joblib
    import torch

    torch.set_num_threads(1)
    net = torch.load(paths["mlp"], weights_only=False)
    model = joblib.load(paths["sklearn"])
    one32 = np.array([row], dtype="float32")
    one64 = np.array([row], dtype="float64")

    def mlp() -> None:
        with torch.inference_mode():
            net(torch.from_numpy(one32))

    batch32 = np.repeat(one32, 32, axis=0)

    def mlp32() -> None:
        with torch.inference_mode():
            net(torch.from_numpy(batch32))

    digits = joblib.load(paths["digits"])
    calls = {"mlp": mlp, "sklearn": lambda: model.predict(one64), "digits": lambda: digits.predict(one64),
             "mlp per row of 32": mlp32}
    out = {}
    for name, call in calls.items():
        times = []
        for _ in range(500):
            start = time.perf_counter()
            call()
            times.append(time.perf_counter() - start)
        out[name] = statistics.median(times[100:]) * 1e3
    out["mlp per row of 32"] /= 32
    return out


# --- MLflow ------------------------------------------------------------------------------------------------
MLFLOW_SAVE = textwrap.dedent("""
    import sys, joblib, numpy as np, torch, mlflow.pytorch, mlflow.sklearn
    from mlflow.models import infer_signature
    mlp, sk, out, digits = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[5]
    example = np.zeros((1, int(sys.argv[4])), dtype="float32")
    net = torch.load(mlp, weights_only=False)
    with torch.no_grad():
        answer = net(torch.from_numpy(example)).numpy()
    # pip_requirements given: MLflow would otherwise load each model again in a subprocess to infer them
    mlflow.pytorch.save_model(net, out + "/mlp", signature=infer_signature(example, answer), input_example=example,
                              pip_requirements=["torch"])
    model = joblib.load(sk)
    mlflow.sklearn.save_model(model, out + "/sklearn",
                              signature=infer_signature(example.astype("float64"), model.predict(example)),
                              pip_requirements=["scikit-learn"], serialization_format="cloudpickle")
    model = joblib.load(digits)
    mlflow.sklearn.save_model(model, out + "/digits",
                              signature=infer_signature(example.astype("float64"), model.predict(example)),
                              pip_requirements=["scikit-learn"], serialization_format="cloudpickle")
""")


def mlflow_python(given: str | None) -> str | None:
    """The python to run MLflow with, or None (with the reason printed) when there is none."""
    candidate = given or sys.executable
    probe = subprocess.run([candidate, "-c", "import mlflow, torch, sklearn"], capture_output=True, text=True)
    if probe.returncode != 0:
        print(f"MLflow skipped: {candidate} cannot import mlflow, torch and sklearn "
              f"({probe.stderr.strip().splitlines()[-1] if probe.stderr.strip() else 'no output'}); pass "
              "--mlflow-python with the python of an environment that has them")
        return None
    return candidate


def mlflow_server(python: str, model_dir: str, log_path: str, check: bytes) -> Any:
    """`mlflow models serve` of one saved model, on a free port, until closed (a serving_peers.PeerServer)."""
    import serving_peers

    (port,) = serving_peers.free_ports(1)   # mlflow binds by port number
    # its scoring server runs `uvicorn` by name: the environment's bin folder goes first on PATH
    env = {"MLFLOW_TRACKING_URI": "file://" + os.path.dirname(log_path) + "/mlruns",
           "PATH": os.path.dirname(python) + os.pathsep + os.environ.get("PATH", "")}
    return serving_peers.PeerServer("mlflow", [python, "-m", "mlflow", "models", "serve", "-m", model_dir, "-p",
                                               str(port), "-h", "127.0.0.1", "-w", "1", "--env-manager", "local"],
                                    port, "/invocations", check, log_path, timeout_s=180, env=env)


def server_pid(settings: object, name: str) -> int | None:
    """The supervisor process of a running hopsml serving (its instances are its children)."""
    from hopsml.fs import Storage
    from hopsml.serving.server import state

    st = state.read(Storage(settings.root), settings.project, name)  # type: ignore[attr-defined]
    return st.supervisor_proc.pid if st.supervisor_proc else None


# --- the run -----------------------------------------------------------------------------------------------
@dataclass
class Target:
    """One server under load: where to send, what, and whose CPU time to count."""

    name: str
    host: str
    port: int
    request: bytes
    check: bytes | None = None
    pid: int | None = None


def measure(targets: list[Target], clients: list[int], seconds: float, repeat: int) -> dict[str, dict[int, Load]]:
    """Median over `repeat` runs of each client count and target, after checking one answer of each. The
    targets take turns run by run, so that a change in what else the machine runs falls on all of them, and each
    round starts with the next one."""
    for t in targets:
        if t.check is not None:
            answer = urllib.request.urlopen(urllib.request.Request(
                f"http://{t.host}:{t.port}{t.request.split(b' ')[1].decode()}", data=t.check, method="POST",
                headers={"Content-Type": "application/json"}), timeout=60).read()
            json.loads(answer)
    out: dict[str, dict[int, Load]] = {t.name: {} for t in targets}
    for n in clients:
        runs: dict[str, list[Load]] = {t.name: [] for t in targets}
        for r in range(repeat):   # each round starts one target later: no target is always first after a pause
            for t in targets[r % len(targets):] + targets[:r % len(targets)]:
                runs[t.name].append(run_load(t.host, t.port, t.request, n, seconds, t.pid))
        for t in targets:
            done = runs[t.name]
            r = out[t.name][n] = Load(statistics.median(r.rps for r in done), statistics.median(r.p50_ms for r in done),
                                      statistics.median(r.p99_ms for r in done), sum(r.errors for r in done),
                                      statistics.median(r.cpu_ms for r in done))
            print(f"  {t.name:<24} {n:>3} clients: {r.rps:8.0f} req/s  p50 {r.p50_ms:7.2f} ms  p99 {r.p99_ms:7.2f} "
                  f"ms  server CPU {r.cpu_ms:6.3f} ms/req{f'  ERRORS {r.errors}' if r.errors else ''}", flush=True)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", default="1,16,64", help="concurrent client counts (default 1,16,64)")
    parser.add_argument("--seconds", type=float, default=3.0, help="length of one load run")
    parser.add_argument("--repeat", type=int, default=3, help="runs per figure; the median is reported")
    parser.add_argument("--mlflow-python", default=None,
                        help="python of an environment with mlflow (default: this one, if mlflow imports)")
    parser.add_argument("--no-mlflow", action="store_true", help="skip MLflow")
    parser.add_argument("--models", default="mlp,sklearn,digits")
    parser.add_argument("--triton-python", default=None,
                        help="python of an environment with nvidia-pytriton: Triton serves the digits MLP too")
    parser.add_argument("--ray-python", default=None,
                        help="python of an environment with ray[serve]: Ray Serve serves the digits MLP beside hopsml")
    parser.add_argument("--features", action="store_true",
                        help="also the cost of canary routing, the autoscaler, the v2 paths and inference logging "
                             "(digits, batched, at the most clients), and the time of a scale-out and a cold start")
    parser.add_argument("--hidden", default=",".join(map(str, HIDDEN)),
                        help="the MLP's hidden layer widths (default %(default)s): what batching can save grows "
                             "with the model's own cost per call")
    args = parser.parse_args(argv)
    clients = [int(c) for c in args.clients.split(",")]
    models = args.models.split(",")

    from hopsml import config
    from hopsml.model import registry
    from hopsml.serving.control import lifecycle

    work = tempfile.mkdtemp(prefix="hopsml-bench-serving-")
    settings = config.load(environ={}, root=os.path.join(work, "root"), project="bench")
    row = [round(float(v), 4) for v in np.random.default_rng(1).normal(size=FEATURES)]
    results: dict[tuple[str, str], dict[int, Load]] = {}
    started: list[str] = []
    print(f"load average before: {' '.join(f'{v:.2f}' for v in os.getloadavg())}, {os.cpu_count()} cores")
    try:
        hidden = tuple(int(w) for w in args.hidden.split(","))
        print(f"MLP {'-'.join(map(str, (FEATURES, *hidden, CLASSES)))}")
        paths = build_models(os.path.join(work, "models"), hidden)
        own = own_call_ms(paths, row)
        print(f"model's own call, one row: mlp {own['mlp']:.3f} ms, sklearn {own['sklearn']:.3f} ms; the MLP on "
              f"32 rows: {own['mlp per row of 32']:.3f} ms per row")
        body = json.dumps({"instances": [row]}).encode()
        ceiling = client_ceiling(post("/v1/models/x:predict", body), max(clients), args.seconds)
        print(f"client ceiling ({max(clients)} clients, a server that does no work): {ceiling.rps:.0f} req/s")
        peers: list[Any] = []
        if "digits" in models:
            peers = start_peers(args, paths["digits"], row, work)
        for model in models:
            registry.export(paths[model], model, settings=settings)
            targets = []
            for batching in (True, False):  # both run at once, loaded in turns
                serving = f"{model}{'Batched' if batching else 'Plain'}"
                lifecycle.create_or_update(serving, f"Models/{model}", "PYTHON", model_version=1,
                                           batching_enabled=batching, settings=settings)
                started.append(serving)
                s = lifecycle.start(serving, settings=settings)
                targets.append(Target(f"hopsml {serving}", s.internal_ips[0], s.internal_port,
                                      post(f"/v1/models/{serving}:predict", body), body, server_pid(settings, serving)))
            for server, peer_body in peers if model == "digits" else []:
                targets.append(Target(server.name, "127.0.0.1", server.port, post(server.path, peer_body), peer_body,
                                      server.proc.pid))
            print(f"hopsml {model}, batching on and off{' and the peers' if len(targets) > 2 else ''} in turns:",
                  flush=True)
            for t, loads in zip(targets, measure(targets, clients, args.seconds, args.repeat).values()):
                if not t.name.startswith("hopsml "):
                    results[(model, t.name)] = loads
                    continue
                serving = t.name.split()[1]
                results[(model, serving)] = loads
                lifecycle.stop(serving, settings=settings)
                started.remove(serving)
            if model == "digits":
                for server, _ in peers:
                    server.close()
                peers = []
        if args.features:
            from serving_features import feature_costs, scaling_times

            feature_costs(settings, paths["digits"], row, max(clients), args.seconds, args.repeat, results)
            scaling_times(settings, row)
        python = None if args.no_mlflow else mlflow_python(args.mlflow_python)
        if python is not None:
            saved = os.path.join(work, "mlflow")
            done = subprocess.run([python, "-c", MLFLOW_SAVE, paths["mlp"], paths["sklearn"], saved, str(FEATURES),
                                   paths["digits"]],
                                  capture_output=True, text=True)
            if done.returncode != 0:
                raise RuntimeError(f"saving the models with mlflow failed:\n{done.stderr[-3000:]}")
            mbody = json.dumps({"inputs": [row]}).encode()
            for model in models:
                server = mlflow_server(python, os.path.join(saved, model), os.path.join(work, f"mlflow-{model}.log"),
                                       mbody)
                try:
                    print(f"mlflow {model}:", flush=True)
                    results[(model, "mlflow")] = measure(
                        [Target(f"mlflow {model}", "127.0.0.1", server.port, post("/invocations", mbody), mbody,
                                server.proc.pid)], clients, args.seconds, args.repeat)[f"mlflow {model}"]
                finally:
                    server.close()
    finally:
        for server, _ in peers:
            server.close()
        for serving in started:
            lifecycle.stop(serving, settings=settings)
        shutil.rmtree(work, ignore_errors=True)
    print(f"load average after: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")
    report(results, own, clients, models)
    return 0


def start_peers(args: argparse.Namespace, model_path: str, row: list[float], work: str) -> list[Any]:
    """Triton and Ray Serve serving the digits MLP, where their environments are given: (server, body) pairs."""
    import serving_peers

    peers = []
    for given, modules, what, start in ((args.triton_python, "pytriton, sklearn", "Triton", serving_peers.triton),
                                        (args.ray_python, "ray.serve, sklearn", "Ray Serve", serving_peers.ray_serve)):
        python = serving_peers.peer_python(given, modules, what) if given else None
        if python is None:
            if not given:
                print(f"{what} skipped: give --{what.split()[0].lower()}-python")
            continue
        print(f"starting {what} ...", flush=True)
        peers.append(start(python, model_path, row, os.path.join(work, f"{what.split()[0].lower()}.log")))
    return peers


def report(results: dict[tuple[str, str], dict[int, Load]], own: dict[str, float], clients: list[int],
           models: list[str]) -> None:
    top = max(clients)
    print("\nratios (targets: >= 2x MLflow at 64 clients with p99 no worse; batching >= 3x plain for the MLP; "
          "1-client p50 within 2 ms of the model's own call)")
    for model in models:
        batched, plain = results.get((model, f"{model}Batched")), results.get((model, f"{model}Plain"))
        for peer in ("triton", "ray serve"):
            theirs = results.get((model, peer))
            if batched and theirs:
                print(f"  {model}: hopsml batched / {peer} (batching on both): " + ", ".join(
                    f"{n} clients {batched[n].rps / theirs[n].rps:.2f}x req/s, p99 {batched[n].p99_ms:.2f} vs "
                    f"{theirs[n].p99_ms:.2f} ms" for n in clients) + (" (target at 64: >= 1.5x, p99 no worse)"
                                                                       if peer == "triton" else ""))
        mlflow = results.get((model, "mlflow"))
        if batched and plain:
            print(f"  {model}: batched/plain at {top} clients {batched[top].rps / plain[top].rps:.2f}x")
            if model == "mlp":
                print(f"  mlp: the model alone, one-row call / per row of a 32-row call: "
                      f"{own['mlp'] / own['mlp per row of 32']:.2f}x")
            best = batched if batched[top].rps >= plain[top].rps else plain
            which = "batched" if best is batched else "plain"
            print(f"  {model}: server CPU per answer at {top} clients: batched {batched[top].cpu_ms:.3f} ms, plain "
                  f"{plain[top].cpu_ms:.3f} ms ({plain[top].cpu_ms / batched[top].cpu_ms:.2f}x)")
            if mlflow:
                print(f"  {model}: hopsml ({which}) / MLflow at {top} clients {best[top].rps / mlflow[top].rps:.2f}x "
                      f"throughput, p99 {best[top].p99_ms:.2f} vs {mlflow[top].p99_ms:.2f} ms, server CPU per answer "
                      f"{best[top].cpu_ms:.3f} vs {mlflow[top].cpu_ms:.3f} ms "
                      f"({mlflow[top].cpu_ms / best[top].cpu_ms:.2f}x less)")
            if 1 in clients:
                print(f"  {model}: 1-client p50 plain {plain[1].p50_ms:.2f} ms, batched {batched[1].p50_ms:.2f} ms, "
                      f"model's own call {own[model]:.3f} ms (gap {plain[1].p50_ms - own[model]:.2f} ms plain, "
                      f"{batched[1].p50_ms - own[model]:.2f} ms batched)")


if __name__ == "__main__":
    sys.exit(main())
