"""Model loaders: a registry version's files -> a `Servable` that turns request inputs into predictions.

Which loader is chosen by the files (or by a predictor script, which then does everything itself):
scikit-learn and other pickled models (`.joblib`, `.pkl`, `.pickle`), PyTorch (`.pt`, `.pth`: TorchScript,
else a pickled `nn.Module`, int8 ones included), Keras (`.keras`), TFLite (`.tflite`, as int8 export writes it
for Keras), ONNX (`.onnx`, run by onnxruntime: what skl2onnx, torch.onnx and onnxmltools write), a TensorFlow
SavedModel folder, hops-style predictor scripts
(a `Predict` class with `predict(self, inputs)`) and transformer scripts (a `Transformer` with
`preprocess(self, inputs)` and `postprocess(self, outputs)`).
Frameworks are imported by the loader that needs them, in the serving's instance process only.
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from hopsml import layout
from hopsml.serving.definition import ServingError

log = logging.getLogger(__name__)

PICKLE_SUFFIXES = (".joblib", ".pkl", ".pickle")
TORCH_SUFFIXES = (".pt", ".pth")
KERAS_SUFFIXES = (".keras", ".h5")
ONNX_SUFFIXES = (".onnx",)
TFLITE_SUFFIXES = (".tflite",)
SAVED_MODEL = "saved_model.pb"
_NOT_MODEL_FILES = {layout.MODEL_RECORD, layout.MODEL_DONE}


class RequestError(ServingError):
    """The request is at fault (4xx): `status` is the HTTP status, the message names the problem."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


class Servable:
    """A loaded model: `predict(inputs)` takes the decoded request inputs (a list of rows) and returns
    one prediction per row; `input_shape` is the shape of one row where the model tells it."""

    kind = "model"
    input_shape: tuple[int | None, ...] | None = None
    input_dtype: str = "float32"
    feature_names: list[str] | None = None

    def prepare(self, inputs: object) -> Any:
        """The request's inputs checked and converted for `call` (a 4xx RequestError if they cannot be)."""
        return self.rows(inputs)

    def call(self, prepared: object) -> Any:
        """The model on prepared inputs: one prediction per row."""
        raise NotImplementedError

    def predict(self, inputs: object) -> Any:
        return self.call(self.prepare(inputs))

    def on_thread(self) -> None:
        """Called first on a thread that will call the model (batching's model thread): per-thread settings."""

    def signature(self) -> dict[str, Any]:
        """TF Serving's signature_def shape, as far as it is known."""
        dims = [-1] + [-1 if d is None else int(d) for d in (self.input_shape or ())]
        tensor = {"dtype": "DT_" + self.input_dtype.upper(), "tensor_shape": {"dim": [{"size": str(d)} for d in dims],
                                                                              "unknown_rank": self.input_shape is None}}
        return {"serving_default": {"inputs": {"inputs": tensor}, "method_name": "tensorflow/serving/predict",
                                    "kind": self.kind}}

    # --- shared input handling ----------------------------------------------------------------------
    def rows(self, inputs: Any) -> Any:
        """Named-feature rows ({"a": 1, "b": 2}) in the model's feature order; other inputs as they are."""
        named = isinstance(inputs, list) and inputs and isinstance(inputs[0], dict)   # the first row tells, cheaply
        if named and all(isinstance(r, dict) for r in inputs):
            if not self.feature_names:
                raise RequestError("instances are objects with named values, but this model takes unnamed rows; "
                                   "send lists of numbers, e.g. {\"instances\": [[1.0, 2.0]]}")
            missing = sorted({n for r in inputs for n in self.feature_names if n not in r})
            if missing:
                raise RequestError(f"instances lack the feature(s) {', '.join(missing)}; the model takes "
                                   f"{', '.join(self.feature_names)}")
            return [[r[n] for n in self.feature_names] for r in inputs]
        return inputs

    def array(self, inputs: object, dtype: str) -> np.ndarray:
        """The inputs as one numeric array with the model's row shape, else a 400 naming the problem."""
        inputs = self.rows(inputs)
        try:
            arr = np.asarray(inputs, dtype=dtype)
        except (ValueError, TypeError) as exc:
            raise RequestError(f"inputs cannot be read as one {dtype} array ({exc}): send numbers, in rows of "
                               "equal length") from None
        if arr.ndim == 0:
            raise RequestError("inputs is a single number; send a list of rows, e.g. [[1.0, 2.0]]")
        got = arr.shape[1:]
        if self.input_shape is not None and got != self.input_shape:   # one comparison for the usual case
            want = tuple(self.input_shape)
            if len(got) != len(want) or any(w is not None and w != g for w, g in zip(want, got)):
                shown = "x".join("?" if w is None else str(w) for w in want) or "a scalar"
                raise RequestError(f"each row must have shape {shown} (the model's input), but rows have shape "
                                   f"{'x'.join(map(str, got)) or 'a scalar'}")
        return arr


