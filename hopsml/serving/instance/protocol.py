"""The REST protocol of TensorFlow Serving (which KServe v1 shares) and KServe's v2 (the Open Inference
Protocol), as the handler of hopsml's HTTP server (`http_server`): no web framework, so a request costs
little more than its JSON and the model's call.

    GET  /v1/models/<name>[/versions/<v>]            model status
    GET  /v1/models/<name>[/versions/<v>]/metadata   model spec and signature
    POST /v1/models/<name>[/versions/<v>]:predict     {"instances": rows} -> {"predictions": ...}
                                                      {"inputs": columns} -> {"outputs": ...}
    GET  /v2/health/live, /v2/health/ready           {"live": true}, {"ready": true}
    GET  /v2, /v2/models/<name>[/versions/<v>]       server and model metadata (inputs, outputs, versions)
    GET  /v2/models/<name>[/versions/<v>]/ready       {"name": ..., "ready": true}
    POST /v2/models/<name>[/versions/<v>]/infer       {"inputs": [{"name", "shape", "datatype", "data"}]}
                                                      (or a JSON head and raw tensor bytes: the binary extension)
                                                      -> {"model_name", "model_version", "outputs": [...]}

Failures answer {"error": "..."}: 4xx for what the client sent (malformed JSON, wrong shape or dtype,
an unknown model or version, a wrong method, JSON nested deeper than 1024 levels, NaN or Infinity that the
model refuses; the server itself answers 413 for a body over the limit and 400 for what is not HTTP), 500 when
the model raises (logged with its traceback, once per kind of failure a minute: `repeats`). The app keeps
serving after each.
"""

from __future__ import annotations

import json
import logging
import random
from typing import TYPE_CHECKING, Any

import numpy as np
import orjson

from hopsml.serving.instance.http_server import Answer, BinaryBody, Request
from hopsml.serving.instance.inference_log import record
from hopsml.serving.instance.loaders import RequestError, Servable, Transformer, to_json_ready
from hopsml.serving.instance.repeats import RepeatedFailures
from hopsml.serving.instance.v2_binary import NUMPY_V2, V2_TYPES, binary_inputs

if TYPE_CHECKING:
    from hopsml.serving.instance.batching import Batcher

log = logging.getLogger(__name__)

PREFIX = "/v1/models/"
V2 = "/v2"
V2_MODELS = "/v2/models/"
MAX_JSON_DEPTH = 1024   # orjson's limit; the json module, which reads NaN, is held to it too


