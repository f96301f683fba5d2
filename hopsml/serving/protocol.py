"""The REST protocol of TensorFlow Serving (which KServe v1 shares), as a raw ASGI app: no web framework,
so a request costs little more than its JSON and the model's call.

    GET  /v1/models/<name>[/versions/<v>]            model status
    GET  /v1/models/<name>[/versions/<v>]/metadata   model spec and signature
    POST /v1/models/<name>[/versions/<v>]:predict     {"instances": rows} -> {"predictions": ...}
                                                      {"inputs": columns} -> {"outputs": ...}

Failures answer {"error": "..."}: 4xx for what the client sent (malformed JSON, wrong shape or dtype,
a body over the limit, an unknown model or version, a wrong method), 500 when the model raises (logged
with its traceback). The app keeps serving after each.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from hopsml.serving.loaders import RequestError, Servable, Transformer, to_json_ready

if TYPE_CHECKING:
    from hopsml.serving.batching import Batcher

log = logging.getLogger(__name__)

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]

PREFIX = "/v1/models/"
_JSON_HEADERS = [(b"content-type", b"application/json")]


class ModelApp:
    """One served model version behind TF Serving's REST paths."""

    def __init__(self, name: str, version: int, servable: Servable, transformer: Transformer | None = None,
                 max_body_bytes: int = 16 << 20, on_startup: Callable[[], None] | None = None,
                 batcher: Batcher | None = None) -> None:
        self.name = name
        self.version = version
        self.servable = servable
        self.transformer = transformer
        self.max_body_bytes = max_body_bytes
        self.on_startup = on_startup
        self.batcher = batcher

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            await self._http(scope, receive, send)
        elif scope["type"] == "lifespan":
            await self._lifespan(receive, send)

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                if self.on_startup is not None:
                    self.on_startup()
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def _http(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            status, body = await self._answer(scope, receive)
        except RequestError as exc:
            status, body = exc.status, {"error": str(exc)}
        except Exception as exc:  # the model's own failure: answered, logged, server stays up
            log.exception("serving %s: %s %s failed", self.name, scope.get("method"), scope.get("path"))
            status, body = 500, {"error": f"the model raised {type(exc).__name__}: {exc}"}
        await _send_json(send, status, body)

    async def _answer(self, scope: Scope, receive: Receive) -> tuple[int, Any]:
        path: str = scope["path"]
        method: str = scope["method"]
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
            return 200, await self._predict(scope, receive)
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

    async def _predict(self, scope: Scope, receive: Receive) -> Any:
        raw = await self._body(scope, receive)
        try:
            body = json.loads(raw)
        except (ValueError, UnicodeDecodeError) as exc:
            raise RequestError(f"the body is not valid JSON ({exc}); send e.g. {{\"instances\": [[1.0, 2.0]]}}") from None
        if not isinstance(body, dict):
            raise RequestError(f"the body is a JSON {type(body).__name__}; send an object with \"instances\" "
                               "(rows) or \"inputs\" (columns)")
        if self.transformer is not None:
            body = self.transformer.preprocess(body)
        has_rows, has_columns = "instances" in body, "inputs" in body
        if has_rows == has_columns:
            raise RequestError("send exactly one of \"instances\" (a list of rows) and \"inputs\" (columns), "
                               f"got {'both' if has_rows else 'neither'}")
        inputs = body["instances"] if has_rows else self._columns(body["inputs"])
        if has_rows and not isinstance(inputs, list):
            raise RequestError(f"\"instances\" must be a list of rows, not a JSON {type(inputs).__name__}")
        if self.batcher is not None:
            result = to_json_ready(await self.batcher.predict(inputs))
        else:
            result = to_json_ready(self.servable.predict(inputs))
        answer = {"predictions" if has_rows else "outputs": result}
        if self.transformer is not None:
            answer = self.transformer.postprocess(answer)
        return answer

    def _columns(self, inputs: Any) -> Any:
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

    async def _body(self, scope: Scope, receive: Receive) -> bytes:
        limit = self.max_body_bytes
        for key, value in scope.get("headers", ()):
            if key == b"content-length" and value.isdigit() and int(value) > limit:
                raise RequestError(f"the body has {int(value)} bytes, over this serving's limit of {limit}; send "
                                   "fewer rows per request", 413)
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                raise RequestError("the client closed the connection before the body was sent", 400)
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                raise RequestError(f"the body is over this serving's limit of {limit} bytes; send fewer rows "
                                   "per request", 413)
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)


async def _send_json(send: Send, status: int, body: Any) -> None:
    data = json.dumps(body).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [*_JSON_HEADERS, (b"content-length", str(len(data)).encode())]})
    await send({"type": "http.response.body", "body": data})
