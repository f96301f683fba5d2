"""`export_kserve`: a serving written as a KServe v1beta1 InferenceService and the model layout its storageUri
reads. The manifests are checked as YAML (structure, stable text, round trip) and through KServe's own Python SDK
model classes; each version folder is loaded as its runtime would load it (joblib, onnxruntime, torch.jit, the
custom predictor's adapter on kserve.Model) and answers as the registered model does.

kserve pins pandas<3, psutil<6 and protobuf<7, so it often cannot share the test environment: where it is not
importable, HOPSML_KSERVE_PYTHON may name a Python that has it (the SDK checks run there, in a subprocess)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from conftest import export_torch, iris, running

from hopsml import cli
from hopsml.model import registry
from hopsml.serving import Batching, Canary, Scaling
from hopsml.serving.control import lifecycle
from hopsml.serving.control.kserve import (
    API_VERSION,
    CANARY_MANIFEST,
    KIND,
    MANIFEST,
    KServeExportError,
    export_kserve,
    inference_service_name,
    to_yaml,
)
from hopsml.serving.instance import loaders

yaml = pytest.importorskip("yaml")


def _two_iris_versions(settings, tmp_path):
    """Versions 1 and 2 of model 'iris': logistic regressions with C=1 and C=0.01 (they answer differently)."""
    import joblib
    from sklearn.linear_model import LogisticRegression

    x, y = iris()
    fitted = []
    for version, c in ((1, 1.0), (2, 0.01)):
        model = LogisticRegression(C=c, max_iter=500).fit(x, y)
        folder = tmp_path / f"v{version}"
        folder.mkdir()
        joblib.dump(model, folder / "model.joblib")
        registry.export(str(folder / "model.joblib"), "iris", settings=settings)
        fitted.append(model)
    return fitted


def _body(path) -> str:
    """A manifest's YAML without its comment header."""
    return "".join(line for line in open(path, encoding="utf-8") if not line.startswith("#"))


def _kserve_python() -> str:
    if importlib.util.find_spec("kserve") is not None:
        return sys.executable
    other = os.environ.get("HOPSML_KSERVE_PYTHON")
    if other and os.path.isfile(other):
        return other
    pytest.skip("the kserve SDK is not importable here (kserve 0.21 pins pandas<3, psutil<6, protobuf<7); set "
                "HOPSML_KSERVE_PYTHON to a Python with `pip install kserve` to run the SDK checks")


# The SDK's ApiClient resolves only kserve.models' classes; Kubernetes' own (V1ObjectMeta, V1ResourceRequirements)
# come from the kubernetes client, as KServeClient users build them.
SDK_CHECK = textwrap.dedent('''
    import json, sys
    import kserve, kubernetes.client

    K8S = kubernetes.client.ApiClient()

    class Client(kserve.ApiClient):
        def _ApiClient__deserialize(self, data, klass):
            if (isinstance(klass, str) and not klass.startswith(("list[", "dict("))
                    and klass not in self.NATIVE_TYPES_MAPPING and not hasattr(kserve.models, klass)):
                return K8S._ApiClient__deserialize(data, klass)
            return super()._ApiClient__deserialize(data, klass)

    class Response:
        def __init__(self, document):
            self.data = json.dumps(document)

    client = Client()
    out = []
    for document in json.load(sys.stdin):
        isvc = client.deserialize(Response(document), "V1beta1InferenceService")
        assert isinstance(isvc, kserve.V1beta1InferenceService), type(isvc)
        p = isvc.spec.predictor
        assert isinstance(p, kserve.V1beta1PredictorSpec), type(p)
        out.append({"back": client.sanitize_for_serialization(isvc), "name": isvc.metadata.name,
                    "meta": type(isvc.metadata).__name__,
                    "storage_uri": p.model.storage_uri if p.model else None,
                    "format": p.model.model_format.name if p.model else None,
                    "runtime": p.model.runtime if p.model else None,
                    "canary": p.canary_traffic_percent,
                    "batcher": [p.batcher.max_batch_size, p.batcher.max_latency] if p.batcher else None,
                    "logger": p.logger.mode if p.logger else None,
                    "scaling": [p.min_replicas, p.max_replicas, p.scale_metric, p.scale_target],
                    "containers": [[c.image, c.command, [[e.name, e.value] for e in c.env]]
                                   for c in p.containers or []]})
    print(json.dumps(out))
''')