class ModelApp:
    """One served model version behind TF Serving's REST paths."""

    def __init__(self, name: str, version: int, servable: Servable, transformer: Transformer | None = None,
                 batcher: Batcher | None = None) -> None:
        self.name = name
        self.version = version
        self.servable = servable
        self.transformer = transformer
        self.batcher = batcher
        # the paths nearly every request takes, known without parsing
        self.predict_paths = {f"{PREFIX}{name}:predict", f"{PREFIX}{name}/versions/{version}:predict"}
        self.failures = RepeatedFailures(log)

    async def handle(self, request: Request) -> Answer:
        """The answer to one request: its status and JSON body."""
        try:
            status, body = await self._answer(request)
        except RequestError as exc:
            status, body = exc.status, {"error": str(exc)}
        except NonFiniteRefused as exc:
            status, body = 400, {"error": str(exc)}
        except Exception as exc:  # noqa: BLE001  # the model's failure: answered, logged once per kind
            self.failures.exception("serving %s: %s %s failed", exc, self.name, request.method, request.path)
            status, body = 500, {"error": f"the model raised {type(exc).__name__}: {exc}"}
        if type(body) is BinaryBody:
            return status, body
        try:
            return status, _dumps(body)
        except TypeError as exc:   # what the model (or the transformer) returned is not JSON
            log.exception("serving %s: the answer to %s %s cannot be written", self.name, request.method, request.path)
            return 500, _dumps({"error": f"the model's answer cannot be written as JSON: {exc}"})

    async def _answer(self, request: Request) -> tuple[int, Any]:
        path, method = request.path, request.method
        if path in self.predict_paths and method == "POST":
            return 200, await self._predict(request)
        if path == V2 or path.startswith(V2 + "/"):
            return 200, await self._v2(request)
        if not path.startswith(PREFIX):
            raise RequestError(f"no such path {path!r}: this server answers {PREFIX}{self.name}[:predict|/metadata]",
                               404)
        rest, verb = path[len(PREFIX):], ""
        if ":" in rest.rsplit("/", 1)[-1]:
            rest, _, verb = rest.rpartition(":")
        parts = rest.split("/")
        self._check_model(parts[0])
        tail = parts[1:]
        if len(tail) >= 2 and tail[0] == "versions":
            self._check_version(tail[1])
            tail = tail[2:]
        if verb:
            if tail:
                raise RequestError(f"no such path {path!r}", 404)
            if verb != "predict":
                raise RequestError(f"':{verb}' is not served here: send ':predict' (this server runs the model's "
                                   "predict; TF Serving's classify and regress need a TensorFlow signature)", 400)
            if method != "POST":
                raise RequestError(f"{method} {path}: predict takes POST with a JSON body", 405)
            return 200, await self._predict(request)
        if method != "GET":
            raise RequestError(f"{method} {path}: model status and metadata take GET; predictions take "
                               f"POST {PREFIX}{self.name}:predict", 405)
        if not tail:
            return 200, self._status()
        if tail == ["metadata"]:
            return 200, self._metadata()
        raise RequestError(f"no such path {path!r}: try {PREFIX}{self.name}/metadata", 404)

    def _check_model(self, name: str) -> None:
        if name != self.name:
            raise RequestError(f"no model {name!r} is served here (this server serves {self.name!r}, version "
                               f"{self.version})", 404)

    def _check_version(self, text: str) -> None:
        if text != str(self.version):
            raise RequestError(f"model {self.name!r} has no version {text!r} served here (it serves version "
                               f"{self.version})", 404)

    def _status(self) -> dict[str, Any]:
        return {"model_version_status": [{"version": str(self.version), "state": "AVAILABLE",
                                          "status": {"error_code": "OK", "error_message": ""}}]}

    def _metadata(self) -> dict[str, Any]:
        return {"model_spec": {"name": self.name, "signature_name": "", "version": str(self.version)},
                "metadata": {"signature_def": {"signature_def": self.servable.signature()}}}

    def _json_body(self, request: Request, example: str) -> dict[str, Any]:
        raw = request.body if request.json_length < 0 else request.body[:request.json_length]
        try:
            body = _loads(raw)
        except RecursionError:
            raise RequestError(f"the body's JSON is nested deeper than {MAX_JSON_DEPTH} levels; send e.g. "
                               f"{example}") from None
        except (ValueError, UnicodeDecodeError) as exc:
            raise RequestError(f"the body is not valid JSON ({exc}); send e.g. {example}") from None
        if not isinstance(body, dict):
            raise RequestError(f"the body is a JSON {type(body).__name__}; send an object, e.g. {example}")
        return body

    async def _predict(self, request: Request) -> Any:
        body = self._json_body(request, '{"instances": [[1.0, 2.0]]} (rows) or {"inputs": ...} (columns)')
        if self.transformer is not None:
            body = self.transformer.preprocess(body)
        has_rows, has_columns = "instances" in body, "inputs" in body
        if has_rows == has_columns:
            raise RequestError("send exactly one of \"instances\" (a list of rows) and \"inputs\" (columns), "
                               f"got {'both' if has_rows else 'neither'}")
        inputs = body["instances"] if has_rows else self._columns(body["inputs"])
        if has_rows and not isinstance(inputs, list):
            raise RequestError(f"\"instances\" must be a list of rows, not a JSON {type(inputs).__name__}")
        if isinstance(inputs, list):
            record(rows=len(inputs))
        try:
            if self.batcher is not None:
                result = await self.batcher.predict(inputs)  # JSON-ready already, made so on the model thread
            else:
                result = to_json_ready(self.servable.predict(inputs))
        except Exception as exc:
            _refuse_non_finite(request.body, exc)
            raise
        answer = {"predictions" if has_rows else "outputs": result}
        if self.transformer is not None:
            answer = self.transformer.postprocess(answer)
        return answer

    # --- KServe v2 ---------------------------------------------------------------------------------------
    async def _v2(self, request: Request) -> Any:
        path, method = request.path, request.method
        parts = [p for p in path[len(V2):].split("/") if p]
        if parts in ([], ["health", "live"], ["health", "ready"]):
            if method != "GET":
                raise RequestError(f"{method} {path}: health and server metadata take GET", 405)
            if not parts:
                from hopsml import __version__

                return {"name": "hopsml", "version": __version__, "extensions": []}
            return {parts[1]: True}
        if parts[0] != "models" or len(parts) < 2:
            raise RequestError(f"no such path {path!r}: this server answers {V2_MODELS}{self.name}[/infer|/ready], "
                               f"{V2}/health/live and {V2}/health/ready", 404)
        self._check_model(parts[1])
        tail = parts[2:]
        if len(tail) >= 2 and tail[0] == "versions":
            self._check_version(tail[1])
            tail = tail[2:]
        if tail == ["infer"]:
            if method != "POST":
                raise RequestError(f"{method} {path}: infer takes POST with a JSON body", 405)
            return await self._v2_infer(request)
        if tail not in ([], ["ready"]):
            raise RequestError(f"no such path {path!r}: try {V2_MODELS}{self.name}/infer", 404)
        if method != "GET":
            raise RequestError(f"{method} {path}: model metadata and readiness take GET; inference takes "
                               f"POST {V2_MODELS}{self.name}/infer", 405)
        if tail == ["ready"]:
            return {"name": self.name, "ready": True}
        shape = [-1] + [-1 if d is None else int(d) for d in (self.servable.input_shape or ())]
        return {"name": self.name, "versions": [str(self.version)], "platform": self.servable.kind,
                "inputs": [{"name": "input-0", "datatype": NUMPY_V2.get(self.servable.input_dtype, "FP32"),
                            "shape": shape}],
                "outputs": [{"name": "output-0", "datatype": NUMPY_V2.get(self.servable.input_dtype, "FP32"),
                             "shape": [-1]}]}

    async def _v2_infer(self, request: Request) -> Any:
        example = '{"inputs": [{"name": "input-0", "shape": [1, 4], "datatype": "FP32", "data": [1, 2, 3, 4]}]}'
        if request.json_length < -1 or request.json_length > len(request.body):
            raise RequestError("the Inference-Header-Content-Length header must be the byte length of the body's JSON "
                               f"head (at most the body's {len(request.body)} bytes)")
        body = self._json_body(request, example)
        tensors = body.get("inputs")
        if request.json_length >= 0 and isinstance(tensors, list):
            binary_inputs(tensors, memoryview(request.body)[request.json_length:])
        if self.transformer is not None:
            body = self.transformer.preprocess(body)
            tensors = body.get("inputs")
        if not isinstance(tensors, list) or not tensors or not all(isinstance(t, dict) for t in tensors):
            raise RequestError(f"\"inputs\" must be a list of tensors, each {{\"name\", \"shape\", \"datatype\", "
                               f"\"data\"}}; send e.g. {example}")
        arrays = {str(t.get("name", f"input-{i}")): _v2_tensor(t) for i, t in enumerate(tensors)}
        inputs: Any
        if len(arrays) == 1:
            inputs = next(iter(arrays.values()))
        else:
            inputs = self._columns({k: v.reshape(len(v), -1)[:, 0].tolist() if v.ndim else v.tolist()
                                    for k, v in arrays.items()})
        rows = inputs.tolist() if isinstance(inputs, np.ndarray) else inputs  # as v1 passes them (scripts get lists)
        if isinstance(rows, list):   # the log keeps the rows the model got, so the monitor reads v2 as v1
            record(rows=len(rows), inputs={"instances": rows})
        try:
            result = await self.batcher.predict(rows) if self.batcher is not None else self.servable.predict(rows)
        except Exception as exc:
            _refuse_non_finite(request.body, exc)
            raise
        outputs = result.items() if isinstance(result, dict) else [("output-0", result)]
        answer: dict[str, Any] = {"model_name": self.name, "model_version": str(self.version),
                                  "outputs": [self._v2_output(str(k), v) for k, v in outputs]}
        if "id" in body:
            answer["id"] = body["id"]
        if self.transformer is not None:
            answer = self.transformer.postprocess(answer)
        return _binary_outputs(answer, body)

    def _v2_output(self, name: str, value: object) -> dict[str, Any]:
        """One v2 output tensor: its shape, type and row-major data."""
        if hasattr(value, "detach") or (not isinstance(value, (list, np.ndarray)) and hasattr(value, "numpy")):
            value = to_json_ready(value)
        array = np.asarray(value)
        if array.dtype.kind == "f" and not isinstance(value, np.ndarray):  # JSON-ready floats: the model's type
            datatype = "FP64" if self.servable.input_dtype == "float64" else "FP32"
        else:
            datatype = NUMPY_V2.get(array.dtype.name, "BYTES")
        data = array.ravel().tolist() if array.dtype.kind != "U" else [str(v) for v in array.ravel()]
        return {"name": name, "shape": list(array.shape), "datatype": datatype, "data": data}

    def _columns(self, inputs: object) -> Any:
        """TF Serving's columnar form: one tensor, or named tensors in the model's feature order."""
        if not isinstance(inputs, dict):
            return inputs
        if len(inputs) == 1:
            return next(iter(inputs.values()))
        names = self.servable.feature_names
        if not names:
            raise RequestError(f"\"inputs\" names {len(inputs)} tensors ({', '.join(map(str, inputs))}), but this "
                               "model takes one: send \"inputs\": [[...], ...]")
        missing = [n for n in names if n not in inputs]
        if missing:
            raise RequestError(f"\"inputs\" lacks {', '.join(missing)}; the model takes {', '.join(names)}")
        columns = [inputs[n] for n in names]
        if any(not isinstance(c, list) or len(c) != len(columns[0]) for c in columns):
            raise RequestError("each named input must be a list with one value per row, all of the same length")
        return [list(row) for row in zip(*columns)]


