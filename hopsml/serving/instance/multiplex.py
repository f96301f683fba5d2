"""Several models behind one server process, as Ray Serve multiplexes models: a model (a serving's model, or
one version of it) is loaded on its first request and the least recently used ones are evicted past a count
or a memory bound, requests routed by the model name and version in their path:

    /v1/models/<name>[/versions/<v>|/labels/<l>][:predict|/metadata]   TF Serving's REST paths
    /v2/models/<name>[/versions/<v>][/infer|/ready]                    KServe v2
    GET /v1/models, /v2/models        what the server can serve, what is loaded (and since when), what failed
    GET /v2, /v2/health/live, /v2/health/ready                         the server's own, never load a model

Each loaded model answers through its own app (`make_app`: protocol.ModelApp, or the instance's wrappers of it),
so a loaded model costs one dict lookup of the request's path and a clock read per request. A model's status
(`GET /v1/models/<name>`) and readiness (`/v2/models/<name>/ready`) are told without loading it; everything else
about a model loads it. A path without a version (or with a label) is the model's default version, resolved once
and remembered while that version stays loaded.

Loads run on one worker thread, one at a time, off the event loop: the requests for a model that is loading wait
on that one load, and each load is measured alone. A model's size is the growth of the process's resident memory
(RSS, read from /proc/self/statm) across its load, after a garbage collection: the first model of a framework
carries the framework's import too, and memory the allocator kept from an evicted model and hands to the next is
not counted for it. Before a load, the least recently used idle models are evicted until the new one fits the
count bound and its last measured size fits the memory bound; after it, until its measured size fits. A model
with requests in flight is never evicted (the bound is passed until they end), nor is the most recently used one
after a load or a request (so a model loaded while the others were busy stays and they go as they end), so the
last model is kept even when it alone is over the memory bound.

A model that fails to load answers 503 naming it and why, for its own name only, and is tried again on the first
request after `retry_s`; an unknown model answers 404 naming the models this server holds.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any

import orjson

from hopsml.request_notes import note
from hopsml.serving.definition import ServingError
from hopsml.serving.instance import loaders
from hopsml.serving.instance.http_server import Answer, App, Request

log = logging.getLogger(__name__)

V1 = "/v1/models"
V2 = "/v2"
V2_MODELS = "/v2/models"
RETRY_S = 10.0   # a model that failed to load is tried again on the first request after this long
_PAGE_BYTES = os.sysconf("SC_PAGE_SIZE")
_monotonic = time.monotonic


@dataclass(frozen=True)
class ModelSource:
    """Where one model version's files are: what `resolve(name, version)` returns (version None asks for the
    model's default version; the source names the version it chose)."""

    name: str
    version: int
    model_dir: str
    predictor: str | None = None
    transformer: str | None = None

    def __post_init__(self) -> None:
        if isinstance(self.version, bool) or not isinstance(self.version, int):
            raise ServingError(f"model {self.name!r}: the source's version must be a whole number, not "
                               f"{self.version!r}")


@dataclass(frozen=True)
class LoadedModel:
    """One loaded model, for a status page: its measured size, when it was loaded and last used (seconds since
    the epoch), how long its load took and how many requests it is answering now."""

    name: str
    version: int
    size_bytes: int
    loaded_at: float
    last_used: float
    load_s: float
    in_flight: int


Resolve = Callable[[str, int | None], ModelSource]
MakeApp = Callable[[ModelSource, loaders.Servable, loaders.Transformer | None], App]


def model_app(source: ModelSource, servable: loaders.Servable, transformer: loaders.Transformer | None) -> App:
    """The plain app of a loaded model (no batching, no logging): `make_app`'s default."""
    from hopsml.serving.instance.protocol import ModelApp

    return ModelApp(source.name, source.version, servable, transformer)


class ModelUnavailable(Exception):
    """The model cannot be loaded now (503): the message names it, why, and when it is tried again."""


@dataclass(eq=False)
class _Entry:
    """One model version this server has seen asked for: loaded (`app`), loading (`task`), failed, or evicted."""

    source: ModelSource
    app: App | None = None
    task: asyncio.Task[None] | None = None
    size: int = 0                 # measured at its last load: the estimate before the next one
    loaded_at: float = 0.0        # time.time()
    last_used: float = 0.0        # time.monotonic()
    load_s: float = 0.0
    in_flight: int = 0
    error: str | None = None      # why its last load failed
    retry_at: float = 0.0         # time.monotonic() after which a failed load is tried again
    paths: list[str] = field(default_factory=list)   # its entries in the multiplexer's fast path


