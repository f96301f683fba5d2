"""Int8 export: a PyTorch MLP (dynamic int8 Linear layers) and a Keras model (TFLite dynamic-range) become
smaller versions that record their sizes and accuracy change, and a real server answers with them. Without
eval_data the change is measured on the test split of the table the model was trained on (real Spark
prepares it; a run reads its train split, so the model's lineage names it), or its absence is explained."""

from __future__ import annotations

import os

import numpy as np
import pytest
from conftest import base_url, http, iris, running, settings_for

from hopsml import layout
from hopsml.data import prepare_table, samples
from hopsml.data.readers import reader
from hopsml.fs import Storage
from hopsml.model import ModelError, quantize, registry
from hopsml.serving.control import lifecycle
from hopsml.tracking.run_context import active_run

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::UserWarning")


def trained_mlp():
    """An MLP fitted to iris in a few hundred full-batch steps (wide enough that int8 weights shrink it)."""
    import torch

    torch.manual_seed(0)
    x, y = iris()
    x = ((x - x.mean(0)) / x.std(0)).astype("float32")
    net = torch.nn.Sequential(torch.nn.Linear(4, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64), torch.nn.ReLU(),
                              torch.nn.Linear(64, 3))
    opt = torch.optim.Adam(net.parameters(), lr=0.01)
    for _ in range(200):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(net(torch.from_numpy(x)), torch.from_numpy(y)).backward()
        opt.step()
    return net.eval(), x, y


def test_torch_int8_export_records_size_and_accuracy_and_serves(settings, tmp_path):
    torch = pytest.importorskip("torch")
    net, x, y = trained_mlp()
    torch.save(net, str(tmp_path / "model.pth"))
    mv = registry.export(str(tmp_path / "model.pth"), "mlp", quantize="int8", eval_data=(x, y), settings=settings)

    q = mv.quantization
    assert q["method"] == "int8" and q["framework"] == "pytorch" and q["file"] == "model.pth"
    assert q["source"]["size_bytes"] == os.path.getsize(tmp_path / "model.pth")
    assert q["size_bytes"] == next(f["size"] for f in mv.files if f["path"] == "model.pth")
    assert q["size_bytes"] < 0.6 * q["source"]["size_bytes"]
    ev = q["evaluation"]
    assert ev["metric"] == "accuracy" and ev["rows"] == 150 and ev["data"] == "eval_data passed by the caller"
    assert ev["before"] > 0.9 and abs(ev["change"]) <= 0.03 and ev["change"] == ev["after"] - ev["before"]
    assert q["latency_ms"]["rows"] == 150 and q["latency_ms"]["before"] > 0 and q["latency_ms"]["after"] > 0
    assert registry.get_model("mlp", 1, settings=settings).quantization == q  # kept in model.json

    folder = registry.download_model("mlp", 1, local_dir=str(tmp_path / "dl"), settings=settings)
    int8 = torch.load(os.path.join(folder, "model.pth"), weights_only=False)
    assert {m.__module__ for m in map(type, int8.modules())} >= {"torch.ao.nn.quantized.dynamic.modules.linear"}
    with torch.no_grad():
        want = int8(torch.from_numpy(x[:7])).numpy()
    lifecycle.create_or_update("mlp", "Models/mlp", "PYTHON", model_version=1, settings=settings)
    with running(settings, "mlp") as serving:
        status, body = http("POST", base_url(serving) + ":predict", {"instances": x[:7].tolist()})
        assert status == 200
        np.testing.assert_allclose(np.array(body["predictions"]), want, rtol=1e-5, atol=1e-5)
        status, body = http("POST", base_url(serving) + ":predict", {"instances": [[1.0, 2.0]]})
        assert status == 400 and "shape 4" in body["error"]


def test_quantize_verb_makes_a_new_version_and_refuses_torchscript(settings, tmp_path):
    torch = pytest.importorskip("torch")
    net, x, y = trained_mlp()
    torch.save(net, str(tmp_path / "model.pth"))
    first = registry.export(str(tmp_path / "model.pth"), "mlp", metrics={"accuracy": 0.97}, settings=settings)
    assert first.quantization is None

    second = quantize("mlp", 1, settings=settings)
    assert second.version == 2 and second.quantization["source"]["model"] == "mlp:1"
    assert second.quantization["evaluation"] is None  # no data given, no lineage: nothing is claimed about accuracy
    assert "lineage names no dataset" in second.quantization["evaluation_skipped"]
    assert second.quantization["size_bytes"] < second.quantization["source"]["size_bytes"]

    torch.jit.save(torch.jit.script(net), str(tmp_path / "scripted.pt"))
    with pytest.raises(ModelError, match="TorchScript"):
        registry.export(str(tmp_path / "scripted.pt"), "scripted", quantize="int8", settings=settings)
    with pytest.raises(ModelError, match="not supported"):
        registry.export(str(tmp_path / "model.pth"), "mlp", quantize="int4", settings=settings)
    assert [v.version for v in registry.versions("mlp", settings=settings)] == [1, 2]