class VersionRouter:
    """A stable and a canary version of one model behind one port: a request that names a version
    (`/versions/<v>`) or a label (`/labels/stable` or `/labels/canary`, as TF Serving labels versions) goes to
    it; the others go to the canary `percent` times in a hundred, at random, else to the stable one. Which
    version answered is noted for the inference log, so each version's requests are measured apart."""

    def __init__(self, stable: ModelApp, canary: ModelApp, percent: int) -> None:
        self.stable, self.canary, self.percent = stable, canary, percent
        self.by_version = {stable.version: stable, canary.version: canary}
        self.labels = {"stable": stable.version, "canary": canary.version}
        self._model = f"/models/{stable.name}"
        self._random = random.Random()

    async def handle(self, request: Request) -> Answer:
        path = request.path
        app = None
        model = self._model
        if model + "/labels/" in path:
            head, _, rest = path.partition(model + "/labels/")
            head += model
            label, sep, tail = rest.partition("/") if "/" in rest else rest.partition(":")
            version = self.labels.get(label)
            if version is None:
                return 404, _dumps({"error": f"no label {label!r}: this serving's labels are stable (version "
                                             f"{self.stable.version}) and canary (version {self.canary.version})"})
            request = request._replace(path=f"{head}/versions/{version}{sep}{tail}")
            app = self.by_version[version]
        elif model + "/versions/" in path:
            number = path.partition(model + "/versions/")[2].split("/", 1)[0].split(":", 1)[0]
            app = self.by_version.get(int(number)) if number.isdigit() else None
        if app is None:
            app = self.canary if self._random.random() * 100 < self.percent else self.stable
        record(version=app.version)
        return await app.handle(request)