class ModelMultiplexer:
    """Routes each request to its model's app, loading and evicting models as described in the module's
    docstring. `resolve(name, version)` finds a model's files (LookupError: no such model or version);
    `names()` lists the models this server may serve; `make_app(source, servable, transformer)` builds the
    app of a loaded model (where the instance adds batching and logging). `handle` is the http_server handler."""

    def __init__(self, resolve: Resolve, names: Callable[[], Iterable[str]], make_app: MakeApp = model_app, *,
                 max_models: int | None = None, max_memory_bytes: int | None = None, threads: int = 1,
                 retry_s: float = RETRY_S) -> None:
        for what, bound in (("max_models", max_models), ("max_memory_bytes", max_memory_bytes)):
            if bound is not None and (isinstance(bound, bool) or not isinstance(bound, int) or bound < 1):
                raise ServingError(f"{what} must be a whole number of at least 1 (or None: no bound), not {bound!r}")
        if not retry_s >= 0:
            raise ServingError(f"retry_s must be a number of seconds of at least 0, not {retry_s!r}")
        self.resolve = resolve
        self.names = names
        self.make_app = make_app
        self.max_models = max_models
        self.max_memory_bytes = max_memory_bytes
        self.threads = threads
        self.retry_s = retry_s
        self.loads = 0           # since the start: models loaded, evicted, and loads that failed
        self.evictions = 0
        self.failures = 0
        self._entries: dict[tuple[str, int], _Entry] = {}
        self._defaults: dict[str, int] = {}     # model name -> its default version: resolved again once evicted
        self._known: set[str] = set()           # names resolved before: not looked up in names() again
        self._fast: dict[str, _Entry] = {}      # predict and infer paths of the loaded models
        self._loaded: set[_Entry] = set()
        self._loaded_bytes = 0
        self._pressed = False                   # over a bound with every other model busy: trim as requests end
        self._lock: asyncio.Lock | None = None  # one load at a time (made on the loop that first loads)
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="model-load")

    # --- the request path -----------------------------------------------------------------------------
    async def handle(self, request: Request) -> Answer:
        """The answer to one request: its status and JSON body."""
        entry = self._fast.get(request.path)
        if entry is None:
            return await self._route(request)
        note(model=entry.source.name, version=entry.source.version)   # for the inference log, when it is on
        entry.last_used = _monotonic()
        entry.in_flight += 1
        try:
            return await entry.app.handle(request)  # type: ignore[union-attr]  # in _fast only while loaded
        finally:
            entry.in_flight -= 1
            if self._pressed:
                self._trim()

    async def _route(self, request: Request) -> Answer:
        path, method = request.path, request.method
        if path in (V1, V1 + "/", V2_MODELS, V2_MODELS + "/", V2, V2 + "/health/live", V2 + "/health/ready"):
            if method != "GET":
                return _answer(405, {"error": f"{method} {path}: the server's status and model list take GET"})
            return _answer(200, await self._server_status(path))
        if path.startswith(V1 + "/"):
            parsed = _parse_v1(path)
        elif path.startswith(V2_MODELS + "/"):
            parsed = _parse_v2(path)
        else:
            return _answer(404, {"error": f"no such path {path!r}: this server answers {V1}/<name>[:predict], "
                                          f"{V2_MODELS}/<name>/infer, GET {V1} and {V2_MODELS} (the models it "
                                          f"holds), {V2}/health/live and {V2}/health/ready"})
        name, version, status_only = parsed
        if not name:
            return _answer(404, {"error": f"no model is named in {path!r}; GET {V1} lists the models served here"})
        if version is not None and not version.isdigit():
            return _answer(404, {"error": f"model {name!r} has no version {version!r}: versions are whole numbers"})
        try:
            entry = await self._entry(name, None if version is None else int(version))
        except LookupError as exc:
            return _answer(404, {"error": str(exc), "model": name})
        except ModelUnavailable as exc:
            return _answer(503, {"error": str(exc), "model": name})
        if entry.app is None and status_only:
            return _answer(200, self._unloaded_status(entry, path))
        entry.in_flight += 1
        note(model=entry.source.name, version=entry.source.version)
        try:
            app = entry.app if entry.app is not None else await self._loaded_app(entry)
            entry.last_used = _monotonic()
            return await app.handle(request)
        except ModelUnavailable as exc:
            source = entry.source
            return _answer(503, {"error": str(exc), "model": source.name, "version": source.version,
                                 "retry_after_s": round(max(0.0, entry.retry_at - _monotonic()), 1)})
        finally:
            entry.in_flight -= 1
            if self._pressed:
                self._trim()

    async def _entry(self, name: str, version: int | None) -> _Entry:
        """The entry of a model version (the default one for None), its source resolved on a worker thread the
        first time; LookupError naming the models or versions served when there is no such model or version."""
        number = self._defaults.get(name) if version is None else version
        entry = self._entries.get((name, number)) if number is not None else None
        if entry is not None:
            return entry
        if name not in self._known:
            names = sorted(await asyncio.to_thread(lambda: list(self.names())))
            if name not in names:
                raise LookupError(f"no model {name!r} is served here; this server holds "
                                  f"{', '.join(names) or 'no models'}")
        try:
            source = await asyncio.to_thread(self.resolve, name, version)
        except LookupError as exc:
            raise LookupError(f"model {name!r} has no {'default version' if version is None else f'version {version}'}"
                              f" served here: {exc}") from None
        except Exception as exc:  # noqa: BLE001  # the registry itself failed: the model is unavailable, not unknown
            raise ModelUnavailable(f"model {name!r}{'' if version is None else f' version {version}'} cannot be "
                                   f"found: {_reason(exc)}") from None
        self._known.add(name)
        entry = self._entries.setdefault((name, source.version), _Entry(source))
        if version is None and entry.app is not None:   # loaded by its version number first: now its default too
            self._defaults[name] = source.version
            self._publish(entry)
        elif version is None:
            self._defaults[name] = source.version
        return entry

    async def _loaded_app(self, entry: _Entry) -> App:
        """The entry's app once loaded: one load shared by every request that waits for it."""
        if entry.task is None:
            if entry.error is not None and _monotonic() < entry.retry_at:
                raise ModelUnavailable(self._failed_message(entry))
            entry.task = asyncio.get_running_loop().create_task(self._load(entry))
            entry.task.add_done_callback(_retrieved)   # a load whose requests all went away is not warned about
        await asyncio.shield(entry.task)
        if entry.app is None:   # its requests in flight keep it loaded: only close() unloads it now
            raise ModelUnavailable(f"model {entry.source.name!r} version {entry.source.version} was unloaded: the "
                                   "server is stopping")
        return entry.app

    # --- loading and eviction -------------------------------------------------------------------------
    async def _load(self, entry: _Entry) -> None:
        if self._lock is None:
            self._lock = asyncio.Lock()
        source = entry.source
        try:
            async with self._lock:
                self._make_room(entry)
                loop = asyncio.get_running_loop()
                servable, transformer, size, seconds = await loop.run_in_executor(self._executor, self._read, source)
                app = self.make_app(source, servable, transformer)
        except Exception as exc:  # any failure of the model's own: answered 503 for it alone
            self.failures += 1
            entry.error = _reason(exc)
            entry.retry_at = _monotonic() + self.retry_s
            log.warning("model %s version %d cannot be loaded (failed loads: %d): %s", source.name, source.version,
                        self.failures, entry.error, exc_info=not isinstance(exc, ServingError))
            raise ModelUnavailable(self._failed_message(entry)) from None
        finally:
            entry.task = None
        self._keep(entry, app, size, seconds)

    def preload(self, name: str, version: int | None = None) -> None:
        """Load a model before the server answers (on the calling thread, no event loop yet): a serving's own
        model, so that one that cannot load fails the instance at its start instead of answering 503."""
        source = self.resolve(name, version)
        entry = self._entries.setdefault((name, source.version), _Entry(source))
        if version is None:
            self._defaults[name] = source.version
        self._known.add(name)
        servable, transformer, size, seconds = self._read(source)
        self._keep(entry, self.make_app(source, servable, transformer), size, seconds)

    def _keep(self, entry: _Entry, app: App, size: int, seconds: float) -> None:
        """A load succeeded: the entry answers from the fast path and counts against the bounds."""
        source = entry.source
        entry.app, entry.size, entry.load_s, entry.error = app, size, seconds, None
        entry.loaded_at, entry.last_used = time.time(), _monotonic()
        self._loaded.add(entry)
        self._loaded_bytes += size
        self.loads += 1
        self._publish(entry)
        log.info("model %s version %d loaded in %.2f s, %s (%d loaded, %s in all; loads %d, evictions %d)",
                 source.name, source.version, seconds, _mb(size), len(self._loaded), _mb(self._loaded_bytes),
                 self.loads, self.evictions)
        self._trim()

    def _read(self, source: ModelSource) -> tuple[loaders.Servable, loaders.Transformer | None, int, float]:
        """On the load thread: the model and its transformer, the RSS growth across their load, and the seconds."""
        gc.collect()   # what evicted models left in cycles is freed first, so it is not taken off this one's size
        before, started = rss_bytes(), time.perf_counter()
        servable = loaders.load(source.model_dir, source.predictor, self.threads)
        transformer = loaders.Transformer.load(source.transformer) if source.transformer else None
        return servable, transformer, max(0, rss_bytes() - before), time.perf_counter() - started

    def _over(self, extra_models: int = 0, extra_bytes: int = 0) -> bool:
        return ((self.max_models is not None and len(self._loaded) + extra_models > self.max_models)
                or (self.max_memory_bytes is not None and self._loaded_bytes + extra_bytes > self.max_memory_bytes))

    def _make_room(self, incoming: _Entry) -> None:
        """Before a load: evict idle models, least recently used first, until the incoming one fits."""
        while self._loaded and self._over(1, incoming.size):
            victim = self._victim(keep_newest=False)
            if victim is None:
                log.warning("model %s version %d is loaded past the bounds: every loaded model has requests in "
                            "flight; the least recently used is evicted when its requests end",
                            incoming.source.name, incoming.source.version)
                self._pressed = True
                return
            self._evict(victim)

    def _trim(self) -> None:
        """While over a bound: evict idle models, least recently used first, but not the most recently used one
        (evicting what is being asked for would only load it again): a model loaded while the others were busy
        stays, and they go as their requests end."""
        while len(self._loaded) > 1 and self._over():
            victim = self._victim(keep_newest=True)
            if victim is None:
                self._pressed = True
                return
            self._evict(victim)
        self._pressed = False

    def _victim(self, keep_newest: bool) -> _Entry | None:
        """The least recently used loaded model with no request in flight (None: every candidate is busy)."""
        newest = max(self._loaded, key=lambda e: e.last_used) if keep_newest else None
        idle = [e for e in self._loaded if e.in_flight == 0 and e is not newest]
        return min(idle, key=lambda e: e.last_used) if idle else None

    def _evict(self, entry: _Entry) -> None:
        source, app = entry.source, entry.app
        for path in entry.paths:
            self._fast.pop(path, None)
        entry.paths = []
        entry.app = None
        self._loaded.discard(entry)
        self._loaded_bytes -= entry.size
        if self._defaults.get(source.name) == source.version:   # resolved again at its next load
            del self._defaults[source.name]
        self.evictions += 1
        log.info("model %s version %d evicted, least recently used (idle %.1f s, %s; %d loaded, %s in all; "
                 "loads %d, evictions %d)", source.name, source.version, _monotonic() - entry.last_used,
                 _mb(entry.size), len(self._loaded), _mb(self._loaded_bytes), self.loads, self.evictions)
        _close(app)

    def _publish(self, entry: _Entry) -> None:
        """The loaded entry's predict and infer paths in the fast path (without a version: its default's)."""
        name, version = entry.source.name, entry.source.version
        paths = [f"{V1}/{name}/versions/{version}:predict", f"{V2_MODELS}/{name}/versions/{version}/infer"]
        if self._defaults.get(name) == version:
            paths += [f"{V1}/{name}:predict", f"{V2_MODELS}/{name}/infer"]
        for path in paths:
            self._fast[path] = entry
        entry.paths = paths

    # --- what the server tells about itself -------------------------------------------------------------
    def loaded(self) -> list[LoadedModel]:
        """The loaded models, most recently used first (for the status page)."""
        now, wall = _monotonic(), time.time()
        return [LoadedModel(e.source.name, e.source.version, e.size, e.loaded_at, wall - (now - e.last_used),
                            e.load_s, e.in_flight)
                for e in sorted(self._loaded, key=lambda e: e.last_used, reverse=True)]

    def failed(self) -> list[dict[str, Any]]:
        """The models whose last load failed: why, and in how many seconds a request tries again."""
        now = _monotonic()
        return [{"name": e.source.name, "version": e.source.version, "error": e.error,
                 "retry_in_s": round(max(0.0, e.retry_at - now), 1)}
                for e in self._entries.values() if e.error is not None and e.app is None]

    def bytes_loaded(self) -> int:
        """The measured sizes of the loaded models, together."""
        return self._loaded_bytes

    async def _server_status(self, path: str) -> dict[str, Any]:
        if path.startswith(V2 + "/health/"):
            return {path.rsplit("/", 1)[1]: True}
        if path == V2:
            from hopsml import __version__

            return {"name": "hopsml", "version": __version__, "extensions": []}
        names = sorted(await asyncio.to_thread(lambda: list(self.names())))
        return {"models": names,
                "loaded": [asdict(m) for m in self.loaded()],
                "failed": self.failed(),
                "bounds": {"max_models": self.max_models, "max_memory_bytes": self.max_memory_bytes},
                "loads": self.loads, "evictions": self.evictions}

    def _unloaded_status(self, entry: _Entry, path: str) -> dict[str, Any]:
        """A model's status or readiness while it is not loaded: told without loading it."""
        source = entry.source
        if path.startswith(V2_MODELS):
            return {"name": source.name, "ready": False}
        state = "LOADING" if entry.task is not None else "END"
        error = "" if entry.error is None else f"the last load failed: {entry.error}"
        return {"model_version_status": [{"version": str(source.version), "state": state,
                                          "status": {"error_code": "UNAVAILABLE" if error else "OK",
                                                     "error_message": error or "not loaded: its first request "
                                                                               "loads it"}}]}

    def _failed_message(self, entry: _Entry) -> str:
        source = entry.source
        wait = max(0.0, entry.retry_at - _monotonic())
        return (f"model {source.name!r} version {source.version} cannot be loaded: {entry.error} (tried again on "
                f"a request after {wait:.0f} s; fix the model or its serving and send a request then)")

    def close(self) -> None:
        """Unload every model and end the load thread (the server is stopping)."""
        for entry in list(self._loaded):
            self._evict(entry)
        self._executor.shutdown(wait=False, cancel_futures=True)