def to_json_ready(value: Any) -> Any:
    """numpy and torch values -> lists and numbers that json can write."""
    if hasattr(value, "detach") and hasattr(value, "cpu"):  # a torch tensor
        value = value.detach().cpu().numpy()
    elif not isinstance(value, np.ndarray) and callable(getattr(value, "numpy", None)):  # a TensorFlow tensor
        value = value.numpy()
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, dict):
        return {str(k): to_json_ready(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_json_ready(v) for v in value]
    return value


class PickledModel(Servable):
    """A scikit-learn estimator (or anything with `predict`) saved with joblib or pickle."""

    kind = "sklearn"
    input_dtype = "float64"

    def __init__(self, path: str) -> None:
        try:
            import joblib

            self.model = joblib.load(path)
        except ImportError:  # joblib comes with scikit-learn; plain pickles load without it
            import pickle

            with open(path, "rb") as stream:
                self.model = pickle.load(stream)  # the project's own registry, as joblib would
        if not callable(getattr(self.model, "predict", None)):
            raise ServingError(f"{os.path.basename(path)} holds a {type(self.model).__name__}, which has no "
                               "predict method; export the fitted estimator, or serve it with a predictor script")
        n = getattr(self.model, "n_features_in_", None)
        self.input_shape = (int(n),) if isinstance(n, (int, np.integer)) else None
        names = getattr(self.model, "feature_names_in_", None)
        self.feature_names = [str(x) for x in names] if names is not None else None

    def prepare(self, inputs: object) -> np.ndarray:
        return self.array(inputs, self.input_dtype)

    def call(self, prepared: object) -> Any:
        return self.model.predict(prepared)


class TorchModel(Servable):
    """A PyTorch model: TorchScript (`torch.jit.save`), else a pickled `nn.Module` (`torch.save(model)`)."""

    kind = "pytorch"

    def __init__(self, path: str, threads: int) -> None:
        import torch

        self.threads = max(1, threads)
        torch.set_num_threads(self.threads)
        self.torch = torch
        try:
            self.model = torch.jit.load(path, map_location="cpu")
        except RuntimeError:
            self.model = torch.load(path, map_location="cpu", weights_only=False)
        if isinstance(self.model, dict):
            raise ServingError(f"{os.path.basename(path)} holds a state_dict, not a model: export "
                               "torch.jit.script(model) (saved with torch.jit.save), or torch.save(model), or serve "
                               "it with a predictor script that builds the model")
        if not callable(self.model):
            raise ServingError(f"{os.path.basename(path)} holds a {type(self.model).__name__}, not a torch model")
        self.model.eval()
        self.input_shape = self._first_linear()

    def _first_linear(self) -> tuple[int | None, ...] | None:
        """(in_features,) when the model begins with a Linear layer, else None (unknown)."""
        for module in self.model.modules():
            name = getattr(module, "original_name", type(module).__name__)
            if name == "Linear" and "quantized" in type(module).__module__:  # int8 export: weights packed
                return (int(module.in_features),)
            children = list(module.children())
            if children:
                continue
            if name == "Linear":
                weight = dict(module.named_parameters()).get("weight")
                return (int(weight.shape[1]),) if weight is not None and weight.dim() == 2 else None
            if list(module.parameters()):
                return None  # the first layer with weights is not a Linear: its input shape is not known here
        return None

    def prepare(self, inputs: object) -> np.ndarray:
        return self.array(inputs, self.input_dtype)

    def on_thread(self) -> None:
        # OpenMP's thread count is per calling thread: a new thread would use every core, and on a busy
        # host its spinning workers cost the batched MLP 59 ms at one client instead of 1.7 ms
        self.torch.set_num_threads(self.threads)

    def call(self, prepared: object) -> Any:
        with self.torch.inference_mode():
            return self.model(self.torch.from_numpy(prepared))


class KerasModel(Servable):
    """A Keras model file (`.keras`, or `.h5` where the Keras version reads it), called in inference mode."""

    kind = "keras"

    def __init__(self, path: str) -> None:
        import keras

        self.model = keras.models.load_model(path, compile=False)
        shape = getattr(self.model, "input_shape", None)
        if isinstance(shape, tuple) and shape and all(d is None or isinstance(d, int) for d in shape):
            self.input_shape = tuple(shape[1:])

    def prepare(self, inputs: object) -> np.ndarray:
        return self.array(inputs, self.input_dtype)

    def call(self, prepared: object) -> Any:
        return self.model(prepared, training=False)


class TFLiteModel(Servable):
    """A TFLite flatbuffer (int8 export of a Keras model), run by one interpreter, one call at a time."""

    kind = "tflite"

    def __init__(self, path: str, threads: int) -> None:
        import threading

        from hopsml.model.quantize import tflite_interpreter

        self.interpreter = tflite_interpreter(path, threads)
        self.lock = threading.Lock()  # an interpreter is not thread-safe
        details = self.interpreter.get_input_details()
        if len(details) != 1:
            raise ServingError(f"{os.path.basename(path)} takes {len(details)} inputs; this server feeds one: serve "
                               "it with a predictor script")
        self.input_index = int(details[0]["index"])
        self.input_dtype = np.dtype(details[0]["dtype"]).name
        dims = [int(d) for d in details[0].get("shape_signature", details[0]["shape"])]
        self.input_shape = tuple(None if d < 0 else d for d in dims[1:])
        self.output_index = int(self.interpreter.get_output_details()[0]["index"])
        self.shape: tuple[int, ...] | None = None

    def prepare(self, inputs: object) -> np.ndarray:
        return self.array(inputs, self.input_dtype)

    def call(self, prepared: Any) -> Any:
        with self.lock:
            if self.shape != prepared.shape:
                self.interpreter.resize_tensor_input(self.input_index, list(prepared.shape))
                self.interpreter.allocate_tensors()
                self.shape = prepared.shape
            self.interpreter.set_tensor(self.input_index, np.ascontiguousarray(prepared))
            self.interpreter.invoke()
            return np.array(self.interpreter.get_tensor(self.output_index))


class OnnxModel(Servable):
    """An ONNX graph run by onnxruntime, its first output answered (a classifier's labels, as skl2onnx and
    onnxmltools write them; a regressor's or a network's values). One input takes the rows (as the input's
    element type); several inputs of one value each (onnxmltools' Spark ML pipelines: a column each) take a row's
    values in their order, or a row of named values."""

    kind = "onnx"
    _TYPES = {"tensor(float)": "float32", "tensor(double)": "float64", "tensor(int64)": "int64",
              "tensor(int32)": "int32", "tensor(float16)": "float16", "tensor(bool)": "bool",
              "tensor(string)": "object"}

    def __init__(self, path: str, threads: int) -> None:
        try:
            import onnxruntime
        except ImportError:
            raise ServingError(f"{os.path.basename(path)} is an ONNX model: install onnxruntime to serve it "
                               "(pip install onnxruntime, hopsml's onnx extra)") from None
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        self.session = onnxruntime.InferenceSession(path, options, providers=["CPUExecutionProvider"])
        inputs = self.session.get_inputs()
        self.columns = [(i.name, self._TYPES.get(i.type, "float32")) for i in inputs]
        if len(inputs) == 1:
            self.input_dtype = self.columns[0][1]
            self.input_shape = tuple(d if isinstance(d, int) and d > 0 else None for d in list(inputs[0].shape)[1:])
        else:
            odd = [i.name for i in inputs if list(i.shape)[1:] not in ([1], [None], ["None"])]
            if odd:
                raise ServingError(f"{os.path.basename(path)} takes {len(inputs)} inputs, and {', '.join(odd)} "
                                   "hold more than one value per row: serve it with a predictor script")
            self.feature_names = [name for name, _ in self.columns]
            self.input_shape = (len(inputs),)
            self.input_dtype = "float32" if all(t != "object" for _, t in self.columns) else "object"
        self.output_name = self.session.get_outputs()[0].name

    def prepare(self, inputs: object) -> Any:
        if len(self.columns) == 1:
            return {self.columns[0][0]: self.array(inputs, self.columns[0][1])}
        rows = self.rows(inputs)
        width = len(self.columns)
        if not isinstance(rows, list) or any(not isinstance(r, list) or len(r) != width for r in rows):
            raise RequestError(f"each row must have shape {width} (the model's inputs: "
                               f"{', '.join(self.feature_names or [])}), or name them")
        try:
            return {name: np.asarray([[r[j]] for r in rows], dtype=kind) for j, (name, kind) in enumerate(self.columns)}
        except (ValueError, TypeError) as exc:
            raise RequestError(f"rows cannot be read as the model's inputs ({exc})") from None

    def call(self, prepared: object) -> Any:
        return self.session.run([self.output_name], prepared)[0]


class SavedModel(Servable):
    """A TensorFlow SavedModel folder, called through its `serving_default` signature (as TF Serving does)."""

    kind = "tensorflow"

    def __init__(self, path: str) -> None:
        import tensorflow as tf

        self.tf = tf
        self.loaded = tf.saved_model.load(path)
        self.function = self.loaded.signatures.get("serving_default")
        if self.function is None:
            raise ServingError(f"the SavedModel in {path} has no 'serving_default' signature; export it with "
                               "model.export(path) (Keras) or tf.saved_model.save(model, path, signatures=...)")
        _, specs = self.function.structured_input_signature
        if len(specs) != 1:
            raise ServingError(f"the SavedModel in {path} takes {len(specs)} inputs ({', '.join(sorted(specs))}); "
                               "this server feeds one: serve it with a predictor script")
        self.input_name, spec = next(iter(specs.items()))
        self.input_dtype = spec.dtype.name
        dims = spec.shape.as_list() if spec.shape.rank is not None else None
        self.input_shape = tuple(dims[1:]) if dims else None

    def prepare(self, inputs: object) -> np.ndarray:
        return self.array(inputs, self.input_dtype)

    def call(self, prepared: object) -> Any:
        outputs = self.function(**{self.input_name: self.tf.constant(prepared)})
        return next(iter(outputs.values())) if len(outputs) == 1 else dict(outputs)


def _load_script(path: str, attr: str, what: str) -> Any:
    """Import a script and return its class `attr`, or a ServingError that says what the script needs."""
    if not os.path.isfile(path):
        raise ServingError(f"the {what} script {path} does not exist")
    module_name = f"hopsml_serving_{what}_{os.getpid()}"
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise ServingError(f"the {what} script {path} cannot be loaded as a Python module (is it a .py file?)")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    with _no_exit(path, what, "importing it"):
        spec.loader.exec_module(module)
    cls = getattr(module, attr, None)
    if not isinstance(cls, type):
        raise ServingError(f"the {what} script {path} defines no class {attr}; hops' {what} scripts define "
                           f"`class {attr}` "
                           f"({'predict(self, inputs)' if attr == 'Predict' else 'preprocess/postprocess'})")
    arguments = _init_arguments(cls, path, what)
    with _no_exit(path, what, f"making its {attr}"):
        return cls(**arguments)


@contextlib.contextmanager
def _no_exit(path: str, what: str, doing: str) -> Iterator[None]:
    """A script (or a library it imports) that ends the process while it loads fails the load with a reason, instead
    of an instance that exits (with code 0, if it was sys.exit(0)) and leaves the serving nothing to say why."""
    try:
        yield
    except SystemExit as exc:
        raise ServingError(f"the {what} script {path} ended the process (SystemExit({exc.code!r})) while "
                           f"{doing}; see the lines before this in the serving's log for what called exit") from None


@dataclass
class ServedModel:
    """The model version a script serves, as hsml's serving hands it to `__init__(self, model)`: its name, version
    and the folder of its files (`model_files_path`, also MODEL_FILES_PATH)."""

    name: str | None
    version: int | None
    model_path: str
    model_files_path: str
    record: Any = None   # the registry's ModelVersion, when the folder holds its record

    @property
    def version_path(self) -> str:
        return self.model_files_path

    def _hsml(self) -> dict[str, Any]:
        """What hsml recorded of the version beyond hopsml's record (its feature view, training dataset version),
        read in the project's registry: a served copy of a remote root's version holds only the model's files."""
        from hopsml import config
        from hopsml.fs import Storage

        if self.name is None or self.version is None:
            return {}
        settings = config.load()
        storage = Storage(settings.root)
        path = layout.join(layout.model_dir(settings.project, self.name, int(self.version)), layout.HSML_RECORD)
        return dict(storage.read_json(path)) if storage.exists(path) else {}

    @property
    def training_dataset_version(self) -> int | None:
        return self._hsml().get("training_dataset_version")

    def get_feature_view(self, init: bool = True, online: bool = False) -> Any:
        """hsml's Model.get_feature_view as a deployment calls it: the feature view the version was saved with
        (`feature_view=`), initialised for serving with its training dataset version (hsml always initialises for
        serving inside a deployment, whatever `online` says); None when it was saved without one."""
        from hopsml import config
        from hopsml.featurestore.store import FeatureStore

        recorded = self._hsml()
        linked = recorded.get("feature_view")
        if not linked:
            return None
        view = FeatureStore(config.load()).get_feature_view(linked["name"], int(linked["version"]))
        if init:
            view.init_serving(recorded.get("training_dataset_version"))
        return view


def _init_arguments(cls: type, path: str, what: str) -> dict[str, Any]:
    """What hsml's model server passes a script's class: nothing to `__init__(self)`; `model` (the served version)
    and `async_logger` (hsfs's feature logger, None here: hopsml's serving keeps the inference log itself) to the
    forms that name them, `__init__(self, model)` and `__init__(self, async_logger, model)`."""
    import inspect

    try:
        parameters = list(inspect.signature(cls).parameters.values())   # what cls(...) takes
    except (TypeError, ValueError):
        return {}
    given: dict[str, Any] = {}
    for parameter in parameters:
        if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            continue
        if parameter.name == "model":
            given["model"] = served_model(os.environ.get("MODEL_FILES_PATH", ""))
        elif parameter.name == "async_logger":
            given["async_logger"] = None
        elif parameter.default is parameter.empty:
            raise ServingError(f"the {what} script {path}: {cls.__name__}.__init__ asks for {parameter.name!r}; hsml's "
                               "model server passes `model` and `async_logger` (or nothing: __init__(self))")
        if parameter.kind is parameter.POSITIONAL_ONLY and parameter.name in given:
            raise ServingError(f"the {what} script {path}: {cls.__name__}.__init__ takes {parameter.name!r} "
                               "positionally only; name it as a plain parameter")
    return given


def served_model(model_dir: str) -> ServedModel:
    """The version in `model_dir` as `__init__(self, model)` receives it (its record read when it has one)."""
    from hopsml.model.registry import local_record

    record = local_record(model_dir) if model_dir and os.path.isdir(model_dir) else None
    return ServedModel(record.name if record else None, record.version if record else None, model_dir, model_dir,
                       record)


class PredictorScript(Servable):
    """hops' predictor script: `Predict().predict(inputs)` gets the instances as the request sent them."""

    kind = "predictor"

    def __init__(self, path: str) -> None:
        self.predictor = _load_script(path, "Predict", "predictor")
        if not callable(getattr(self.predictor, "predict", None)):
            raise ServingError(f"the predictor script {path}: class Predict has no method predict(self, inputs)")

    def call(self, prepared: object) -> Any:
        return self.predictor.predict(prepared)


@dataclass
class Transformer:
    """hops' transformer script: `preprocess` sees the request body, `postprocess` the response body."""

    instance: Any

    @classmethod
    def load(cls, path: str) -> Transformer:
        instance = _load_script(path, "Transformer", "transformer")
        for method in ("preprocess", "postprocess"):
            if not callable(getattr(instance, method, None)):
                raise ServingError(f"the transformer script {path}: class Transformer has no method {method}")
        return cls(instance)

    def preprocess(self, body: dict[str, Any]) -> dict[str, Any]:
        out = self.instance.preprocess(body)
        return body if out is None else out

    def postprocess(self, body: dict[str, Any]) -> dict[str, Any]:
        out = self.instance.postprocess(body)
        return body if out is None else out


def model_files(model_dir: str) -> list[str]:
    """The version folder's files, '/'-separated, without the registry's own."""
    found = []
    for folder, _, files in os.walk(model_dir):
        for name in files:
            rel = os.path.relpath(os.path.join(folder, name), model_dir).replace(os.sep, "/")
            if rel not in _NOT_MODEL_FILES:
                found.append(rel)
    return sorted(found)


def detect(model_dir: str) -> tuple[str, str]:
    """(kind, file or folder) of the one model in `model_dir`, or a ServingError naming what is there."""
    files = model_files(model_dir)
    saved = [f.rpartition("/")[0] or "." for f in files if f.rpartition("/")[2] == SAVED_MODEL]
    candidates = [("tensorflow", folder) for folder in saved]
    candidates += [(kind, f) for f in files for kind, suffixes in (("sklearn", PICKLE_SUFFIXES),
                                                                    ("pytorch", TORCH_SUFFIXES),
                                                                    ("keras", KERAS_SUFFIXES),
                                                                    ("tflite", TFLITE_SUFFIXES),
                                                                    ("onnx", ONNX_SUFFIXES))
                   if f.lower().endswith(suffixes) and not any(f.startswith(d + "/") for d in saved if d != ".")]
    if len(candidates) == 1:
        return candidates[0]
    if not candidates:
        raise ServingError(f"no servable model file in {model_dir} (files: {', '.join(files) or 'none'}); export a "
                           f"scikit-learn or pickled model ({', '.join(PICKLE_SUFFIXES)}), a PyTorch model "
                           f"({', '.join(TORCH_SUFFIXES)}), a Keras model ({', '.join(KERAS_SUFFIXES)}), "
                           "an ONNX model (.onnx), a TFLite file or a "
                           "TensorFlow SavedModel folder, or pass predictor='<script>.py' with a Predict class")
    raise ServingError(f"{model_dir} holds several model files ({', '.join(f for _, f in candidates)}); pass "
                       "predictor='<script>.py' with a Predict class that loads the one to serve")


def load(model_dir: str, predictor: str | None = None, threads: int = 1) -> Servable:
    """The servable for a version folder: the predictor script when one is given, else by its files."""
    os.environ["MODEL_FILES_PATH"] = model_dir  # where hops' scripts find the model's files
    os.environ["ARTIFACT_FILES_PATH"] = model_dir
    if predictor is not None:
        return PredictorScript(predictor)
    kind, rel = detect(model_dir)
    path = os.path.join(model_dir, *rel.split("/"))
    log.info("loading %s model %s", kind, path)
    if kind == "pytorch":
        return TorchModel(path, threads)
    if kind == "tflite":
        return TFLiteModel(path, threads)
    if kind == "onnx":
        return OnnxModel(path, threads)
    if kind in ("keras", "tensorflow"):
        _tensorflow_threads(threads)
        return KerasModel(path) if kind == "keras" else SavedModel(os.path.normpath(path))
    return PickledModel(path)


def _tensorflow_threads(threads: int) -> None:
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(threads)
    tf.config.threading.set_inter_op_parallelism_threads(threads)
