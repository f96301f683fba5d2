"""hsml's model serving over hopsml's servings: `project.get_model_serving()`, `ms.create_predictor(model,
script_file=...)`, `ms.create_deployment(predictor)`, `model.deploy(...)`, `ms.get_deployment(name)`, and a
deployment's `save`, `start`, `stop`, `get_state`, `predict`, `get_logs` and `delete`. Each is a call of
`hopsml.serving` (create_or_update, start, stop, ...) under hsml's names; hops' own `serving` API is unchanged.

A predictor script is hsml's (and hops'): a `Predict` class with `predict(self, inputs)`, which may open the
project with `hopsworks.login()` and look features up with `fv.get_feature_vector(...)`; the serving's
instances run with the project's root, project and online store, so it finds them.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any, Protocol

from hopsml import config, hdfs, layout
from hopsml.fs import Storage
from hopsml.hopsworks.hsml.transformer import Transformer
from hopsml.serving.control import lifecycle
from hopsml.serving.definition import Batching, Canary, ServingError, ServingNotFound


class SavedModel(Protocol):
    """What a predictor reads of hsml's Model (hopsworks/registry.py): its name, and its version once saved."""

    @property
    def name(self) -> str: ...
    @property
    def version(self) -> int | None: ...


@dataclass
class Resources:
    """hsml's resources: here only the number of instances counts (one process each)."""

    num_instances: int = 1
    requests: object = None   # hsml's, kept and unused
    limits: object = None


@dataclass
class InferenceLogger:
    """hsml's inference logger: which parts of each request the serving's inference log keeps."""

    mode: str = "ALL"   # "ALL", "MODEL_INPUTS", "PREDICTIONS" or "NONE"
    kafka_topic: object = None   # hsml's; the log is Parquet files under the serving (get_inference_log)


@dataclass
class InferenceBatcher:
    """hsml's batcher: requests grouped up to `max_batch_size`, waiting at most `max_latency` milliseconds."""

    enabled: bool = True
    max_batch_size: int | None = None
    max_latency: int | None = None
    timeout: int | None = None

    def to_batching(self) -> Batching:
        """hopsml's batching group: `max_latency` milliseconds as TF Serving's `batch_timeout_micros`."""
        return Batching(max_batch_size=self.max_batch_size,
                        batch_timeout_micros=self.max_latency * 1000 if self.max_latency else None)


@dataclass
class PredictorState:
    """What `deployment.get_state()` says: its status ('Running', 'Stopped', 'Starting', 'Failed') and why."""

    status: str
    reason: str | None = None
    available_predictor_instances: int = 0

    def to_dict(self) -> dict[str, Any]:
        """hsml's fields of a state, decamelized as its describe() prints them."""
        state = {"available_instances": self.available_predictor_instances, "status": self.status}
        return {**state, "condition": {"reason": self.reason}} if self.reason else state

    def describe(self) -> None:
        """Print the state as JSON, as hsml does."""
        _print_json(self.to_dict())


@dataclass
class Predictor:
    """A model version to serve, with its script, resources, logger and batcher (not yet a deployment)."""

    model_name: str
    model_version: int
    name: str
    script_file: str | None = None
    resources: Resources | None = None
    inference_logger: InferenceLogger | None = None
    inference_batcher: InferenceBatcher | None = None
    settings: config.Settings | None = None
    canary_version: int | None = None           # another version of the model, served beside model_version
    canary_traffic_percent: int | None = None   # of the requests that name no version (10 when only a version)
    transformer: Transformer | None = None      # hsml's transformer script, run around the predictor

    def deploy(self) -> Deployment:
        """A deployment of this predictor, saved (not started)."""
        return Deployment(self).save()

    def to_dict(self) -> dict[str, Any]:
        """hsml's fields of a predictor (decamelized, as describe() prints them) that hopsml has."""
        described: dict[str, Any] = {"name": self.name, "model_name": self.model_name,
                                     "model_version": self.model_version, "model_server": "PYTHON",
                                     "serving_tool": "DEFAULT", "predictor": self.script_file,
                                     "api_protocol": "REST"}
        if self.resources is not None:
            described["num_instances"] = self.resources.num_instances
        if self.inference_logger is not None:
            described["inference_logging"] = self.inference_logger.mode
        if self.inference_batcher is not None:
            described["batching_configuration"] = {"batching_enabled": self.inference_batcher.enabled,
                                                   "max_batch_size": self.inference_batcher.max_batch_size,
                                                   "max_latency": self.inference_batcher.max_latency}
        if self.canary_version is not None:
            described.update(canary_version=self.canary_version,
                             canary_traffic_percent=self.canary_traffic_percent)
        return described

    def describe(self) -> None:
        """Print the predictor as JSON, as hsml does."""
        _print_json(self.to_dict())