def _through_sdk(documents: list[dict]) -> list[dict]:
    done = subprocess.run([_kserve_python(), "-c", SDK_CHECK], input=json.dumps(documents), capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


def _without_sdk_defaults(document: dict) -> dict:
    """The SDK's V1beta1ModelSpec fills `name` (the container's) with '' when a manifest leaves it to KServe."""
    model = document["spec"]["predictor"].get("model")
    if model is not None and model.get("name") == "":
        del model["name"]
    return document


def _canary_serving(settings, tmp_path):
    """Serving 'iris': version 1 stable, version 2 canary at 25%, batched, scaling 1-4 at 4.5 requests, logging
    inputs, with a resource config; exported to tmp_path/kserve. Returns (v1, v2, the export)."""
    v1, v2 = _two_iris_versions(settings, tmp_path)
    lifecycle.create_or_update("iris", "Models/iris", "PYTHON", model_version=1, batching_enabled=True,
                               batching=Batching(max_batch_size=16, batch_timeout_micros=2500),
                               canary=Canary(version=2, traffic_percent=25),
                               scaling=Scaling(min_instances=1, max_instances=4, target=4.5),
                               inference_logging="MODEL_INPUTS",
                               predictor_resource_config={"memory": 2048, "cores": 1, "gpus": 0}, settings=settings)
    done = export_kserve("iris", str(tmp_path / "kserve"), storage_uri="s3://bucket/models/iris/", namespace="ml",
                         logger_url="http://broker.ml/", settings=settings)
    return v1, v2, done


def test_a_canary_serving_exports_both_versions_with_batcher_scaling_and_logger(settings, tmp_path):
    import joblib

    v1, v2, done = _canary_serving(settings, tmp_path)
    out = tmp_path / "kserve"
    assert done.manifests == [str(out / MANIFEST), str(out / CANARY_MANIFEST)]
    assert done.storage_uris == {1: "s3://bucket/models/iris/1", 2: "s3://bucket/models/iris/2"}

    stable, canary = (yaml.safe_load(open(path, encoding="utf-8")) for path in done.manifests)
    assert (stable, canary) == (done.manifest, done.canary_manifest)
    assert stable["apiVersion"] == API_VERSION and stable["kind"] == KIND
    assert stable["metadata"]["name"] == "iris" and stable["metadata"]["namespace"] == "ml"
    predictor = stable["spec"]["predictor"]
    assert predictor["model"] == {"modelFormat": {"name": "sklearn"}, "runtime": "kserve-sklearnserver",
                                  "protocolVersion": "v1", "storageUri": "s3://bucket/models/iris/1",
                                  "resources": {"requests": {"cpu": "1", "memory": "2048Mi"},
                                                "limits": {"cpu": "1", "memory": "2048Mi"}}}
    assert predictor["batcher"] == {"maxBatchSize": 16, "maxLatency": 3}          # 2500 us, in whole ms, up
    assert predictor["logger"] == {"mode": "request", "url": "http://broker.ml/"}
    assert (predictor["minReplicas"], predictor["maxReplicas"]) == (1, 4)
    assert (predictor["scaleMetric"], predictor["scaleTarget"]) == ("concurrency", 5)
    assert "canaryTrafficPercent" not in predictor                            # the stable revision takes it all
    # KServe's canary: the same InferenceService applied again with the new storageUri and the percent
    assert canary["spec"]["predictor"]["canaryTrafficPercent"] == 25
    assert canary["spec"]["predictor"]["model"]["storageUri"] == "s3://bucket/models/iris/2"
    without = {k: v for k, v in canary["spec"]["predictor"].items() if k not in ("canaryTrafficPercent", "model")}
    assert without == {k: v for k, v in predictor.items() if k != "model"}
    header = open(done.manifests[1], encoding="utf-8").read()
    assert f"apply {MANIFEST} (version 1) first" in header and "canaryTrafficPercent: 0" in header

    # each version folder holds the model as kserve-sklearnserver loads it, and it answers as registered
    x, _ = iris()
    for version, fitted in ((1, v1), (2, v2)):
        assert sorted(os.listdir(out / str(version))) == ["model.joblib"]
        loaded = joblib.load(out / str(version) / "model.joblib")
        assert loaded.predict(x).tolist() == fitted.predict(x).tolist()
    assert v1.predict(x).tolist() != v2.predict(x).tolist()

    # stable text, and YAML that reads back into the same mapping and writes back into the same text
    first = [open(path, encoding="utf-8").read() for path in done.manifests]
    with pytest.raises(KServeExportError, match="already exist"):
        export_kserve("iris", str(out), storage_uri="s3://bucket/models/iris", namespace="ml",
                      logger_url="http://broker.ml/", settings=settings)
    export_kserve("iris", str(out), storage_uri="s3://bucket/models/iris", namespace="ml",
                  logger_url="http://broker.ml/", overwrite=True, settings=settings)
    assert [open(path, encoding="utf-8").read() for path in done.manifests] == first
    for path in done.manifests:
        assert to_yaml(yaml.safe_load(_body(path))) == _body(path)
    # once the canary is rolled back, a new export leaves no canary manifest behind to be applied by mistake
    from hopsml.serving.control import canary as canaries

    canaries.rollback("iris", settings=settings)
    again = export_kserve("iris", str(out), storage_uri="s3://bucket/models/iris", overwrite=True, settings=settings)
    assert again.manifests == [str(out / MANIFEST)] and not (out / CANARY_MANIFEST).exists()


def test_a_fixed_serving_without_logging_and_the_cli(settings, tmp_path, capsys):
    _two_iris_versions(settings, tmp_path)
    lifecycle.create_or_update("Iris2", "Models/iris", "PYTHON", model_version=2, instances=3, topic_name="NONE",
                               settings=settings)
    out = tmp_path / "cli-out"
    argv = ["--root", settings.root, "--project", settings.project, "serving", "export-kserve", "Iris2",
            "--out", str(out)]
    assert cli.main(argv) == 0
    printed = capsys.readouterr().out
    assert "pvc://hopsml-models/iris2/2" in printed and str(out / "2") in printed
    assert not (out / CANARY_MANIFEST).exists()
    document = yaml.safe_load(open(out / MANIFEST, encoding="utf-8"))
    predictor = document["spec"]["predictor"]
    assert document["metadata"]["name"] == inference_service_name("Iris2") == "iris2"
    assert (predictor["minReplicas"], predictor["maxReplicas"]) == (3, 3)
    assert not {"scaleMetric", "scaleTarget", "batcher", "logger"} & set(predictor)   # fixed, unbatched, unlogged
    assert predictor["model"]["storageUri"] == "pvc://hopsml-models/iris2/2"
    assert cli.main(argv) == 1                                # there already: refused, not overwritten
    assert "--overwrite" in capsys.readouterr().err
    with pytest.raises(KServeExportError, match="not a storage location"):
        export_kserve("Iris2", str(tmp_path / "x"), storage_uri="bucket/path", settings=settings)


PREDICTOR = textwrap.dedent("""
    import json
    import os


    class Predict:
        def __init__(self):
            with open(os.path.join(os.environ["MODEL_FILES_PATH"], "weights.json")) as stream:
                self.weights = json.load(stream)

        def predict(self, inputs):
            return [sum(w * x for w, x in zip(self.weights, row)) for row in inputs]
""")

TRANSFORMER = textwrap.dedent("""
    class Transformer:
        def preprocess(self, body):
            return {"instances": [[2 * x for x in row] for row in body["instances"]]}

        def postprocess(self, body):
            return {"predictions": [round(p, 6) for p in body["predictions"]], "scaled": True}
""")


def _custom_serving(settings, tmp_path):
    """Serving 'weighted': a predictor script weighing each row by the version's weights.json, behind a transformer
    script that doubles the rows and marks the answer."""
    folder = tmp_path / "weighted"
    folder.mkdir()
    (folder / "weights.json").write_text("[0.5, 1.5]")
    (folder / "predict.py").write_text(PREDICTOR)
    registry.export(str(folder), "weighted", settings=settings)
    resources = tmp_path / "root" / "Projects" / "test" / "Resources"
    resources.mkdir(parents=True, exist_ok=True)
    (resources / "transform.py").write_text(TRANSFORMER)
    lifecycle.create_or_update("weighted", "Models/weighted", "PYTHON", predictor="predict.py",
                               transformer="Resources/transform.py", kserve=True, settings=settings)


ROWS = [[1.0, 2.0], [3.0, -1.0]]
ANSWER = {"predictions": [7.0, 0.0], "scaled": True}   # rows doubled, then weighed


def test_a_predictor_script_becomes_a_custom_predictor(settings, tmp_path):
    _custom_serving(settings, tmp_path)
    with running(settings, "weighted"):   # what hopsml answers; the SDK test runs the adapter against it
        assert lifecycle.make_inference_request("weighted", {"instances": ROWS}, settings=settings) == ANSWER
    out = tmp_path / "kserve"
    done = export_kserve("weighted", str(out), storage_uri="gs://b/weighted", image="registry.example/w:1",
                         settings=settings)
    assert {"kserve_predictor.py", "predict.py", "transform.py", "weights.json"} <= set(os.listdir(out / "1"))
    predictor = done.manifest["spec"]["predictor"]
    assert "model" not in predictor
    [container] = predictor["containers"]
    assert container["image"] == "registry.example/w:1"
    assert container["command"] == ["python", "/mnt/models/kserve_predictor.py"]
    assert container["args"] == ["--model_name", "weighted"]
    assert container["env"] == [{"name": "STORAGE_URI", "value": "gs://b/weighted/1"}]
    header = open(done.manifests[0], encoding="utf-8").read()
    assert "pip install kserve" in header and any("pip install kserve" in note for note in done.notes)
    assert yaml.safe_load(_body(done.manifests[0])) == done.manifest


def test_kserve_sdk_reads_the_manifests_and_runs_the_custom_predictor(settings, tmp_path):
    python = _kserve_python()
    _, _, canary_export = _canary_serving(settings, tmp_path)
    stable, canary = canary_export.manifest, canary_export.canary_manifest
    seen = _through_sdk([stable, canary])
    for document, got in zip((stable, canary), seen):   # every field survives the SDK's model classes
        assert _without_sdk_defaults(got["back"]) == document
        assert got["meta"] == "V1ObjectMeta" and got["name"] == "iris"
        assert (got["format"], got["runtime"], got["batcher"], got["logger"]) == (
            "sklearn", "kserve-sklearnserver", [16, 3], "request")
        assert got["scaling"] == [1, 4, "concurrency", 5]
    assert [got["canary"] for got in seen] == [None, 25]
    assert [got["storage_uri"] for got in seen] == ["s3://bucket/models/iris/1", "s3://bucket/models/iris/2"]

    _custom_serving(settings, tmp_path)
    out = tmp_path / "custom"
    done = export_kserve("weighted", str(out), storage_uri="gs://b/weighted", image="registry.example/w:1",
                         settings=settings)
    [got] = _through_sdk([done.manifest])
    assert got["back"] == done.manifest
    assert got["containers"] == [["registry.example/w:1", ["python", "/mnt/models/kserve_predictor.py"],
                                  [["STORAGE_URI", "gs://b/weighted/1"]]]]
    # the adapter, on KServe's own kserve.Model, answers as the hopsml serving does
    run = textwrap.dedent(f"""
        import json, sys
        sys.path.insert(0, {str(out / '1')!r})
        import kserve, kserve_predictor
        model = kserve_predictor.HopsPredictor("weighted", {str(out / '1')!r})
        assert isinstance(model, kserve.Model) and model.ready
        print(json.dumps(model.predict({{"instances": {ROWS!r}}})))
    """)
    ran = subprocess.run([python, "-c", run], capture_output=True, text=True, timeout=300,
                         env={**os.environ, "MODEL_FILES_PATH": "/elsewhere"})
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert json.loads(ran.stdout.strip().splitlines()[-1]) == ANSWER


def test_onnx_and_torchscript_versions_become_triton_model_repositories(settings, tmp_path):
    pytest.importorskip("onnxruntime")
    skl2onnx = pytest.importorskip("skl2onnx")
    torch = pytest.importorskip("torch")
    import onnxruntime
    from skl2onnx.common.data_types import FloatTensorType
    from sklearn.linear_model import LogisticRegression

    x, y = iris()
    fitted = LogisticRegression(max_iter=500).fit(x, y)
    onnx = skl2onnx.convert_sklearn(fitted, initial_types=[("input", FloatTensorType([None, 4]))],
                                    options={id(fitted): {"zipmap": False}})
    (tmp_path / "model.onnx").write_bytes(onnx.SerializeToString())
    registry.export(str(tmp_path / "model.onnx"), "onnxiris", settings=settings)
    lifecycle.create_or_update("onnxiris", "Models/onnxiris", "PYTHON", settings=settings)
    done = export_kserve("onnxiris", str(tmp_path / "onnx"), settings=settings)
    model = done.manifest["spec"]["predictor"]["model"]
    assert (model["modelFormat"], model["runtime"], model["protocolVersion"]) == (
        {"name": "onnx"}, "kserve-tritonserver", "v2")
    repo = tmp_path / "onnx" / "1" / "onnxiris"
    assert (repo / "config.pbtxt").read_text() == 'name: "onnxiris"\nplatform: "onnxruntime_onnx"\n'
    session = onnxruntime.InferenceSession(str(repo / "1" / "model.onnx"), providers=["CPUExecutionProvider"])
    assert session.run(None, {"input": x.astype(np.float32)})[0].tolist() == fitted.predict(x).tolist()

    # TorchScript as saved, and a pickled nn.Module scripted on the way; batching is Triton's own batcher
    for scripted in (True, False):
        name = "tsnet" if scripted else "picklednet"
        net = export_torch(settings, tmp_path / name, name, scripted=scripted)
        lifecycle.create_or_update(name, f"Models/{name}", "PYTHON", batching_enabled=True,
                                   batching=Batching(max_batch_size=8, batch_timeout_micros=500), settings=settings)
        done = export_kserve(name, str(tmp_path / f"out-{name}"), settings=settings)
        predictor = done.manifest["spec"]["predictor"]
        assert predictor["model"]["modelFormat"] == {"name": "pytorch"}
        assert predictor["model"]["runtime"] == "kserve-tritonserver"
        assert "batcher" not in predictor                   # KServe's batcher takes v1 requests; Triton batches
        repo = tmp_path / f"out-{name}" / "1" / name
        config_text = (repo / "config.pbtxt").read_text()
        assert 'platform: "pytorch_libtorch"' in config_text and "max_batch_size: 8" in config_text
        assert "max_queue_delay_microseconds: 500" in config_text
        assert 'name: "INPUT__0", data_type: TYPE_FP32, dims: [4]' in config_text
        loaded = torch.jit.load(str(repo / "1" / "model.pt"))
        rows = torch.from_numpy(x[:7].astype(np.float32))
        assert torch.allclose(loaded(rows), net(rows))


def test_a_savedmodel_becomes_tf_servings_numbered_folder_and_keras_is_refused(settings, tmp_path):
    tf = pytest.importorskip("tensorflow")
    keras = tf.keras
    keras.utils.set_random_seed(0)
    net = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3)])
    net.export(str(tmp_path / "saved"), verbose=False)
    registry.export(str(tmp_path / "saved"), "dense", settings=settings)
    lifecycle.create_or_update("dense", "Models/dense", "TENSORFLOW_SERVING", batching_enabled=True,
                               settings=settings)
    done = export_kserve("dense", str(tmp_path / "tf"), storage_uri="s3://b/dense", settings=settings)
    predictor = done.manifest["spec"]["predictor"]
    assert predictor["model"]["modelFormat"] == {"name": "tensorflow"}
    assert predictor["model"]["runtime"] == "kserve-tensorflow-serving"
    assert predictor["model"]["storageUri"] == "s3://b/dense/1"
    assert predictor["batcher"] == {"maxBatchSize": 32, "maxLatency": 1}
    # <storageUri>/<version>/saved_model.pb, as TF Serving reads it, through its serving_default signature
    loaded = loaders.SavedModel(str(tmp_path / "tf" / "1" / "1"))
    rows = np.random.default_rng(0).normal(size=(3, 4)).astype("float32")
    np.testing.assert_allclose(np.asarray(loaded.predict(rows)), net(rows).numpy(), rtol=1e-5, atol=1e-6)
    # a .keras file has no KServe runtime: refused, naming the ways out
    net.save(str(tmp_path / "model.keras"))
    registry.export(str(tmp_path / "model.keras"), "kerasnet", settings=settings)
    lifecycle.create_or_update("kerasnet", "Models/kerasnet", "TENSORFLOW_SERVING", settings=settings)
    with pytest.raises(KServeExportError, match="keras model .*no KServe runtime.*SavedModel.*predictor script"):
        export_kserve("kerasnet", str(tmp_path / "keras"), settings=settings)
    assert not (tmp_path / "keras" / "1").exists()