def _binary_outputs(answer: object, body: dict[str, Any]) -> Any:
    """The answer as the request asked for its outputs: only those it names in "outputs" (all without one), and
    as raw bytes after a JSON head (a BinaryBody) where it asks for binary data (an output's
    `parameters.binary_data`, or the request's `parameters.binary_data_output`)."""
    wanted = body.get("outputs")
    every = bool((body.get("parameters") or {}).get("binary_data_output"))
    if not isinstance(answer, dict) or not isinstance(answer.get("outputs"), list) or (not wanted and not every):
        return answer
    outputs = {str(o.get("name")): o for o in answer["outputs"] if isinstance(o, dict)}
    binary: set[str] = set(outputs) if every else set()
    if isinstance(wanted, list) and wanted:
        names = [str(w.get("name")) for w in wanted if isinstance(w, dict)]
        unknown = [n for n in names if n not in outputs]
        if unknown:
            raise RequestError(f"output {unknown[0]!r} is not one of this model's outputs ({', '.join(outputs)})")
        answer["outputs"] = [outputs[n] for n in names]
        binary |= {str(w.get("name")) for w in wanted if isinstance(w, dict)
                   and (w.get("parameters") or {}).get("binary_data", every)}
    if not binary:
        return answer
    chunks = []
    for output in answer["outputs"]:
        if output["name"] not in binary:
            continue
        if output["datatype"] == "BYTES":
            raw = b"".join(len(e).to_bytes(4, "little") + e for e in (str(v).encode() for v in output["data"]))
        else:
            raw = np.asarray(output["data"], dtype=np.dtype(V2_TYPES[output["datatype"]]).newbyteorder("<")).tobytes()
        output.pop("data")
        output["parameters"] = {**(output.get("parameters") or {}), "binary_data_size": len(raw)}
        chunks.append(raw)
    return BinaryBody(_dumps(answer), b"".join(chunks))