class Deployment:
    """A deployment: a hopsml serving named `name`."""

    def __init__(self, predictor: Predictor, name: str | None = None) -> None:
        self.predictor = predictor
        self.name = name or predictor.name
        self._settings = predictor.settings or config.load()

    def __repr__(self) -> str:
        return f"Deployment(name={self.name!r}, model={self.predictor.model_name!r}, " \
               f"version={self.predictor.model_version})"

    @property
    def model_name(self) -> str:
        return self.predictor.model_name

    @property
    def model_version(self) -> int:
        return self.predictor.model_version

    def save(self, await_update: int | None = None) -> Deployment:
        """Create the serving from the predictor, or update it (a running one restarts with the new definition);
        `await_update` is hsml's and unused: saving returns once the definition is written."""
        p = self.predictor
        batcher = p.inference_batcher
        lifecycle.create_or_update(
            self.name, layout.model_versions_dir(self._settings.project, p.model_name), "PYTHON",
            model_version=p.model_version, predictor=_script(self._settings, p.script_file),
            inference_logging=(p.inference_logger.mode if p.inference_logger else "ALL"),
            instances=(p.resources.num_instances if p.resources else 1),
            batching_enabled=bool(batcher and batcher.enabled),
            batching=batcher.to_batching() if batcher and batcher.enabled else None,
            canary=Canary(version=p.canary_version, traffic_percent=p.canary_traffic_percent),
            settings=self._settings,
            transformer=_script(self._settings, p.transformer.script_file) if p.transformer else None,
            transformer_instances=p.transformer.num_instances if p.transformer else None)
        self._sync_canary()
        return self

    @property
    def id(self) -> int:
        return int(lifecycle.get(self.name, self._settings).id)

    @property
    def transformer(self) -> Transformer | None:
        return self.predictor.transformer

    def get_url(self) -> str:
        """The path of the deployment's page in hopsml's web view (`hopsml ui` prints the address it serves on)."""
        return f"/p/{self._settings.project}/servings/{self.name}"

    @property
    def canary_version(self) -> int | None:
        return self.predictor.canary_version

    @property
    def canary_traffic_percent(self) -> int | None:
        return self.predictor.canary_traffic_percent

    def promote(self) -> Deployment:
        """The canary version becomes the deployment's model version (a running deployment restarts with it)."""
        from hopsml.serving.control import canary

        canary.promote(self.name, settings=self._settings)
        self._sync_canary()
        return self

    def rollback(self) -> Deployment:
        """The canary is dropped: the model version takes every request again (a running deployment restarts)."""
        from hopsml.serving.control import canary

        canary.rollback(self.name, settings=self._settings)
        self._sync_canary()
        return self

    def canary_gate(self, **options: Any) -> dict[str, Any]:
        """serving.canary_gate for this deployment (window_s=, min_requests=, act=, thresholds): promotes the canary
        if its traffic held up, else rolls it back; returns the decision and its reasons."""
        from hopsml.serving.control import canary

        report = canary.gate(self.name, settings=self._settings, **options)
        self._sync_canary()
        return report

    def _sync_canary(self) -> None:
        """The predictor's versions as the serving now has them (promote and rollback change them)."""
        serving = lifecycle.get(self.name, self._settings)
        self.predictor.model_version = serving.model_version
        self.predictor.canary_version = serving.canary_version
        self.predictor.canary_traffic_percent = serving.canary_traffic_percent if serving.canary_version else None

    def start(self, await_running: int | None = 300) -> None:
        """Start the deployment's server and wait up to `await_running` seconds (default 300) until it answers."""
        lifecycle.start(self.name, timeout_s=float(await_running or 300), settings=self._settings)

    def stop(self, await_stopped: int | None = None) -> None:
        """Stop the server: no process or port is left when it returns (`await_stopped` is hsml's, unused)."""
        lifecycle.stop(self.name, settings=self._settings)

    def get_state(self) -> PredictorState:
        """Its state now: status ('Running', 'Stopped', 'Starting', 'Failed'), why, and the instances up."""
        serving = lifecycle.get(self.name, self._settings)
        return PredictorState(str(serving.status), serving.status.reason, serving.available_instances)

    def is_running(self) -> bool:
        """Whether its server is up and answering."""
        return self.get_state().status == "Running"

    def is_stopped(self) -> bool:
        """Whether it is stopped (a failed deployment is neither running nor stopped)."""
        return self.get_state().status == "Stopped"

    def predict(self, data: object = None, inputs: object = None) -> Any:
        """hsml's predict: `inputs` (one instance, or a list of them) or `data` (the request body,
        {"instances": [...]}); the answer is the server's, {"predictions": [...]}."""
        return lifecycle.make_inference_request(self.name, request_body(data, inputs), settings=self._settings)

    def to_dict(self) -> dict[str, Any]:
        """What describe() prints: hsml's fields of the deployment's predictor, as the serving records them."""
        serving = lifecycle.get(self.name, self._settings)
        described = self.predictor.to_dict()
        described.update(id=serving.id, name=self.name, model_path=serving.model_path,
                         model_version=serving.model_version, predictor=serving.predictor,
                         transformer=serving.transformer, model_server=serving.model_server,
                         serving_tool=serving.serving_tool, created=serving.created, creator=serving.creator,
                         requested_instances=serving.requested_instances,
                         inference_logging=serving.inference_logging, batching_enabled=serving.batching_enabled)
        return described

    def describe(self) -> None:
        """Print the deployment as JSON (its predictor's fields), as hsml does."""
        _print_json(self.to_dict())

    def get_logs(self, component: str = "predictor", tail: int = 10) -> str:
        """The last `tail` lines of the serving's log (printed, as hsml does, and returned)."""
        path = lifecycle.log_path(self._settings, self._settings.project, self.name)
        text = lifecycle.log_tail(path, tail)
        print(text)
        return text

    def delete(self, force: bool = False) -> None:
        """Stop the deployment if it runs and remove its definition (its log stays), as hsml's delete(force=True)
        does; here a running deployment is stopped with or without `force`."""
        if force and self.get_state().status in ("Running", "Starting"):
            self.stop()
        lifecycle.delete(self.name, settings=self._settings)


