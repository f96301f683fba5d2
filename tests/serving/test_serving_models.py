"""Each kind of model a serving loads, over a real server: PyTorch as TorchScript and as a pickled module,
Keras and a TensorFlow SavedModel, hops-style predictor and transformer scripts; a model that raises gets a
500 and the server goes on; with batching, requests that queue together become one model call, and a lone
request is called at once."""

from __future__ import annotations

import textwrap

import numpy as np
import pytest
from conftest import base_url, export_sklearn, export_torch, http, running

from hopsml.model import registry
from hopsml.serving import Batching
from hopsml.serving.control import lifecycle


@pytest.mark.filterwarnings("ignore:`torch.jit:DeprecationWarning")
@pytest.mark.parametrize("scripted", [True, False], ids=["torchscript", "pickled-module"])
def test_pytorch_models_answer_as_the_model_itself(settings, tmp_path, scripted):
    torch = pytest.importorskip("torch")

    net = export_torch(settings, tmp_path / "model", "mlp", scripted)
    lifecycle.create_or_update("mlp", "Models/mlp/1", "PYTHON", settings=settings)
    rows = np.random.default_rng(0).normal(size=(5, 4)).astype("float32")
    with torch.no_grad():
        want = net(torch.from_numpy(rows)).numpy()
    with running(settings, "mlp") as serving:
        status, body = http("POST", base_url(serving) + ":predict", {"instances": rows.tolist()})
        assert status == 200
        np.testing.assert_allclose(np.array(body["predictions"]), want, rtol=1e-5, atol=1e-6)
        status, body = http("POST", base_url(serving) + ":predict", {"instances": [[1.0, 2.0]]})
        assert status == 400 and "shape 4" in body["error"]
        status, body = http("GET", base_url(serving) + "/metadata")
        signature = body["metadata"]["signature_def"]["signature_def"]["serving_default"]
        assert signature["kind"] == "pytorch"


PREDICTOR = '''
import os
import joblib


class Predict:
    def __init__(self):
        self.model = joblib.load(os.path.join(os.environ["MODEL_FILES_PATH"], "model.joblib"))

    def predict(self, inputs):
        if inputs and inputs[0] == "boom":
            raise ValueError("the predictor was asked to fail")
        return self.model.predict(inputs).tolist()
'''

TRANSFORMER = '''
class Transformer:
    def preprocess(self, inputs):
        inputs["instances"] = [[v / 10.0 for v in row] if isinstance(row, list) else row
                               for row in inputs["instances"]]
        return inputs

    def postprocess(self, outputs):
        outputs["transformed"] = True
        return outputs
'''


def test_predictor_and_transformer_scripts_and_a_raising_model(settings, tmp_path):
    fitted = export_sklearn(settings, tmp_path / "model")
    resources = settings.root + "/Projects/test/Resources"
    import os

    os.makedirs(resources, exist_ok=True)
    with open(os.path.join(resources, "predictor.py"), "w") as out:
        out.write(textwrap.dedent(PREDICTOR))
    with open(os.path.join(resources, "transformer.py"), "w") as out:
        out.write(textwrap.dedent(TRANSFORMER))
    made = lifecycle.create_or_update("iris", "Models/iris", "PYTHON", predictor="Resources/predictor.py",
                                      transformer="/Projects/test/Resources/transformer.py", settings=settings)
    assert made.serving_tool == "KSERVE"  # a transformer turns KServe on, as in hops
    rows = [[51.0, 35.0, 14.0, 2.0], [67.0, 30.0, 52.0, 23.0]]
    want = fitted.predict(np.array(rows) / 10.0).tolist()
    with running(settings, "iris") as serving:
        assert lifecycle.get("iris", settings).available_transformer_instances == 1
        status, body = http("POST", base_url(serving) + ":predict", {"instances": rows})
        assert (status, body) == (200, {"predictions": want, "transformed": True})
        status, body = http("POST", base_url(serving) + ":predict", {"instances": ["boom"]})
        assert status == 500
        assert "ValueError: the predictor was asked to fail" in body["error"]
        status, body = http("POST", base_url(serving) + ":predict", {"instances": rows})
        assert (status, body) == (200, {"predictions": want, "transformed": True})
        with open(serving.log) as log:
            assert "the predictor was asked to fail" in log.read()  # with its traceback, in the serving's log


def test_a_script_that_does_not_exist_is_refused_when_the_serving_is_defined(settings, tmp_path):
    export_sklearn(settings, tmp_path / "model")
    with pytest.raises(lifecycle.ServingError, match="predict.py.*does not exist"):
        lifecycle.create_or_update("iris", "Models/iris", "PYTHON", predictor="predict.py", settings=settings)
    assert registry.get_model("iris", 1, settings=settings).version == 1


GATED_PREDICTOR = '''
import os
import time

GATE = {gate!r}


class Predict:
    def predict(self, inputs):
        if inputs[0][0] == -1:  # holds the model until the test opens the gate
            open(GATE + ".entered", "w").close()
            deadline = time.monotonic() + 120
            while not os.path.exists(GATE) and time.monotonic() < deadline:
                time.sleep(0.01)
        return [[row[0], len(inputs)] for row in inputs]  # each row learns the size of its model call
'''