def test_keras_int8_export_is_a_servable_tflite_file(settings, tmp_path):
    keras = pytest.importorskip("keras")
    from hopsml.model.quantize import run_tflite

    keras.utils.set_random_seed(0)
    x, y = iris()
    x = ((x - x.mean(0)) / x.std(0)).astype("float32")
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(64, activation="relu"),
                              keras.layers.Dense(64, activation="relu"), keras.layers.Dense(3, activation="softmax")])
    model.compile(optimizer=keras.optimizers.Adam(0.01), loss="sparse_categorical_crossentropy")
    model.fit(x, y, epochs=30, batch_size=150, verbose=0)
    model.save(str(tmp_path / "model.keras"))

    mv = registry.export(str(tmp_path / "model.keras"), "flowers", quantize="int8", eval_data=(x, y),
                         settings=settings)
    q = mv.quantization
    assert q["framework"] == "keras" and q["file"] == "model.tflite"
    assert [f["path"] for f in mv.files] == ["model.tflite"]
    assert q["size_bytes"] < q["source"]["size_bytes"]
    assert q["evaluation"]["metric"] == "accuracy" and abs(q["evaluation"]["change"]) <= 0.03
    assert q["latency_ms"]["before"] > 0 and q["latency_ms"]["after"] > 0

    folder = registry.download_model("flowers", 1, local_dir=str(tmp_path / "dl"), settings=settings)
    want = run_tflite(os.path.join(folder, "model.tflite"), x[:5])
    lifecycle.create_or_update("flowers", "Models/flowers", "PYTHON", model_version=1, settings=settings)
    with running(settings, "flowers") as serving:
        status, body = http("POST", base_url(serving) + ":predict", {"instances": x[:5].tolist()})
        assert status == 200
        np.testing.assert_allclose(np.array(body["predictions"]), want, rtol=1e-5, atol=1e-6)
        status, body = http("GET", base_url(serving) + "/metadata")
        assert body["metadata"]["signature_def"]["signature_def"]["serving_default"]["kind"] == "tflite"


@pytest.fixture(scope="module")
def prepared(tmp_path_factory, spark):
    """A root with iris prepared twice by prepare_table: 'iris' with a test split, 'iris_all' without one."""
    base = tmp_path_factory.mktemp("int8-test-split")
    settings = settings_for(base / "root")
    csv = str(base / "iris.csv")
    samples.write_table(csv, bad_rows=False)
    prepare_table(csv, "iris", label="species", standardize=True, settings=settings, spark=spark)
    prepare_table(csv, "iris_all", label="species", standardize=True, test_fraction=0.0, settings=settings,
                  spark=spark)
    return settings


def _split(settings, dataset: str, split: str):
    batches = list(reader(dataset, split=split, shuffle=False, settings=settings))
    return (np.concatenate([b["features"] for b in batches]).astype("float32"),
            np.concatenate([b["label"] for b in batches]))


def _train_in_a_run(settings, dataset: str, folder, run: int):
    """A torch MLP trained in a run that reads `dataset`'s train split, saved with torch.save to folder/model.pth;
    returns the net and the run's directory (export inside the run links the dataset as the model's lineage)."""
    import torch

    torch.manual_seed(0)
    storage = Storage(settings.root)
    run_dir = layout.ExperimentDir.of("test", f"local-{run}", run)
    with active_run(storage, run_dir):
        x, y = _split(settings, dataset, "train")
    net = torch.nn.Sequential(torch.nn.Linear(x.shape[1], 64), torch.nn.ReLU(), torch.nn.Linear(64, 64),
                              torch.nn.ReLU(), torch.nn.Linear(64, 3))
    opt = torch.optim.Adam(net.parameters(), lr=0.01)
    for _ in range(200):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(net(torch.from_numpy(x)), torch.from_numpy(y).long()).backward()
        opt.step()
    folder.mkdir(parents=True, exist_ok=True)
    torch.save(net.eval(), str(folder / "model.pth"))
    return net, storage, run_dir


def _accuracy(net, x, y) -> float:
    import torch

    with torch.no_grad():
        return float(np.mean(net(torch.from_numpy(x)).numpy().argmax(axis=1) == y))