class ModelServing:
    """`project.get_model_serving()`."""

    def __init__(self, settings: config.Settings) -> None:
        self._settings = settings

    def create_predictor(self, model: SavedModel, name: str | None = None, script_file: str | None = None,
                         resources: Resources | dict[str, Any] | None = None,
                         inference_logger: InferenceLogger | str | None = None,
                         inference_batcher: InferenceBatcher | bool | None = None,
                         canary_version: int | SavedModel | None = None, canary_traffic_percent: int | None = None,
                         transformer: Transformer | dict[str, Any] | None = None, **_: object) -> Predictor:
        """hsml's create_predictor; `canary_version` (a version number, or a saved version of the same model) and
        `canary_traffic_percent` are hopsml's: the deployment saves them as create_or_update's `Canary`."""
        if isinstance(resources, dict):
            resources = Resources(num_instances=int(resources.get("num_instances", 1)))
        if isinstance(inference_logger, str):
            inference_logger = InferenceLogger(mode=inference_logger)
        if isinstance(inference_batcher, bool):
            inference_batcher = InferenceBatcher(enabled=inference_batcher)
        if model.version is None:
            raise ServingError(f"model {model.name!r} is not saved yet: model.save(path) first")
        if canary_version is not None and not isinstance(canary_version, int):
            saved = getattr(canary_version, "version", None)
            if getattr(canary_version, "name", model.name) != model.name or saved is None:
                raise ServingError(f"canary_version must be a version of model {model.name!r} (a number, or a "
                                   f"saved version of it), not {canary_version!r}")
            canary_version = int(saved)
        if canary_traffic_percent is not None and canary_version is None:
            raise ServingError(f"canary_traffic_percent={canary_traffic_percent} needs a canary_version")
        if isinstance(transformer, dict):
            transformer = Transformer(**transformer)
        return Predictor(model.name, int(model.version), name or model.name, script_file, resources, inference_logger,
                         inference_batcher, self._settings, canary_version, canary_traffic_percent, transformer)

    def create_transformer(self, script_file: str | None = None, resources: object = None) -> Transformer:
        """hsml's transformer: a script whose `Transformer` pre- and post-processes the predictor's requests."""
        if not script_file:
            raise ServingError("create_transformer needs script_file=: a .py with a Transformer class "
                               "(preprocess(self, inputs), postprocess(self, outputs))")
        return Transformer(script_file, resources)

    def create_deployment(self, predictor: Predictor, name: str | None = None, **_: object) -> Deployment:
        """A deployment of `predictor` named `name` (default: the predictor's); nothing is written until save()."""
        return Deployment(predictor, name)

    def get_deployment(self, name: str) -> Deployment:
        """The deployment `name`, as its serving is recorded; ServingNotFound when the project has none such."""
        serving = lifecycle.get(name, self._settings)
        return Deployment(Predictor(serving.model_name, serving.model_version, name, serving.predictor,
                                    settings=self._settings, canary_version=serving.canary_version,
                                    canary_traffic_percent=(serving.canary_traffic_percent
                                                            if serving.canary_version is not None else None),
                                    transformer=Transformer(serving.transformer) if serving.transformer else None),
                          name)

    def get_deployment_by_id(self, id: int) -> Deployment:  # noqa: A002 - hsml's name
        """The deployment whose serving has id `id`; ServingNotFound when none has."""
        for serving in lifecycle.get_all(self._settings):
            if int(serving.id) == int(id):
                return self.get_deployment(serving.name)
        raise ServingNotFound(f"no deployment with id {id} in project {self._settings.project!r}")

    def get_deployments(self, model: SavedModel | None = None, status: str | None = None) -> list[Deployment]:
        """Every deployment of the project; with `model`, only those serving that model, with `status` (e.g.
        'Running'), only those in it."""
        found = [self.get_deployment(s.name) for s in lifecycle.get_all(self._settings)
                 if model is None or s.model_name == model.name]
        return [d for d in found if status is None or d.get_state().status.lower() == status.lower()]


