"""One instance of a serving: a process that loads the model and answers on the socket its supervisor
bound (`http_server`: uvloop and httptools, each answer in one write). Started only by the supervisor:
`hopsml.serving.instance.serve.main()` with its spec in HOPSML_SERVING_INSTANCE (JSON).

It tells the supervisor it is ready by writing one byte to its ready pipe once the model is loaded (or
'F' and why it cannot load it), and
dies with the supervisor (the kernel's parent-death signal), so it never keeps the port on its own.
"""

from __future__ import annotations

import gc
import json
import logging
import os
import socket
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    from hopsml.serving.instance.http_server import App
    from hopsml.serving.instance.loaders import Servable, Transformer
    from hopsml.serving.instance.protocol import ModelApp

SPEC_ENV = "HOPSML_SERVING_INSTANCE"

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class InstanceSpec:
    """What an instance needs, all local: no project root, no credentials."""

    name: str
    version: int
    index: int
    model_dir: str
    predictor: str | None
    transformer: str | None
    socket_fd: int
    ready_fd: int
    supervisor: int
    max_body_bytes: int
    threads: int
    batching: dict[str, int] | None = None
    limits: dict[str, float] | None = None   # http_server.Limits' fields (the serving_* settings)
    canary: dict[str, Any] | None = None    # the canary version: version, percent, model_dir, predictor, transformer
    load_fd: int | None = None               # an autoscaled serving's load file (autoscale.py): this instance's slot
    models: dict[str, Any] | None = None     # several models: name -> default version and each version's files
    max_models: int | None = None
    max_models_bytes: int | None = None

    def to_env(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_env(cls, text: str) -> InstanceSpec:
        return cls(**json.loads(text))


def main() -> int:
    spec = InstanceSpec.from_env(os.environ[SPEC_ENV])
    from hopsml.processes import die_with_parent

    die_with_parent(spec.supervisor)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format=f"%(asctime)s %(levelname)s instance {spec.index} (pid {os.getpid()}) %(name)s: "
                               "%(message)s")
    from hopsml.serving.instance import http_server, loaders
    from hopsml.serving.instance.inference_log import (
        LOG_ENV,
        CountingServable,
        InferenceLogger,
        LoggedApp,
        LogOptions,
        RecordingTransformer,
    )
    from hopsml.serving.instance.protocol import ModelApp

    logger = None
    if os.environ.get(LOG_ENV):  # inference logging: the model calls are counted, requests queued for the writer
        logger = InferenceLogger(LogOptions.from_env(os.environ[LOG_ENV]), spec.index)

    model_thread = None
    if spec.batching is not None:
        from hopsml.serving.instance.batching import Batcher, BatchingOptions, ModelThread

        model_thread = ModelThread()  # one for every model of the instance

    def model_app(name: str, version: int, servable: loaders.Servable, transformer: loaders.Transformer | None
                  ) -> ModelApp:
        if logger is not None:
            servable = cast(loaders.Servable, CountingServable(servable, logger.batch_sizes))
            if transformer is not None:
                transformer = cast(loaders.Transformer, RecordingTransformer(transformer))
        batcher = None
        if spec.batching is not None:
            batcher = Batcher(servable, BatchingOptions(**spec.batching), model_thread)
            # The model thread needs the GIL between the model's operations. The event loop lets go of it at
            # every I/O callback and takes it straight back, and each time that resets the waiting thread's
            # clock, so at the default 5 ms it waited until the loop went idle: the batch computed after the
            # answers were written, not while. At 10 us it is asked for at once (64 clients: +10% req/s).
            sys.setswitchinterval(10e-6)
        return ModelApp(name, version, servable, transformer, batcher=batcher)

    try:
        app: App = several_models(spec, model_app) if spec.models is not None else one_model(spec, model_app)
    except Exception as exc:  # the supervisor records why, so the status can say it
        log.exception("cannot load the model of serving %s", spec.name)
        reason = str(exc) if isinstance(exc, loaders.ServingError) else f"{type(exc).__name__}: {exc}"
        os.write(spec.ready_fd, b"F" + reason.encode("utf-8", errors="replace")[:4000])
        return 1

    def ready() -> None:
        os.write(spec.ready_fd, b"R")
        os.close(spec.ready_fd)
        log.info("serving %s version %d: ready", spec.name, spec.version)

    if logger is not None:
        app = LoggedApp(app, logger)
    # what loading made (the framework's modules, the model) lives as long as the process: kept out of the
    # collector's full passes, which took 90 ms each with a torch model loaded and stalled every request then.
    # With several models, what the others bring when they load is collected as usual; the serving's own model,
    # loaded before this, stays in memory if it is evicted (its frozen cycles are never freed: one model at most).
    gc.freeze()
    meter = None
    if spec.load_fd is not None:
        from hopsml.serving.autoscale import LoadMeter

        meter = LoadMeter(spec.load_fd, spec.index)
    try:   # until SIGTERM (the requests being answered finish, 5 s at most) or SIGUSR1 (drained: scaled in)
        http_server.run(app.handle, socket.socket(fileno=spec.socket_fd), spec.max_body_bytes, on_ready=ready,
                        limits=http_server.Limits(**(spec.limits or {})), meter=meter)  # type: ignore[arg-type]
    finally:
        if logger is not None:  # what is queued is written before the instance ends
            logger.close()
    return 0


MakeApp = Callable[[str, int, "Servable", "Transformer | None"], "ModelApp"]


def one_model(spec: InstanceSpec, model_app: MakeApp) -> App:
    """The serving's model, and its canary beside it when it has one (the split needs no router in front)."""
    from hopsml.serving.instance import loaders
    from hopsml.serving.instance.protocol import VersionRouter

    servable = loaders.load(spec.model_dir, spec.predictor, spec.threads)
    transformer = loaders.Transformer.load(spec.transformer) if spec.transformer else None
    app = model_app(spec.name, spec.version, servable, transformer)
    canary = spec.canary
    if canary is None:
        return app
    canary_servable = loaders.load(canary["model_dir"], canary["predictor"], spec.threads)
    canary_transformer = loaders.Transformer.load(canary["transformer"]) if canary["transformer"] else None
    return VersionRouter(app, model_app(spec.name, canary["version"], canary_servable, canary_transformer),
                         canary["percent"])


def several_models(spec: InstanceSpec, model_app: MakeApp) -> App:
    """A multiplexer over the catalog the supervisor resolved, the serving's own model loaded before it answers."""
    from hopsml.serving.instance.multiplex import ModelMultiplexer, ModelSource

    catalog: dict[str, Any] = spec.models or {}

    def resolve(name: str, version: int | None) -> ModelSource:
        model = catalog[name]
        number = model["default"] if version is None else version
        files = model["versions"].get(str(number))
        if files is None:
            raise LookupError(f"its versions here are {', '.join(sorted(model['versions'], key=int))}")
        return ModelSource(name, number, **files)

    def make(source: ModelSource, servable: Servable, transformer: Transformer | None) -> ModelApp:
        return model_app(source.name, source.version, servable, transformer)

    mux = ModelMultiplexer(resolve, catalog.keys, make, max_models=spec.max_models,
                           max_memory_bytes=spec.max_models_bytes, threads=spec.threads)
    mux.preload(spec.name)
    return mux


if __name__ == "__main__":
    sys.exit(main())
