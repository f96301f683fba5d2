"""Servings under test: each test (or test module, for the protocol tests) gets its own project root,
real models exported through hopsml.model.export, and a check that what it started is gone afterwards:
no process it recorded and no listening port."""

from __future__ import annotations

import json
import socket
import urllib.error
import urllib.request
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
from own_processes import processes_of_this_test

from hopsml import config
from hopsml.fs import Storage
from hopsml.model import registry
from hopsml.serving.control import lifecycle
from hopsml.serving.server import state as states


def settings_for(root: Path) -> config.Settings:
    """Settings for a project root of the test's own, whatever the environment says."""
    return config.load(environ={}, root=str(root), project="test")


@pytest.fixture
def settings(root) -> config.Settings:
    """The test's own root (HOPSML_ROOT is set too, for the hops-style functions without settings)."""
    return settings_for(root)


def iris() -> tuple[np.ndarray, np.ndarray]:
    from sklearn.datasets import load_iris

    x, y = load_iris(return_X_y=True)
    return x, y


def export_sklearn(settings: config.Settings, folder: Path, name: str = "iris"):
    """A logistic regression on iris, saved with joblib and exported; returns the fitted model."""
    import joblib
    from sklearn.linear_model import LogisticRegression

    x, y = iris()
    fitted = LogisticRegression(max_iter=500).fit(x, y)
    folder.mkdir(parents=True, exist_ok=True)
    joblib.dump(fitted, folder / "model.joblib")
    registry.export(str(folder / "model.joblib"), name, settings=settings)
    return fitted


def torch_mlp():
    import torch

    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3)).eval()


def export_torch(settings: config.Settings, folder: Path, name: str, scripted: bool):
    """A small MLP as TorchScript (`torch.jit.save`) or as a pickled module (`torch.save`); returns it."""
    import torch

    net = torch_mlp()
    folder.mkdir(parents=True, exist_ok=True)
    if scripted:
        torch.jit.save(torch.jit.script(net), str(folder / "model.pt"))
        path = folder / "model.pt"
    else:
        torch.save(net, str(folder / "model.pth"))
        path = folder / "model.pth"
    registry.export(str(path), name, settings=settings)
    return net


def port_free(host: str, port: int) -> bool:
    """Whether nothing listens on host:port (a closed server's TIME_WAIT connections do not count)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError:
            return False
    return True


def recorded(settings: config.Settings, name: str) -> tuple[list, int, str]:
    """The processes, port and host the serving's state records now."""
    st = states.read(Storage(settings.root), settings.project, name)
    procs = st.instance_procs() + ([st.supervisor_proc] if st.supervisor_proc else [])
    return procs, st.port, st.host


def assert_nothing_left(procs: list, port: int, host: str = "127.0.0.1", before: set[int] | None = None) -> None:
    alive = [p.pid for p in procs if p.alive()]
    assert not alive, f"processes of the serving still run: {alive}"
    assert port_free(host, port), f"something still listens on {host}:{port}"
    if before is not None:
        left = processes_of_this_test() - before
        assert not left, f"processes started by the test are left: {[_describe(pid) for pid in sorted(left)]}"


def _describe(pid: int) -> str:
    try:
        return f"{pid}: " + Path(f"/proc/{pid}/stat").read_text()[:80]
    except OSError:
        return f"{pid}: gone"


@contextmanager
def running(settings: config.Settings, name: str):
    """Start serving `name`, yield it, and stop it; then nothing it ran may be left."""
    before = processes_of_this_test()
    serving = lifecycle.start(name, settings=settings)
    seen: list = []
    try:
        seen += recorded(settings, name)[0]
        yield serving
    finally:
        seen += recorded(settings, name)[0]  # instances restarted meanwhile too
        lifecycle.stop(name, settings=settings)
        assert lifecycle.get_status(name, settings) == "Stopped"
        assert_nothing_left(seen, serving.port, before=before)


def http(method: str, url: str, body: object | bytes | None = None) -> tuple[int, object]:
    """(status, decoded JSON answer) of one real HTTP request."""
    data = body if isinstance(body, bytes) or body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def base_url(serving: lifecycle.Serving) -> str:
    return f"http://{serving.internal_ips[0]}:{serving.internal_port}/v1/models/{serving.name}"


def read_answers(sock: socket.socket, count: int) -> list[tuple[str, dict[str, str], bytes]]:
    """`count` answers: status line, headers (lower-case names) and body, by content-length."""
    data, answers = b"", []
    while len(answers) < count:
        end = data.find(b"\r\n\r\n")
        if end >= 0:
            status, *lines = data[:end].decode().split("\r\n")
            headers = {k.strip().lower(): v.strip() for k, v in (line.split(":", 1) for line in lines)}
            length = int(headers["content-length"])
            if len(data) >= end + 4 + length:
                answers.append((status, headers, data[end + 4:end + 4 + length]))
                data = data[end + 4 + length:]
                continue
        chunk = sock.recv(65536)
        assert chunk, f"closed after {len(answers)} of {count} answers"
        data += chunk
    return answers
