"""TF Serving's REST protocol over a real server (two instances of a scikit-learn model behind one port):
status, metadata, predictions by rows and by columns, and a JSON error with the right 4xx for each thing
a client can get wrong, after which the server still answers."""

from __future__ import annotations

import json
from http.client import HTTPConnection

import numpy as np
import pytest
from conftest import base_url, export_sklearn, http, iris, read_answers, running, settings_for

from hopsml.serving.control import lifecycle


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """One serving for the module: starting one costs seconds, and every test here only reads."""
    folder = tmp_path_factory.mktemp("protocol")
    settings = settings_for(folder / "root")
    fitted = export_sklearn(settings, folder / "model")
    lifecycle.create_or_update("iris", "Models/iris", "PYTHON", instances=2, max_body_bytes=64 * 1024,
                               settings=settings)
    with running(settings, "iris") as serving:
        yield serving, fitted, settings


def test_status_and_metadata_as_tf_serving_gives_them(served):
    serving, _, _ = served
    assert serving.available_instances == 2
    for url in (base_url(serving), base_url(serving) + "/versions/1"):
        status, body = http("GET", url)
        assert status == 200
        assert body == {"model_version_status": [{"version": "1", "state": "AVAILABLE",
                                                  "status": {"error_code": "OK", "error_message": ""}}]}
    status, body = http("GET", base_url(serving) + "/metadata")
    assert status == 200
    assert body["model_spec"] == {"name": "iris", "signature_name": "", "version": "1"}
    dims = body["metadata"]["signature_def"]["signature_def"]["serving_default"]["inputs"]["inputs"]
    assert [d["size"] for d in dims["tensor_shape"]["dim"]] == ["-1", "4"]


def test_rows_and_columns_give_the_model_own_predictions(served):
    serving, fitted, settings = served
    x, _ = iris()
    rows = x[::15]
    want = fitted.predict(rows).tolist()
    status, body = http("POST", base_url(serving) + ":predict", {"instances": rows.tolist()})
    assert (status, body) == (200, {"predictions": want})
    status, body = http("POST", base_url(serving) + "/versions/1:predict", {"inputs": rows.tolist()})
    assert (status, body) == (200, {"outputs": want})
    status, body = http("POST", base_url(serving) + ":predict", {"inputs": {"x": rows.tolist()}})
    assert (status, body) == (200, {"outputs": want})
    assert lifecycle.make_inference_request("iris", rows.tolist(), settings=settings) == \
        {"predictions": want}


@pytest.mark.parametrize("path, body, status, words", [
    (":predict", b"{\"instances\": [[1, 2, 3, 4]", 400, "not valid JSON"),
    (":predict", b"[[1, 2, 3, 4]]", 400, "JSON list"),
    (":predict", {"rows": [[1, 2, 3, 4]]}, 400, "exactly one of"),
    (":predict", {"instances": [[1, 2, 3, 4]], "inputs": [[1, 2, 3, 4]]}, 400, "both"),
    (":predict", {"instances": [[1, 2, 3]]}, 400, "shape 4"),
    (":predict", {"instances": [[1, 2, 3, 4], [1, 2]]}, 400, "equal length"),
    (":predict", {"instances": [["a", "b", "c", "d"]]}, 400, "float64"),
    (":predict", {"instances": {"a": 1}}, 400, "list of rows"),
    (":predict", {"instances": 5}, 400, "list of rows"),
    (":classify", {"instances": [[1, 2, 3, 4]]}, 400, ":predict"),
    ("/versions/2:predict", {"instances": [[1, 2, 3, 4]]}, 404, "no version '2'"),
    ("/versions/x", None, 404, "no version 'x'"),
    ("/nothing", None, 404, "no such path"),
])
def test_client_faults_get_a_4xx_naming_the_problem_and_the_server_stays_up(served, path, body, status, words):
    serving, fitted, _ = served
    got_status, got = http("POST" if body is not None else "GET", base_url(serving) + path, body)
    assert got_status == status
    assert words in got["error"]
    ok, answer = http("POST", base_url(serving) + ":predict", {"instances": [[5.1, 3.5, 1.4, 0.2]]})
    assert (ok, answer) == (200, {"predictions": fitted.predict(np.array([[5.1, 3.5, 1.4, 0.2]])).tolist()})


