"""Int8 export: 32-bit float weights stored as 8-bit integers, for a smaller model that answers faster on a CPU.

    from hopsml import model
    mv = model.export("net.pth", "mlp", quantize="int8", eval_data=(x_test, y_test))
    q = model.quantize("mlp", 1)   # a new version from a registered one, measured on its lineage's test split
    q.quantization["size_ratio"], q.quantization["evaluation"], q.quantization.get("evaluation_skipped")

PyTorch modules (`torch.save(model)`) get dynamic int8 quantization of their Linear and LSTM layers
(`torch.ao.quantization.quantize_dynamic`) and are saved the same way; Keras models become a TFLite file
with post-training dynamic-range quantization; ONNX models get onnxruntime's dynamic int8 quantization
(`onnxruntime.quantization.quantize_dynamic`). The version records, under `quantization`, the size before
and after, the accuracy (or mean squared error) of both models and the latency of one batch on each (the median
of five calls on up to 256 rows, on this machine): on `eval_data` when given, else on the `test` split of the
table dataset the model's lineage names (its `features` and `label`), else nothing, with the reason. A
quantized version is served like any other (`.pth` by the PyTorch loader, `.tflite` by the TFLite one, `.onnx`
by onnxruntime).
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from hopsml import layout
from hopsml.errors import ModelError
from hopsml.fs import Storage

log = logging.getLogger(__name__)

METHODS = ("int8",)
TORCH_SUFFIXES = (".pt", ".pth")
KERAS_SUFFIXES = (".keras", ".h5")
ONNX_SUFFIXES = (".onnx",)
TFLITE_FILE = "model.tflite"
LATENCY_ROWS = 256   # the batch one latency is measured on
LATENCY_CALLS = 5
TEST_SPLIT = "test"
CALLER_DATA = "eval_data passed by the caller"
EVAL_CHUNK = 4096  # rows per model call when evaluating, so a large test split does not need all its outputs at once
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
            if rel not in _REGISTRY_FILES and name.lower().endswith(TORCH_SUFFIXES + KERAS_SUFFIXES + ONNX_SUFFIXES):
                found.append(rel)
    if len(found) == 1:
        return found[0]
    if not found:
        raise ModelError(f"nothing to quantize in {folder}: int8 export takes a PyTorch module saved with "
                         f"torch.save(model) ({', '.join(TORCH_SUFFIXES)}), a Keras model "
                         f"({', '.join(KERAS_SUFFIXES)}) or an ONNX model (.onnx)")
    raise ModelError(f"{folder} holds several model files ({', '.join(sorted(found))}); export the one to "
                     "quantize on its own")


@dataclass(frozen=True)
class EvalData:
    """What both models are evaluated on and where it came from; no arrays, and the reason, when nothing."""

    arrays: tuple[np.ndarray, np.ndarray] | None
    source: str | None = None
    reason: str | None = None


def _eval_arrays(eval_data: object) -> tuple[np.ndarray, np.ndarray]:
    if not isinstance(eval_data, Sequence) or len(eval_data) != 2:
        raise ModelError("eval_data must be (inputs, labels): two arrays with one row per example, e.g. "
                         "(x_test, y_test)")
    x, y = np.asarray(eval_data[0], dtype="float32"), np.asarray(eval_data[1])
    if x.ndim < 1 or len(x) != len(y) or len(x) == 0:
        raise ModelError(f"eval_data has {len(x) if x.ndim else 0} input rows and {len(y)} labels; give the "
                         "same number, at least one")
    return x, y


def recorded_test_split(storage: Storage, project: str, datasets: Sequence[Mapping[str, Any]]) -> EvalData:
    """The `test` split of the table dataset the model's lineage names (the first, as `serving.monitor` takes
    it), as (features, labels); else no arrays and why."""
    from hopsml.data import dataset as ds
    from hopsml.data.manifest import open_manifest
    from hopsml.data.readers import ShardReader

    advice = "pass eval_data=(x_test, y_test) to record the accuracy change"
    if not datasets:
        return EvalData(None, reason="no eval_data was given and the model's lineage names no dataset it was trained "
                                     "on (export it from a run that read its dataset with hopsml's readers, or "
                                     f"{advice})")
    tables = [d for d in datasets if d.get("kind") in (None, "table")]
    if not tables:
        named = ", ".join(f"{d.get('name')} ({d.get('kind')})" for d in datasets)
        return EvalData(None, reason=f"the model was trained on {named}, not a table dataset prepared with "
                                     f"features and label, so there is no test split of model inputs to use; {advice}")
    name = str(tables[0].get("name"))
    try:
        ddir, manifest = open_manifest(storage, project, name)
    except ds.DatasetError as exc:
        return EvalData(None, reason=f"the model's training dataset {name!r} cannot be read ({exc}); {advice}")
    if TEST_SPLIT not in manifest.splits:
        return EvalData(None, reason=f"the model's training dataset {name!r} has no {TEST_SPLIT!r} split (it has "
                                     f"{', '.join(manifest.splits) or 'none'}): prepare it with test_fraction > 0, "
                                     f"or {advice}")
    fields = ["features", manifest.label_field or "label"]
    missing = [f for f in fields if f not in manifest.fields]
    if missing:
        return EvalData(None, reason=f"the model's training dataset {name!r} has no {' or '.join(missing)} field "
                                     f"(it has {', '.join(manifest.fields)}); {advice}")
    batches = list(ShardReader(storage, ddir, manifest, TEST_SPLIT, rank=0, world_size=1, batch_size=4096,
                               shuffle=False, seed=0, epochs=1, fields=fields, engine="arrow", drop_last=False,
                               device="cpu", pool="dummy"))
    if not batches or not sum(len(b[fields[1]]) for b in batches):
        return EvalData(None, reason=f"the {TEST_SPLIT!r} split of the model's training dataset {name!r} has no "
                                     f"rows; {advice}")
    x = np.concatenate([b[fields[0]] for b in batches]).astype("float32", copy=False)
    y = np.concatenate([b[fields[1]] for b in batches])
    return EvalData((x, y), source=f"split {TEST_SPLIT!r} of dataset {name!r} (the model's lineage)")


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


Model = Callable[[np.ndarray], np.ndarray]   # rows -> outputs
Outputs = tuple[Model, Model]                # the original model, the int8 one


def _torch_int8(src: str, dst: str) -> tuple[dict[str, Any], Outputs]:
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

    def run(module: Any) -> Model:
        def call(x: np.ndarray) -> np.ndarray:
            with torch.inference_mode():
                return module(torch.from_numpy(x)).numpy()
        return call

    return {"framework": "pytorch", "scheme": "dynamic int8 weights of Linear and LSTM layers "
                                              "(torch.ao.quantization.quantize_dynamic)"}, (run(model), run(quantized))


def _keras_int8(src: str, dst: str) -> tuple[dict[str, Any], Outputs]:
    import keras
    import tensorflow as tf

    model = keras.models.load_model(src, compile=False)
    converter = tf.lite.TFLiteConverter.from_keras_model(model)
    converter.optimizations = [tf.lite.Optimize.DEFAULT]  # no representative data: dynamic-range int8 weights
    with open(dst, "wb") as out:
        out.write(converter.convert())

    return {"framework": "keras", "scheme": "TFLite post-training dynamic-range quantization (int8 weights)"}, (
        lambda x: np.asarray(model(x, training=False)), lambda x: run_tflite(dst, x))


def _onnx_int8(src: str, dst: str) -> tuple[dict[str, Any], Outputs]:
    try:
        import onnxruntime
        from onnxruntime.quantization import QuantType, quantize_dynamic
    except ImportError:
        raise ModelError("int8 export of an ONNX model needs onnxruntime: pip install onnxruntime "
                         "(hopsml's onnx extra)") from None
    quantize_dynamic(src, dst, weight_type=QuantType.QInt8)

    def run(path: str) -> Model:
        session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
        name, output = session.get_inputs()[0].name, session.get_outputs()[0].name
        kind = {"tensor(float)": np.float32, "tensor(double)": np.float64}.get(session.get_inputs()[0].type)
        return lambda x: np.asarray(session.run([output], {name: x.astype(kind) if kind else x})[0])

    return {"framework": "onnx", "scheme": "onnxruntime dynamic quantization (int8 weights)"}, (run(src), run(dst))


def _latency_ms(model: Model, x: np.ndarray) -> float:
    """The median time of LATENCY_CALLS calls on `x`, after one untimed call."""
    import time

    model(x)
    times = []
    for _ in range(LATENCY_CALLS):
        began = time.perf_counter()
        model(x)
        times.append((time.perf_counter() - began) * 1000.0)
    return round(float(np.median(times)), 4)


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


def quantize_files(source: str, method: str = "int8", eval_data: object = None, *, source_ref: str | None = None,
                   test_split: Callable[[], EvalData] | None = None) -> Quantized:
    """A quantized copy of the model file (or the folder holding one) at `source`, in a new temporary folder.

    Both models are evaluated on `eval_data`, else on what `test_split()` gives (the model's recorded test
    split). Other files of a folder are copied beside it unchanged. The caller removes the folder."""
    check_method(method)
    given = eval_data is not None
    data = EvalData(_eval_arrays(eval_data), CALLER_DATA) if given else None
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
            how, outputs = _torch_int8(src, os.path.join(out, *rel.split("/")))
        elif rel.lower().endswith(ONNX_SUFFIXES):
            target_rel = rel
            how, outputs = _onnx_int8(src, os.path.join(out, *rel.split("/")))
        else:
            target_rel = (rel.rpartition("/")[0] + "/" if "/" in rel else "") + TFLITE_FILE
            how, outputs = _keras_int8(src, os.path.join(out, *target_rel.split("/")))
        before = os.path.getsize(src)
        after = os.path.getsize(os.path.join(out, *target_rel.split("/")))
        record: dict[str, Any] = {
            "method": method, **how, "source": {"file": rel, "size_bytes": before, "model": source_ref},
            "file": target_rel, "size_bytes": after, "size_ratio": round(after / before, 4) if before else None,
            "evaluation": None}
        if data is None:
            data = test_split() if test_split is not None else EvalData(
                None, reason="no eval_data was given; pass eval_data=(x_test, y_test) to record the accuracy change")
        if data.arrays is not None:
            x, labels = data.arrays
            original, int8 = outputs
            try:
                chunks = [x[start:start + EVAL_CHUNK] for start in range(0, len(x), EVAL_CHUNK)]
                before_out = np.concatenate([np.asarray(original(c)) for c in chunks])
                after_out = np.concatenate([np.asarray(int8(c)) for c in chunks])
                batch = x[:LATENCY_ROWS]
                record["latency_ms"] = {"rows": int(len(batch)), "before": _latency_ms(original, batch),
                                        "after": _latency_ms(int8, batch)}
            except Exception as exc:  # only for the recorded split: the caller's own data fails loudly
                if given:
                    raise
                data = EvalData(None, reason=f"the model cannot be called on the {data.source} ({type(exc).__name__}: "
                                             f"{exc}); pass eval_data=(x_test, y_test) in the model's input form")
            else:
                record["evaluation"] = _evaluation(before_out, after_out, labels, str(data.source))
        if record["evaluation"] is None:
            record["evaluation_skipped"] = data.reason
            log.info("the int8 model's accuracy change is not recorded: %s", data.reason)
        log.info("quantized %s to %s: %d -> %d bytes", rel, method, before, after)
        return Quantized(out, record)
    except BaseException:
        shutil.rmtree(out, ignore_errors=True)
        raise
