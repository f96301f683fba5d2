"""A client must not fill the disk through a serving: rejected requests keep a bounded prefix in the inference log,
the log folder is held under its size bound (the oldest files dropped and counted), the serving's own log is
rotated and a repeated failure's traceback is written once; both logs are the user's alone (0600/0700). NaN the
model refuses and JSON nested too deep are the client's errors (400), not the server's."""

from __future__ import annotations

import base64
import json
import os
import socket
import stat
import textwrap
import time

from conftest import base_url, export_sklearn, http, running

from hopsml import config
from hopsml.serving import InferenceLog
from hopsml.serving.control import lifecycle
from hopsml.serving.instance import inference_log


def post_raw(sock: socket.socket, path: str, body: bytes) -> int:
    """POST `body` on a kept-alive connection; the answer's status."""
    sock.sendall(b"POST %s HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % (path.encode(), len(body)) + body)
    data = b""
    while b"\r\n\r\n" not in data:
        data += sock.recv(65536)
    head, rest = data.split(b"\r\n\r\n", 1)
    length = int(next(line for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")).split(
        b":")[1])
    while len(rest) < length:
        rest += sock.recv(65536)
    return int(head.split()[1])


def folder_bytes(folder: str) -> int:
    return sum(os.path.getsize(os.path.join(folder, n)) for n in os.listdir(folder))


def mode(path: str) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_a_flood_of_rejected_requests_keeps_the_inference_log_under_its_bound(tmp_path):
    bound = 400_000
    settings = config.load(environ={}, root=str(tmp_path / "root"), project="test", inference_log_max_bytes=bound)
    export_sklearn(settings, tmp_path / "model")
    lifecycle.create_or_update("flood", "Models/iris", "PYTHON",
                               inference_log=InferenceLog(roll_seconds=1, roll_bytes=100_000), settings=settings)
    junk = base64.b64encode(os.urandom(750_000))   # 1 MB that does not compress
    rows = json.dumps({"instances": [[float(i % 7), 3.5, 1.4, 0.2] for i in range(2000)]}).encode()   # 60 KB
    with running(settings, "flood") as serving:
        path = f"/v1/models/{serving.name}:predict"
        with socket.create_connection((serving.internal_ips[0], int(serving.internal_port)), timeout=60) as sock:
            statuses = [post_raw(sock, path, junk) for _ in range(40)]          # 40 MB sent, all refused
            statuses += [post_raw(sock, path, rows) for _ in range(60)]         # and accepted ones, to roll files
    assert statuses == [400] * 40 + [200] * 60
    folder = lifecycle.get_inference_log("flood", settings)
    assert folder is not None
    logged = sum(os.path.getsize(f) for f in inference_log.files(folder))
    assert logged <= bound, f"the inference log holds {logged} bytes, over its bound of {bound}"
    assert folder_bytes(folder) < bound + 20_000   # its counters and batch files are small
    table = inference_log.read(folder).to_pylist()
    rejected = [r for r in table if r["status"] == 400]
    assert all(r["request_bytes"] == len(junk) and len(r["request"]) <= 1024 and r["truncated"] for r in rejected)
    expired = inference_log.expired_counts(folder)
    assert expired["files"] > 0 and expired["bytes"] > 0
    assert len(table) + expired["records"] == 100   # every record is either kept or counted as dropped
    assert mode(folder) == 0o700 and all(mode(f) == 0o600 for f in inference_log.files(folder))


PREDICTOR = '''
import sys


class Predict:
    def predict(self, inputs):
        if inputs and inputs[0] and inputs[0][0] == 666:
            print("x" * 1000, file=sys.stderr, flush=True)   # a chatty model: its output goes to the log
            return [0 for _ in inputs]
        raise ValueError("this model refuses every request")
'''


def test_the_servings_own_log_is_rotated_and_a_repeated_failure_is_written_once(tmp_path):
    settings = config.load(environ={}, root=str(tmp_path / "root"), project="test", serving_log_max_bytes=50_000,
                           serving_log_backups=2)
    export_sklearn(settings, tmp_path / "model")
    resources = tmp_path / "root" / "Projects/test/Resources"
    resources.mkdir(parents=True)
    (resources / "predict.py").write_text(textwrap.dedent(PREDICTOR))
    lifecycle.create_or_update("chatty", "Models/iris", "PYTHON", predictor="Resources/predict.py",
                               inference_logging=None, settings=settings)
    log = lifecycle.log_path(settings, "test", "chatty")
    with running(settings, "chatty") as serving:
        path = f"/v1/models/{serving.name}:predict"
        before = os.path.getsize(log)
        with socket.create_connection((serving.internal_ips[0], int(serving.internal_port)), timeout=60) as sock:
            assert {post_raw(sock, path, b'{"instances": [[1, 2, 3, 4]]}') for _ in range(500)} == {500}
            grown = os.path.getsize(log) - before
            assert grown < 20_000, f"500 failing requests wrote {grown} bytes to the log"
            with open(log, encoding="utf-8", errors="replace") as text:
                assert text.read().count("ValueError: this model refuses every request") == 1   # one traceback
            for _ in range(10):   # 100 KB of the model's own output, more than twice the log's bound
                for _ in range(10):
                    assert post_raw(sock, path, b'{"instances": [[666, 2, 3, 4]]}') == 200
                time.sleep(0.2)
        time.sleep(1.5)   # the server checks the log's size twice a second
        assert os.path.getsize(log) <= 50_000 + 5_000
        assert os.path.exists(log + ".1") and not os.path.exists(log + ".3")
        assert os.path.getsize(log + ".1") > 40_000
        assert mode(log) == 0o600 and mode(log + ".1") == 0o600 and mode(os.path.dirname(log)) == 0o700


def test_nan_the_model_refuses_and_too_deep_json_are_the_clients_errors(settings, tmp_path):
    export_sklearn(settings, tmp_path / "model")
    lifecycle.create_or_update("iris", "Models/iris", "PYTHON", settings=settings)
    with running(settings, "iris") as serving:
        status, body = http("POST", base_url(serving) + ":predict", b'{"instances": [[NaN, 1, Infinity, 2]]}')
        assert status == 400 and "NaN or Infinity" in body["error"], body
        deep = b'{"instances": ' + b"[" * 3000 + b"]" * 3000 + b"}"
        status, body = http("POST", base_url(serving) + ":predict", deep)
        assert status == 400 and "nested deeper" in body["error"], body
        status, body = http("POST", base_url(serving) + ":predict", {"instances": [[5.1, 3.5, 1.4, 0.2]]})
        assert status == 200