def test_unknown_model_wrong_method_and_an_oversized_body(served):
    serving, _, _ = served
    root = base_url(serving).rsplit("/", 1)[0]
    status, body = http("POST", root + "/mnist:predict", {"instances": [[1, 2, 3, 4]]})
    assert status == 404 and "no model 'mnist'" in body["error"]
    status, body = http("GET", base_url(serving) + ":predict")
    assert status == 405 and "POST" in body["error"]
    status, body = http("DELETE", base_url(serving))
    assert status == 405
    big = json.dumps({"instances": [[1.0, 2.0, 3.0, 4.0]] * 5000}).encode()
    assert len(big) > 64 * 1024
    status, body = http("POST", base_url(serving) + ":predict", big)
    assert status == 413 and "limit of 65536" in body["error"]
    # a body sent in chunks without a length is counted as it arrives
    conn = HTTPConnection(serving.internal_ips[0], int(serving.internal_port), timeout=60)
    try:
        conn.request("POST", f"/v1/models/{serving.name}:predict", body=iter([big[:40000], big[40000:]]),
                     encode_chunked=True, headers={"Content-Type": "application/json"})
        response = conn.getresponse()
        assert response.status == 413
        assert "limit" in json.loads(response.read())["error"]
    finally:
        conn.close()
    status, body = http("POST", base_url(serving) + ":predict", {"instances": [[5.1, 3.5, 1.4, 0.2]]})
    assert status == 200


def test_json_as_python_writes_it_is_read_and_answers_are_json_every_parser_reads():
    from hopsml.serving.instance.protocol import _dumps, _loads

    got = _loads(json.dumps({"instances": [[float("nan"), float("inf"), 1.5]]}).encode())   # NaN, Infinity
    assert np.isnan(got["instances"][0][0]) and got["instances"][0][1:] == [float("inf"), 1.5]
    with pytest.raises(ValueError, match="Expecting"):   # the json module's message, which says where
        _loads(b'{"instances": [[1, 2]')
    answer = {"predictions": [float("nan"), np.float32(0.5), np.arange(2)], 3: "int key"}
    assert json.loads(_dumps(answer)) == {"predictions": [None, 0.5, [0, 1]], "3": "int key"}
    # what orjson refuses is written by the json module
    assert json.loads(_dumps({"big": 2 ** 70, "p": np.float32(0.5)})) == {"big": 2 ** 70, "p": 0.5}
    with pytest.raises(TypeError, match="holds .object."):
        _dumps({"big": 2 ** 70, "p": object()})


def test_pipelined_requests_a_100_continue_and_a_head_are_each_answered_whole(served):
    """Each answer goes out in one write (head and body together): a pipelined client still gets every
    answer in order, the interim 100 Continue comes before the body is sent, and a bodiless answer is not
    held back."""
    import socket

    serving, fitted, _ = served
    row = [5.1, 3.5, 1.4, 0.2]
    body = json.dumps({"instances": [row]}).encode()
    path = f"/v1/models/{serving.name}"
    predict = (f"POST {path}:predict HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
               f"Content-Length: {len(body)}\r\n\r\n").encode() + body
    with socket.create_connection((serving.internal_ips[0], int(serving.internal_port)), timeout=30) as sock:
        sock.sendall(predict + f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode() + predict)
        answers = [(status, body) for status, _, body in read_answers(sock, 3)]
        assert [status for status, _ in answers] == ["HTTP/1.1 200 OK"] * 3
        expected = {"predictions": fitted.predict(np.array([row])).tolist()}
        assert json.loads(answers[0][1]) == json.loads(answers[2][1]) == expected
        assert json.loads(answers[1][1])["model_version_status"][0]["state"] == "AVAILABLE"

        sock.sendall(predict.replace(b"\r\n\r\n", b"\r\nExpect: 100-continue\r\n\r\n", 1)[:-len(body)])
        assert sock.recv(65536) == b"HTTP/1.1 100 Continue\r\n\r\n"   # not held: the body is not sent yet
        sock.sendall(body)
        ((status, _, answer),) = read_answers(sock, 1)
        assert status == "HTTP/1.1 200 OK" and json.loads(answer) == expected

        sock.sendall(f"HEAD {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        head = sock.recv(65536)
        assert head.startswith(b"HTTP/1.1 405 ") and head.endswith(b"\r\n\r\n")   # a head alone, not held


def test_an_answer_that_is_not_json_gets_a_500_naming_it_and_the_app_goes_on():
    import asyncio

    from hopsml.serving.instance.http_server import Request
    from hopsml.serving.instance.loaders import Servable
    from hopsml.serving.instance.protocol import ModelApp

    class Odd(Servable):   # a predictor whose answer json cannot write, unless the row says otherwise
        def call(self, prepared):
            return [object() if row == [0] else row[0] for row in prepared]

    app = ModelApp("odd", 1, Odd())
    status, body = asyncio.run(app.handle(Request("POST", "/v1/models/odd:predict", b'{"instances": [[0]]}')))
    assert status == 500 and "cannot be written as JSON" in json.loads(body)["error"]
    status, body = asyncio.run(app.handle(Request("POST", "/v1/models/odd:predict", b'{"instances": [[7]]}')))
    assert (status, json.loads(body)) == (200, {"predictions": [7]})
