"""Int8 export: 32-bit float weights stored as 8-bit integers, for a smaller model that answers faster on a CPU.

    from hopsml import model
    mv = model.export("net.pth", "mlp", quantize="int8", eval_data=(x_test, y_test))
    q = model.quantize("mlp", 1, eval_data=(x_test, y_test))   # a new version from a registered one
    q.quantization["size_ratio"], q.quantization["evaluation"]

PyTorch modules (`torch.save(model)`) get dynamic int8 quantization of their Linear and LSTM layers
(`torch.ao.quantization.quantize_dynamic`) and are saved the same way; Keras models become a TFLite file
with post-training dynamic-range quantization. The version records, under `quantization`, the size before
and after and, when evaluation data is given, the accuracy (or mean squared error) of both models on it.
A quantized version is served like any other (`.pth` by the PyTorch loader, `.tflite` by the TFLite one).
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from hopsml import config, layout
from hopsml.model.registry import ModelError, ModelVersion, download_model, export, get_model

log = logging.getLogger(__name__)

METHODS = ("int8",)
TORCH_SUFFIXES = (".pt", ".pth")
KERAS_SUFFIXES = (".keras", ".h5")
TFLITE_FILE = "model.tflite"
_REGISTRY_FILES = {layout.MODEL_RECORD, layout.MODEL_DONE}


@dataclass
class Quantized:
    """A quantized copy on local disk: the folder to export and what `model.json` records about it."""

    folder: str
    record: dict[str, Any]


def check_method(method: str) -> str:
    """The quantization method, or a ModelError naming the ones there are."""
    if method not in METHODS:
        raise ModelError(f"quantize={method!r} is not supported; use one of {', '.join(METHODS)} (int8 weights)")
    return method


def _model_file(folder: str) -> str:
    """The one PyTorch or Keras model file under `folder` ('/'-separated, relative)."""
    found = []
    for here, _, files in os.walk(folder):
        for name in files:
            rel = os.path.relpath(os.path.join(here, name), folder).replace(os.sep, "/")
            if rel not in _REGISTRY_FILES and name.lower().endswith(TORCH_SUFFIXES + KERAS_SUFFIXES):
                found.append(rel)
    if len(found) == 1:
        return found[0]
    if not found:
        raise ModelError(f"nothing to quantize in {folder}: int8 export takes a PyTorch module saved with "
                         f"torch.save(model) ({', '.join(TORCH_SUFFIXES)}) or a Keras model "
                         f"({', '.join(KERAS_SUFFIXES)})")
    raise ModelError(f"{folder} holds several model files ({', '.join(sorted(found))}); export the one to "
                     "quantize on its own")


def _eval_arrays(eval_data: Any) -> tuple[np.ndarray, np.ndarray] | None:
    if eval_data is None:
        return None
    if not isinstance(eval_data, Sequence) or len(eval_data) != 2:
        raise ModelError("eval_data must be (inputs, labels): two arrays with one row per example, e.g. "
                         "(x_test, y_test)")
    x, y = np.asarray(eval_data[0], dtype="float32"), np.asarray(eval_data[1])
    if x.ndim < 1 or len(x) != len(y) or len(x) == 0:
        raise ModelError(f"eval_data has {len(x) if x.ndim else 0} input rows and {len(y)} labels; give the "
                         "same number, at least one")
    return x, y


def _score(outputs: np.ndarray, labels: np.ndarray) -> tuple[str, float]:
    """('accuracy', share right) for class labels, else ('mse', mean squared error)."""
    outputs = np.asarray(outputs)
    if labels.dtype.kind in "iub":
        if outputs.ndim == 2 and outputs.shape[1] > 1:
            predicted = outputs.argmax(axis=1)
        else:
            predicted = (outputs.reshape(len(labels)) > 0.5).astype(labels.dtype)
        return "accuracy", float(np.mean(predicted == labels))
    return "mse", float(np.mean((outputs.reshape(len(labels), -1) - labels.reshape(len(labels), -1)) ** 2))


def _evaluation(before: np.ndarray, after: np.ndarray, labels: np.ndarray, source: str) -> dict[str, Any]:
    metric, old = _score(before, labels)
    _, new = _score(after, labels)
    return {"metric": metric, "before": old, "after": new, "change": new - old, "rows": int(len(labels)),
            "data": source,
            "max_output_change": float(np.max(np.abs(np.asarray(after, dtype="float64") -
                                                     np.asarray(before, dtype="float64"))))}


def _torch_int8(src: str, dst: str, data: tuple[np.ndarray, np.ndarray] | None) -> tuple[dict[str, Any], Any]:
    import torch

    try:
        torch.jit.load(src, map_location="cpu")
    except RuntimeError:
        pass
    else:
        raise ModelError(f"{os.path.basename(src)} is TorchScript, which dynamic int8 quantization cannot rewrite; "
                         "save the module itself with torch.save(model) and quantize that")
    model = torch.load(src, map_location="cpu", weights_only=False)
    if not isinstance(model, torch.nn.Module):
        raise ModelError(f"{os.path.basename(src)} holds a {type(model).__name__}, not a torch.nn.Module; save "
                         "the model with torch.save(model) (a state_dict cannot be quantized without its class)")
    model.eval()
    with warnings.catch_warnings():  # torch.ao.quantization warns that it moves to torchao; it works as documented
        warnings.simplefilter("ignore")
        from torch.ao.quantization import quantize_dynamic

        quantized = quantize_dynamic(model, {torch.nn.Linear, torch.nn.LSTM}, dtype=torch.qint8)
    torch.save(quantized, dst)
    outputs = None
    if data is not None:
        with torch.inference_mode():
            x = torch.from_numpy(data[0])
            outputs = (model(x).numpy(), quantized(x).numpy())
    return {"framework": "pytorch", "scheme": "dynamic int8 weights of Linear and LSTM layers "
                                              "(torch.ao.quantization.quantize_dynamic)"}, outputs


def _keras_int8(src: str, dst: str, data: tuple[np.ndarray, np.ndarray] | None) -> tuple[dict[str, Any], Any]:
    import keras
    import tensorflow as tf

    model = keras.models.load_model(src, compile=False)
    converter = tf.lite.TFLiteConverter.from_keras_model(model)
    converter.optimizations = [tf.lite.Optimize.DEFAULT]  # no representative data: dynamic-range int8 weights
    with open(dst, "wb") as out:
        out.write(converter.convert())
    outputs = None
    if data is not None:
        outputs = (np.asarray(model(data[0], training=False)), run_tflite(dst, data[0]))
    return {"framework": "keras", "scheme": "TFLite post-training dynamic-range quantization (int8 weights)"}, outputs


def tflite_interpreter(path: str, threads: int = 1) -> Any:
    """A TFLite interpreter for `path`: LiteRT's when installed, else TensorFlow's (deprecated there, same API)."""
    try:
        from ai_edge_litert.interpreter import Interpreter
    except ImportError:
        import tensorflow as tf

        Interpreter = tf.lite.Interpreter  # noqa: N806 - the class, under its own name
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return Interpreter(model_path=path, num_threads=max(1, threads))


def run_tflite(path: str, x: np.ndarray) -> np.ndarray:
    """The TFLite model's first output for the rows `x`."""
    interpreter = tflite_interpreter(path)
    index = interpreter.get_input_details()[0]["index"]
    interpreter.resize_tensor_input(index, list(x.shape))
    interpreter.allocate_tensors()
    interpreter.set_tensor(index, x)
    interpreter.invoke()
    return np.array(interpreter.get_tensor(interpreter.get_output_details()[0]["index"]))


