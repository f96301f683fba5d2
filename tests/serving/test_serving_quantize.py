"""Int8 export: a PyTorch MLP (dynamic int8 Linear layers) and a Keras model (TFLite dynamic-range) become
smaller versions that record their sizes and accuracy change, and a real server answers with them."""

from __future__ import annotations

import os

import numpy as np
import pytest
from conftest import base_url, http, iris, running

from hopsml.model import ModelError, quantize, registry
from hopsml.serving import lifecycle

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
    assert second.quantization["evaluation"] is None  # no data given: nothing is claimed about accuracy
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

    folder = registry.download_model("flowers", 1, local_dir=str(tmp_path / "dl"), settings=settings)
    want = run_tflite(os.path.join(folder, "model.tflite"), x[:5])
    lifecycle.create_or_update("flowers", "Models/flowers", "PYTHON", model_version=1, settings=settings)
    with running(settings, "flowers") as serving:
        status, body = http("POST", base_url(serving) + ":predict", {"instances": x[:5].tolist()})
        assert status == 200
        np.testing.assert_allclose(np.array(body["predictions"]), want, rtol=1e-5, atol=1e-6)
        status, body = http("GET", base_url(serving) + "/metadata")
        assert body["metadata"]["signature_def"]["signature_def"]["serving_default"]["kind"] == "tflite"
