"""KServe v2 (the Open Inference Protocol) over a real server: health, model metadata and readiness, and
infer with flat or nested data, with and without batching; bad tensors get a 4xx naming the problem."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import export_sklearn, export_torch, http, iris, running

from hopsml.serving import Batching
from hopsml.serving.control import lifecycle


def v2_url(serving: lifecycle.Serving, rest: str = "") -> str:
    return f"http://{serving.internal_ips[0]}:{serving.internal_port}/v2{rest}"


@pytest.fixture(scope="module")
def iris_rows() -> np.ndarray:
    return iris()[0][[0, 60, 120]]


def test_v2_health_metadata_and_infer_answer_as_the_model(settings, tmp_path, iris_rows):
    fitted = export_sklearn(settings, tmp_path / "model")
    lifecycle.create_or_update("iris", "Models/iris", "PYTHON", settings=settings)
    with running(settings, "iris") as serving:
        assert http("GET", v2_url(serving, "/health/live")) == (200, {"live": True})
        assert http("GET", v2_url(serving, "/health/ready")) == (200, {"ready": True})
        status, body = http("GET", v2_url(serving))
        assert status == 200 and body["name"] == "hopsml"
        status, meta = http("GET", v2_url(serving, "/models/iris"))
        assert status == 200 and meta["name"] == "iris" and meta["versions"] == ["1"]
        assert meta["platform"] == "sklearn" and meta["inputs"][0]["shape"] == [-1, 4]
        assert meta["inputs"][0]["datatype"] == "FP64"
        assert http("GET", v2_url(serving, "/models/iris/versions/1/ready")) == (200, {"name": "iris", "ready": True})

        want = fitted.predict(iris_rows).tolist()
        flat = {"id": "r1", "inputs": [{"name": "input-0", "shape": [3, 4], "datatype": "FP64",
                                        "data": iris_rows.ravel().tolist()}]}
        status, body = http("POST", v2_url(serving, "/models/iris/infer"), flat)
        assert status == 200, body
        assert body["model_name"] == "iris" and body["model_version"] == "1" and body["id"] == "r1"
        assert body["outputs"] == [{"name": "output-0", "shape": [3], "datatype": "INT64", "data": want}]
        nested = {"inputs": [{"name": "x", "shape": [3, 4], "datatype": "FP32", "data": iris_rows.tolist()}]}
        status, body = http("POST", v2_url(serving, "/models/iris/versions/1/infer"), nested)
        assert status == 200 and body["outputs"][0]["data"] == want

        bad = [({"inputs": [{"name": "x", "shape": [2, 4], "datatype": "FP32", "data": [1.0] * 7}]}, 400,
                "7 values, but shape [2, 4] holds 8"),
               ({"inputs": [{"name": "x", "shape": [1, 4], "datatype": "FLOAT", "data": [1.0] * 4}]}, 400,
                "datatype 'FLOAT'"),
               ({"inputs": [{"name": "x", "shape": [1, 2], "datatype": "FP32", "data": [1.0, 2.0]}]}, 400,
                "shape 4"),
               ({"instances": [[1.0, 2.0, 3.0, 4.0]]}, 400, "\"inputs\" must be a list of tensors")]
        for request, code, words in bad:
            status, body = http("POST", v2_url(serving, "/models/iris/infer"), request)
            assert status == code and words in body["error"], body
        status, body = http("POST", v2_url(serving, "/models/iris/infer"), b"{not json")
        assert status == 400 and "not valid JSON" in body["error"]
        status, body = http("POST", v2_url(serving, "/models/other/infer"), flat)
        assert status == 404 and "no model 'other'" in body["error"]
        status, body = http("POST", v2_url(serving, "/models/iris/versions/2/infer"), flat)
        assert status == 404 and "no version '2'" in body["error"]
        status, body = http("GET", v2_url(serving, "/models/iris/infer"))
        assert status == 405
        status, body = http("POST", v2_url(serving, "/models/iris/infer"), flat)
        assert status == 200  # the server is still up after the bad requests


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_v2_infer_with_batching_keeps_each_requests_rows(settings, tmp_path):
    from concurrent.futures import ThreadPoolExecutor

    torch = pytest.importorskip("torch")
    net = export_torch(settings, tmp_path / "model", "mlp", scripted=False)
    lifecycle.create_or_update("mlp", "Models/mlp", "PYTHON", batching_enabled=True,
                               batching=Batching(max_batch_size=16, batch_timeout_micros=20_000), settings=settings)
    rows = np.random.default_rng(0).normal(size=(12, 4)).astype("float32")
    with torch.no_grad():
        want = net(torch.from_numpy(rows)).numpy()
    with running(settings, "mlp") as serving:
        url = v2_url(serving, "/models/mlp/infer")

        def infer(i: int) -> tuple[int, object]:
            return http("POST", url, {"inputs": [{"name": "x", "shape": [2, 4], "datatype": "FP32",
                                                  "data": rows[2 * i:2 * i + 2].ravel().tolist()}]})

        with ThreadPoolExecutor(6) as pool:
            answers = list(pool.map(infer, range(6)))
        for i, (status, body) in enumerate(answers):
            assert status == 200, body
            out = body["outputs"][0]
            assert out["shape"] == [2, 3] and out["datatype"] == "FP32"
            np.testing.assert_allclose(np.array(out["data"]).reshape(2, 3), want[2 * i:2 * i + 2], rtol=1e-5,
                                       atol=1e-6)


@pytest.mark.parametrize("batching", [False, True])
def test_tritons_own_http_client_gets_the_models_answers_in_binary_and_json(settings, tmp_path, batching):
    """tritonclient sends its inputs as binary tensor data by default (a JSON head, then raw bytes, the length of
    the head in Inference-Header-Content-Length), which was answered 400 ('the body is not valid JSON'); binary
    and JSON inputs and outputs now give the model's answers, with and without batching."""
    httpclient = pytest.importorskip("tritonclient.http")
    fitted = export_sklearn(settings, tmp_path / "model")
    lifecycle.create_or_update("iris", "Models/iris", "PYTHON", batching_enabled=batching, settings=settings)
    x = iris()[0][::7]
    want = fitted.predict(x)
    with running(settings, "iris") as serving:
        client = httpclient.InferenceServerClient(f"{serving.internal_ips[0]}:{serving.internal_port}")
        assert client.is_server_live() and client.is_model_ready("iris")
        for binary_in, binary_out in ((True, True), (True, False), (False, True), (False, False)):
            tensor = httpclient.InferInput("input-0", list(x.shape), "FP64")
            tensor.set_data_from_numpy(x, binary_data=binary_in)
            result = client.infer("iris", [tensor], outputs=[
                httpclient.InferRequestedOutput("output-0", binary_data=binary_out)])
            np.testing.assert_array_equal(result.as_numpy("output-0"), want)
        tensor = httpclient.InferInput("input-0", list(x.shape), "FP32")
        tensor.set_data_from_numpy(x.astype(np.float32))
        np.testing.assert_array_equal(client.infer("iris", [tensor]).as_numpy("output-0"), want)   # all outputs
        with pytest.raises(Exception, match="not one of this model's outputs"):
            client.infer("iris", [tensor], outputs=[httpclient.InferRequestedOutput("probabilities")])
        client.close()


def test_malformed_binary_requests_get_a_400_naming_the_problem(settings, tmp_path):
    import json
    import urllib.error
    import urllib.request

    export_sklearn(settings, tmp_path / "model")
    lifecycle.create_or_update("iris", "Models/iris", "PYTHON", settings=settings)
    head = json.dumps({"inputs": [{"name": "x", "shape": [1, 4], "datatype": "FP32",
                                   "parameters": {"binary_data_size": 16}}]}).encode()
    cases = [(head + b"\0" * 8, len(head), "binary_data_size 16 does not fit the 8 bytes"),
             (head + b"\0" * 20, len(head), "4 bytes after the JSON head belong to no input"),
             (head + b"\0" * 16, len(head) + 99, "Inference-Header-Content-Length header must be")]
    with running(settings, "iris") as serving:
        for body, length, words in cases:
            request = urllib.request.Request(v2_url(serving, "/models/iris/infer"), body, method="POST",
                                             headers={"Inference-Header-Content-Length": str(length)})
            with pytest.raises(urllib.error.HTTPError) as refused:
                urllib.request.urlopen(request, timeout=60)
            assert refused.value.code == 400 and words in json.loads(refused.value.read())["error"]