def test_a_lone_request_goes_at_once_and_requests_that_queue_together_become_one_model_call(settings, tmp_path):
    import json
    import os
    import time
    from concurrent.futures import ThreadPoolExecutor
    from http.client import HTTPConnection

    export_sklearn(settings, tmp_path / "model")
    resources = tmp_path / "root" / "Projects" / "test" / "Resources"
    resources.mkdir(parents=True, exist_ok=True)
    gate = str(tmp_path / "gate")
    (resources / "batch.py").write_text(GATED_PREDICTOR.format(gate=gate))
    # a batch that does not fill waits far longer than any test does
    lifecycle.create_or_update("batched", "Models/iris", "PYTHON", predictor="Resources/batch.py",
                               batching_enabled=True,
                               batching=Batching(max_batch_size=8, batch_timeout_micros=600_000_000),
                               settings=settings)
    payloads = [[[1]], [[2]], [[3]], [[4]], [[5], [6]], [[7], [8]]]  # 8 rows from 6 clients
    with running(settings, "batched") as serving:
        url = base_url(serving) + ":predict"
        # one client: each request finds the model idle and nobody queued with it, so it is called at once
        for i in range(3):
            assert http("POST", url, {"instances": [[i]]}) == (200, {"predictions": [[i, 1]]})

        # six clients connect (keep-alive, as a client with a session does); a request holds the model; the six
        # send theirs meanwhile, wait for the model together and become one call
        clients = [HTTPConnection(serving.internal_ips[0], serving.internal_port, timeout=120) for _ in payloads]
        for client in clients:
            client.connect()
        with ThreadPoolExecutor(1) as pool:
            held = pool.submit(http, "POST", url, {"instances": [[-1]]})
            deadline = time.monotonic() + 120
            while not os.path.exists(gate + ".entered") and time.monotonic() < deadline and not held.done():
                time.sleep(0.01)
            assert os.path.exists(gate + ".entered"), held.result() if held.done() else "the model was not called"
            for rows, client in zip(payloads, clients):
                client.request("POST", "/v1/models/batched:predict", json.dumps({"instances": rows}),
                               {"Content-Type": "application/json"})
            open(gate, "w").close()
            assert held.result() == (200, {"predictions": [[-1, 1]]})
        for rows, client in zip(payloads, clients):
            answer = client.getresponse()
            assert answer.status == 200
            assert json.loads(answer.read()) == {"predictions": [[row[0], 8] for row in rows]}
            client.close()

        big = [[i] for i in range(10)]  # more than a batch holds: called alone, at once
        assert http("POST", url, {"instances": big}) == (200, {"predictions": [[i, 10] for i in range(10)]})
        status, body = http("POST", url, {"instances": 5})
        assert status == 400 and "list of rows" in body["error"]


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:__array__ implementation:DeprecationWarning")
@pytest.mark.parametrize("form", ["keras", "savedmodel"])
def test_tensorflow_models_answer_as_the_model_itself(settings, tmp_path, form):
    tf = pytest.importorskip("tensorflow")
    keras = tf.keras
    keras.utils.set_random_seed(0)
    net = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8, activation="relu"), keras.layers.Dense(3)])
    if form == "keras":
        net.save(str(tmp_path / "model.keras"))
        registry.export(str(tmp_path / "model.keras"), "dense", settings=settings)
    else:
        net.export(str(tmp_path / "saved"), verbose=False)
        registry.export(str(tmp_path / "saved"), "dense", settings=settings)
    lifecycle.create_or_update("dense", "Models/dense", "TENSORFLOW_SERVING", settings=settings)
    rows = np.random.default_rng(0).normal(size=(5, 4)).astype("float32")
    want = net(rows, training=False).numpy()
    with running(settings, "dense") as serving:
        status, body = http("POST", base_url(serving) + ":predict", {"instances": rows.tolist()})
        assert status == 200
        np.testing.assert_allclose(np.array(body["predictions"]), want, rtol=1e-5, atol=1e-6)
        status, body = http("POST", base_url(serving) + ":predict", {"inputs": [[1.0, 2.0, 3.0]]})
        assert status == 400 and "shape 4" in body["error"]


def test_an_onnx_model_is_served_by_onnxruntime_as_the_model_answers(settings, tmp_path):
    """A scikit-learn pipeline converted with skl2onnx (the way ONNX models usually reach a registry) and exported
    as model.onnx: the serving runs it with onnxruntime, and its answers are the pipeline's own."""
    pytest.importorskip("onnxruntime")
    skl2onnx = pytest.importorskip("skl2onnx")
    from skl2onnx.common.data_types import FloatTensorType
    from sklearn.datasets import load_iris
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    x, y = load_iris(return_X_y=True)
    pipeline = make_pipeline(StandardScaler(), LogisticRegression(max_iter=500)).fit(x, y)
    onnx = skl2onnx.convert_sklearn(pipeline, initial_types=[("input", FloatTensorType([None, 4]))],
                                    options={id(pipeline[-1]): {"zipmap": False}})
    (tmp_path / "model.onnx").write_bytes(onnx.SerializeToString())
    registry.export(str(tmp_path / "model.onnx"), "onnxiris", settings=settings)
    lifecycle.create_or_update("onnxiris", "Models/onnxiris", "PYTHON", settings=settings)
    with running(settings, "onnxiris") as serving:
        rows = x[::5].astype(np.float32)
        status, body = http("POST", base_url(serving) + ":predict", {"instances": rows.tolist()})
        assert status == 200, body
        assert body["predictions"] == pipeline.predict(rows).tolist()
        status, meta = http("GET", base_url(serving) + "/metadata")
        assert meta["metadata"]["signature_def"]["signature_def"]["serving_default"]["kind"] == "onnx"
        status, body = http("POST", base_url(serving) + ":predict", {"instances": [[1.0, 2.0]]})
        assert status == 400 and "shape 4" in body["error"]