def request_body(data: object = None, inputs: object = None) -> dict[str, Any]:
    """The REST request body hsml's `predict(data=, inputs=)` sends: `data` as given (a dict with a non-empty
    2-dimensional "instances" or "inputs" list); `inputs` (a dict, a list of rows, or one row) made two-dimensional:
    a row of plain values (`[4467360740682089]`) is one instance, `[[...]]`, and a dict one instance of one value,
    `[[{...}]]`, so a predictor's `predict(inputs)` finds the first value at `inputs[0][0]`."""
    if data is not None and inputs is not None:
        raise ServingError("predict takes data= (the request body) or inputs= (the instances), not both")
    if data is not None:
        if not isinstance(data, dict):
            raise ServingError(f"predict(data=...) takes the request body as a dict, e.g. {{'instances': [[1.0]]}}, "
                               f"not a {type(data).__name__}; pass the values as inputs=... instead")
        payload = data.get("instances", data.get("inputs"))
        if payload is None:
            raise ServingError("predict(data=...) lacks the 'instances' key: send {'instances': [[...], ...]}")
        if not isinstance(payload, list) or not payload or not isinstance(payload[0], list) or not payload[0]:
            raise ServingError("predict(data=...): 'instances' must be a non-empty list of non-empty rows, "
                               "e.g. {'instances': [[1.0, 2.0]]}")
        return data
    if isinstance(inputs, dict):
        return {"instances": [[inputs]]}
    if not isinstance(inputs, list):
        raise ServingError(f"predict(inputs=...) takes a list (one row, or a list of rows) or a dict, not "
                           f"{'nothing' if inputs is None else 'a ' + type(inputs).__name__}")
    if not inputs:
        raise ServingError("predict(inputs=[]): there is nothing to predict; give one row or a list of rows")
    if all(isinstance(row, (list, dict)) for row in inputs):
        return {"instances": inputs}
    return {"instances": [inputs]}


def _print_json(described: dict[str, Any]) -> None:
    """hsml's describe(): the fields as indented, sorted JSON on stdout (a notebook's cell output)."""
    print(json.dumps(described, indent=4, sort_keys=True, default=str))


def _script(settings: config.Settings, script_file: str | None) -> str | None:
    """A predictor script as the serving takes it: any path form `hdfs` reads (the serving resolves it, as
    hsml's '/Projects/<project>/...'); a local file outside the root is uploaded to the project's Resources/
    first, since the serving's hosts read the root."""
    if script_file is None or not (os.path.isabs(script_file) and os.path.isfile(script_file)):
        return script_file
    storage = Storage(settings.root)
    try:
        hdfs.root_relative(script_file, storage, settings.project)
        return script_file   # inside the root already
    except hdfs.InvalidPathError:
        target = layout.join(layout.project_dir(settings.project), "Resources", os.path.basename(script_file))
        storage.upload(script_file, target)
        return layout.join("Resources", os.path.basename(script_file))