def _v2_tensor(tensor: dict[str, Any]) -> np.ndarray:
    """A v2 input tensor as a numpy array of its shape: data flat (row-major) or nested, as the protocol allows."""
    name = tensor.get("name", "an input")
    datatype, shape, data = tensor.get("datatype"), tensor.get("shape"), tensor.get("data")
    if datatype not in V2_TYPES:
        raise RequestError(f"input {name!r} has datatype {datatype!r}; use one of {', '.join(V2_TYPES)}")
    if not isinstance(shape, list) or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0
                                              for d in shape):
        raise RequestError(f"input {name!r} needs \"shape\": a list of whole numbers, e.g. [1, 4]")
    if not isinstance(data, (list, np.ndarray)):
        raise RequestError(f"input {name!r} needs \"data\": a list of values (flat, row-major, or nested), or "
                           "\"parameters\": {\"binary_data_size\": N} with the Inference-Header-Content-Length header")
    try:
        array = np.asarray(data, dtype=V2_TYPES[datatype])
        size = int(np.prod(shape)) if shape else 1
        if array.size != size:
            raise RequestError(f"input {name!r} has {array.size} values, but shape {shape} holds {size}")
        return array.reshape(shape)
    except (ValueError, TypeError) as exc:
        raise RequestError(f"input {name!r} cannot be read as {datatype} of shape {shape} ({exc})") from None


class NonFiniteRefused(Exception):
    """The request held NaN or Infinity and the model failed on it: the client's input, so a 400."""


def _refuse_non_finite(raw: bytes, exc: Exception) -> None:
    """Raise NonFiniteRefused when the model failed (`exc`) on a request that holds NaN or Infinity, which JSON
    itself does not allow (TF Serving reads them; a model may take them or not)."""
    if b"NaN" in raw or b"Infinity" in raw:
        _, non_finite = _loads_noting(raw)
        if non_finite:
            raise NonFiniteRefused(f"the inputs hold NaN or Infinity, which this model does not take "
                                   f"({type(exc).__name__}: {exc}); send finite numbers") from None


def _loads(raw: bytes) -> Any:
    """A request's JSON: orjson (a tenth of the json module's time for a row of floats), else the json module,
    which also reads the NaN and Infinity that Python's json.dumps writes, and names what is wrong. Nesting
    deeper than MAX_JSON_DEPTH raises RecursionError, from either."""
    return _loads_noting(raw)[0]


def _loads_noting(raw: bytes) -> tuple[Any, bool]:
    """The JSON and whether it held NaN or Infinity."""
    try:
        return orjson.loads(raw), False
    except orjson.JSONDecodeError as exc:
        if "depth limit" in str(exc):
            raise RecursionError(str(exc)) from None
    seen: list[str] = []

    def constant(name: str) -> float:
        seen.append(name)
        return float(name)

    return json.loads(raw, parse_constant=constant), bool(seen)


def _dumps(body: object) -> bytes:
    """An answer's JSON: orjson (NaN and infinities as null, which every JSON parser reads), else the json
    module for what orjson cannot write (an integer over 64 bits, a subclass it refuses)."""
    try:
        return orjson.dumps(body, option=orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS)
    except TypeError:
        return json.dumps(body, default=_json_ready).encode()


def _json_ready(value: object) -> Any:
    ready = to_json_ready(value)
    if ready is value:
        raise TypeError(f"the answer holds {type(value).__name__!r}, which cannot be written as JSON")
    return ready