def quantize_files(source: str, method: str = "int8", eval_data: Any = None, *,
                   source_ref: str | None = None) -> Quantized:
    """A quantized copy of the model file (or the folder holding one) at `source`, in a new temporary folder.

    Other files of a folder are copied beside it unchanged. The caller removes the folder."""
    check_method(method)
    data = _eval_arrays(eval_data)
    source = os.path.abspath(os.path.expanduser(source))
    if not os.path.exists(source):
        raise ModelError(f"{source} does not exist; save the model first and pass the file or folder it went to")
    folder, rel = (os.path.dirname(source), os.path.basename(source)) if os.path.isfile(source) else (
        source, _model_file(source))
    src = os.path.join(folder, *rel.split("/"))
    out = tempfile.mkdtemp(prefix="hopsml-int8-")
    try:
        if os.path.isdir(source):  # the folder's other files travel along
            shutil.copytree(source, out, dirs_exist_ok=True,
                            ignore=lambda d, names: [n for n in names if n in _REGISTRY_FILES])
            os.remove(os.path.join(out, *rel.split("/")))
        if rel.lower().endswith(TORCH_SUFFIXES):
            target_rel = rel
            how, outputs = _torch_int8(src, os.path.join(out, *rel.split("/")), data)
        else:
            target_rel = (rel.rpartition("/")[0] + "/" if "/" in rel else "") + TFLITE_FILE
            how, outputs = _keras_int8(src, os.path.join(out, *target_rel.split("/")), data)
        before = os.path.getsize(src)
        after = os.path.getsize(os.path.join(out, *target_rel.split("/")))
        record: dict[str, Any] = {
            "method": method, **how, "source": {"file": rel, "size_bytes": before, "model": source_ref},
            "file": target_rel, "size_bytes": after, "size_ratio": round(after / before, 4) if before else None,
            "evaluation": None}
        if data is not None and outputs is not None:
            record["evaluation"] = _evaluation(outputs[0], outputs[1], data[1], "eval_data passed by the caller")
        log.info("quantized %s to %s: %d -> %d bytes", rel, method, before, after)
        return Quantized(out, record)
    except BaseException:
        shutil.rmtree(out, ignore_errors=True)
        raise


def quantize(model_name: str, model_version: int | None = None, method: str = "int8", *, eval_data: Any = None,
             metrics: Mapping[str, Any] | None = None, description: str | None = None,
             settings: config.Settings | None = None) -> ModelVersion:
    """A new version of `model_name`: version `model_version` (the latest when None) with int8 weights.

    The new version names its source under `quantization.source.model`; `eval_data` = (inputs, labels)
    records the accuracy (or MSE) of both on that data."""
    check_method(method)
    source = get_model(model_name, model_version, settings=settings)
    local = tempfile.mkdtemp(prefix="hopsml-int8-source-")
    try:
        folder = download_model(source.name, source.version, local_dir=local, settings=settings)
        return export(folder, source.name, metrics=metrics,
                      description=description or f"{source.name} version {source.version} with {method} weights",
                      settings=settings, quantize=method, eval_data=eval_data, quantized_from=source)
    finally:
        shutil.rmtree(local, ignore_errors=True)