def rss_bytes() -> int:
    """This process's resident memory, from /proc/self/statm (its second field, in pages)."""
    with open("/proc/self/statm", "rb") as stream:
        return int(stream.read().split()[1]) * _PAGE_BYTES


def _parse_v1(path: str) -> tuple[str, str | None, bool]:
    """(name, version text or None, whether it asks only the model's status) of a /v1/models/... path."""
    rest = path[len(V1) + 1:]
    head, _, tail = rest.partition("/")
    name = head.partition(":")[0]
    if tail.startswith("versions/"):
        version = tail[len("versions/"):].split("/", 1)[0].split(":", 1)[0]
        return name, version, ":" not in tail and tail.count("/") == 1
    return name, None, rest == name


def _parse_v2(path: str) -> tuple[str, str | None, bool]:
    """(name, version text or None, whether it asks only readiness) of a /v2/models/... path."""
    parts = path[len(V2_MODELS) + 1:].split("/")
    version = parts[2] if len(parts) >= 3 and parts[1] == "versions" else None
    return parts[0], version, len(parts) in (2, 4) and parts[-1] == "ready"


def _reason(exc: BaseException) -> str:
    return str(exc) if isinstance(exc, ServingError) else f"{type(exc).__name__}: {exc}"


def _retrieved(task: asyncio.Task[None]) -> None:
    if not task.cancelled():
        task.exception()


def _close(app: object) -> None:
    """Let an evicted app go: its `close()` where it has one, else its batcher's model thread, which would keep
    the model alive."""
    while app is not None:   # through wrappers (inference_log.LoggedApp) that hold the app as `.app`
        close = getattr(app, "close", None)
        if callable(close):
            close()
            return
        batcher = getattr(app, "batcher", None)
        if batcher is not None:
            batcher.close()
            return
        app = getattr(app, "app", None)


def _mb(size: int) -> str:
    return f"{size / 2**20:.1f} MiB"


def _answer(status: int, body: object) -> Answer:
    return status, orjson.dumps(body)