def test_int8_export_measures_the_accuracy_change_on_the_trained_datasets_test_split(prepared, tmp_path):
    torch = pytest.importorskip("torch")
    net, storage, run_dir = _train_in_a_run(prepared, "iris", tmp_path / "m", 1)
    with active_run(storage, run_dir):   # exported from the run that read the train split: the lineage names iris
        mv = registry.export(str(tmp_path / "m" / "model.pth"), "flowers", quantize="int8", settings=prepared)
    x_test, y_test = _split(prepared, "iris", "test")
    ev = mv.quantization["evaluation"]
    assert ev["data"] == "split 'test' of dataset 'iris' (the model's lineage)" and ev["metric"] == "accuracy"
    assert ev["rows"] == len(y_test) == Storage(prepared.root).read_json(
        layout.join(layout.dataset_dir("test", "iris"), "dataset.json"))["splits"]["test"]["rows"]
    assert ev["before"] == _accuracy(net, x_test, y_test) > 0.8
    int8 = torch.load(os.path.join(registry.download_model("flowers", mv.version, local_dir=str(tmp_path / "dl"),
                                                           settings=prepared), "model.pth"), weights_only=False)
    assert ev["after"] == _accuracy(int8, x_test, y_test) and ev["change"] == ev["after"] - ev["before"]
    assert "evaluation_skipped" not in mv.quantization
    assert registry.get_model("flowers", mv.version, settings=prepared).quantization == mv.quantization

    # eval_data still overrides the recorded split
    given = registry.export(str(tmp_path / "m" / "model.pth"), "flowers", quantize="int8", settings=prepared,
                            eval_data=_split(prepared, "iris", "train"))
    assert given.quantization["evaluation"]["data"] == "eval_data passed by the caller"
    assert given.quantization["evaluation"]["rows"] == len(_split(prepared, "iris", "train")[1])


def test_the_quantize_verb_uses_its_source_versions_lineage_and_says_why_when_there_is_no_test_split(prepared,
                                                                                                    tmp_path):
    pytest.importorskip("torch")
    _, storage, run_dir = _train_in_a_run(prepared, "iris", tmp_path / "a", 2)
    with active_run(storage, run_dir):
        plain = registry.export(str(tmp_path / "a" / "model.pth"), "lineaged", settings=prepared)
    assert [d["name"] for d in plain.datasets] == ["iris"] and plain.quantization is None
    small = quantize("lineaged", plain.version, settings=prepared)
    assert small.datasets == plain.datasets
    assert small.quantization["evaluation"]["data"] == "split 'test' of dataset 'iris' (the model's lineage)"
    assert small.quantization["evaluation"]["rows"] == len(_split(prepared, "iris", "test")[1])

    _, storage, run_dir = _train_in_a_run(prepared, "iris_all", tmp_path / "b", 3)
    with active_run(storage, run_dir):
        mv = registry.export(str(tmp_path / "b" / "model.pth"), "untested", quantize="int8", settings=prepared)
    assert mv.quantization["evaluation"] is None
    reason = mv.quantization["evaluation_skipped"]
    assert "'iris_all' has no 'test' split (it has train)" in reason and "eval_data=" in reason
    assert mv.quantization["size_bytes"] < mv.quantization["source"]["size_bytes"]   # quantized all the same


def test_onnx_int8_export_uses_onnxruntimes_quantization_and_serves(settings, tmp_path):
    """An MLP exported to ONNX (torch.onnx) becomes an int8 ONNX version by onnxruntime's dynamic quantization,
    smaller, about as accurate, its one-batch latency before and after recorded, and served by onnxruntime."""
    torch = pytest.importorskip("torch")
    onnxruntime = pytest.importorskip("onnxruntime")
    pytest.importorskip("onnx")
    net, x, y = trained_mlp()
    torch.onnx.export(net, (torch.from_numpy(x[:2]),), str(tmp_path / "model.onnx"), input_names=["rows"],
                      output_names=["logits"], dynamic_axes={"rows": {0: "n"}, "logits": {0: "n"}}, dynamo=False)
    mv = registry.export(str(tmp_path / "model.onnx"), "onnxmlp", quantize="int8", eval_data=(x, y),
                         settings=settings)
    q = mv.quantization
    assert q["framework"] == "onnx" and q["file"] == "model.onnx" and q["size_bytes"] < 0.6 * q["source"]["size_bytes"]
    assert q["evaluation"]["metric"] == "accuracy" and abs(q["evaluation"]["change"]) <= 0.03
    assert q["latency_ms"]["rows"] == 150 and q["latency_ms"]["before"] > 0 and q["latency_ms"]["after"] > 0
    folder = registry.download_model("onnxmlp", 1, local_dir=str(tmp_path / "dl"), settings=settings)
    session = onnxruntime.InferenceSession(os.path.join(folder, "model.onnx"), providers=["CPUExecutionProvider"])
    want = session.run(None, {"rows": x[:5]})[0]
    lifecycle.create_or_update("onnxmlp", "Models/onnxmlp", "PYTHON", settings=settings)
    with running(settings, "onnxmlp") as serving:
        status, body = http("POST", base_url(serving) + ":predict", {"instances": x[:5].tolist()})
        assert status == 200
        np.testing.assert_allclose(np.array(body["predictions"]), want, rtol=1e-5, atol=1e-5)
