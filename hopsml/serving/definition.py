"""A serving's definition: what to serve and how, kept as JSON in the project so that it outlives the
notebook that made it (Hopsworks kept it in its database; here `Serving/<name>/serving.json`).

The fields are hops' `create_or_update` parameters. Those that name Hopsworks services (Kafka topic,
KServe, resource config) are validated as hops validates them and recorded, and change nothing locally.
hopsml's own extensions are set through small typed groups (`Batching`, `Canary`, `Scaling`, `Models`,
`InferenceLog`), which `create_or_update`, the CLI, hsml's deployments and the KServe export share; each field of a
group is one flat key of serving.json, so records written before the groups read as they did.
"""

from __future__ import annotations

import getpass
import os
import posixpath
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from functools import partial
from typing import Any, ClassVar, TypeVar

from hopsml import layout
from hopsml.clock import utc_now as _now
from hopsml.errors import HopsmlError, InvalidNameError
from hopsml.fs import Storage
from hopsml.records import BrokenRecordError, Shape, read_or_broken, read_record

TENSORFLOW_SERVING = "TENSORFLOW_SERVING"
PYTHON = "PYTHON"
MODEL_SERVERS = (TENSORFLOW_SERVING, PYTHON)
SERVING_TOOL_DEFAULT = "DEFAULT"
SERVING_TOOL_KSERVE = "KSERVE"
INFERENCE_LOGGING_MODES = ("MODEL_INPUTS", "PREDICTIONS", "ALL")
DEFAULT_HOST = "127.0.0.1"

_NAME = re.compile(r"^[a-zA-Z0-9]+$")


class ServingError(HopsmlError, ValueError):
    """A serving cannot be defined, started or queried as asked; the message says what to change."""


class ServingNotFound(ServingError, LookupError):
    """No serving of that name in the project (hops' name for this error)."""


class MovedOptionError(HopsmlError, TypeError):
    """A keyword of hopsml's own that `create_or_update` took flat and now takes in its group; the message names
    the group to use."""


def _whole(what: str, number: object, low: int) -> None:
    if number is not None and (isinstance(number, bool) or not isinstance(number, int) or number < low):
        raise ServingError(f"{what} must be a whole number of at least {low}, not {number!r}")


def _above_zero(what: str, number: object, unit: str = "a number") -> None:
    if number is not None and (isinstance(number, bool) or not isinstance(number, (int, float)) or not number > 0):
        raise ServingError(f"{what} must be {unit} above 0, not {number!r}")


G = TypeVar("G", bound="OptionGroup")


class OptionGroup:
    """What the option groups share: each field is one key of serving.json (`RECORD`, which stays flat so that old
    records read), and a field left None keeps the serving's value (the default, for a new serving)."""

    RECORD: ClassVar[dict[str, str]]   # field -> its serving.json key
    KEYWORD: ClassVar[str]             # create_or_update's keyword for the group

    def to_record(self) -> dict[str, Any]:
        """The fields given (not None) under their serving.json keys."""
        found = {key: getattr(self, name) for name, key in self.RECORD.items() if getattr(self, name) is not None}
        return {key: list(value) if isinstance(value, tuple) else value for key, value in found.items()}

    @classmethod
    def from_record(cls: type[G], record: Mapping[str, Any]) -> G:
        """The group as a definition (or its serving.json) holds it."""
        return cls(**{name: record.get(key) for name, key in cls.RECORD.items()})


@dataclass(frozen=True)
class Batching(OptionGroup):
    """TF Serving's batching knobs, used with hops' `batching_enabled=True` (instance/batching.py): a batch is
    called at `max_batch_size` rows or `batch_timeout_micros` after its first request; past `max_enqueued_batches`
    waiting batches a request gets 503."""

    RECORD: ClassVar[dict[str, str]] = {"max_batch_size": "max_batch_size",
                                        "batch_timeout_micros": "batch_timeout_micros",
                                        "max_enqueued_batches": "max_enqueued_batches"}
    KEYWORD: ClassVar[str] = "batching"

    max_batch_size: int | None = None
    batch_timeout_micros: int | None = None
    max_enqueued_batches: int | None = None

    def __post_init__(self) -> None:
        _whole("Batching.max_batch_size", self.max_batch_size, 1)
        _whole("Batching.batch_timeout_micros", self.batch_timeout_micros, 0)
        _whole("Batching.max_enqueued_batches", self.max_enqueued_batches, 1)


@dataclass(frozen=True)
class Canary(OptionGroup):
    """Another version of the serving's model served beside the stable one, taking `traffic_percent` of the
    requests that name no version (10 when a new canary gives none); control/canary.py promotes or drops it."""

    RECORD: ClassVar[dict[str, str]] = {"version": "canary_version", "traffic_percent": "canary_traffic_percent"}
    KEYWORD: ClassVar[str] = "canary"

    version: int | None = None
    traffic_percent: int | None = None

    def __post_init__(self) -> None:
        version = self.version
        if version is not None and (isinstance(version, bool) or not isinstance(version, int) or version < 1):
            raise ServingError(f"Canary.version must be a model version (1 or more), not {version!r}")
        percent = self.traffic_percent
        if percent is not None and (isinstance(percent, bool) or not isinstance(percent, int)
                                    or not 0 <= percent <= 100):
            raise ServingError(f"Canary.traffic_percent must be a whole number from 0 to 100, not {percent!r}")


@dataclass(frozen=True)
class Scaling(OptionGroup):
    """Scaling with load (KServe's minReplicas/maxReplicas/scaleTarget on concurrency; autoscale.py): between
    `min_instances` (0: to zero after a window without requests) and `max_instances`, aiming at `target` concurrent
    requests per instance over `window_s` seconds (scaling out looks a tenth as far back)."""

    RECORD: ClassVar[dict[str, str]] = {"min_instances": "min_instances", "max_instances": "max_instances",
                                        "target": "scale_target", "window_s": "scale_window_s"}
    KEYWORD: ClassVar[str] = "scaling"

    min_instances: int | None = None
    max_instances: int | None = None
    target: float | None = None
    window_s: float | None = None

    def __post_init__(self) -> None:
        _whole("Scaling.min_instances", self.min_instances, 0)
        _whole("Scaling.max_instances", self.max_instances, 1)
        if self.min_instances is not None and self.max_instances is not None \
                and self.min_instances > self.max_instances:
            raise ServingError(f"Scaling.min_instances ({self.min_instances}) is more than Scaling.max_instances "
                               f"({self.max_instances})")
        _above_zero("Scaling.target", self.target)
        _above_zero("Scaling.window_s", self.window_s)


@dataclass(frozen=True)
class Models(OptionGroup):
    """Several models per server (instance/multiplex.py): other registered models, by name, that the serving's
    instances answer for too, each loaded on its first request; past `max_loaded` models or `max_memory_mb` MiB the
    least recently used is evicted. `names=[]` serves every version of the serving's own model that way."""

    RECORD: ClassVar[dict[str, str]] = {"names": "models", "max_loaded": "max_loaded_models",
                                        "max_memory_mb": "max_models_memory_mb"}
    KEYWORD: ClassVar[str] = "models"

    names: Sequence[str] | None = None
    max_loaded: int | None = None
    max_memory_mb: float | None = None

    def __post_init__(self) -> None:
        if self.names is not None:
            if isinstance(self.names, str) or not isinstance(self.names, Sequence) \
                    or not all(isinstance(m, str) for m in self.names):
                raise ServingError(f"Models.names must be a list of registered model names, not {self.names!r}")
            for name in self.names:
                try:
                    layout.validate_name(name, "model name")
                except InvalidNameError as exc:
                    raise ServingError(f"Models.names: {exc}") from None
            if len(set(self.names)) != len(self.names):
                raise ServingError(f"Models.names lists a model twice: {list(self.names)!r}")
            object.__setattr__(self, "names", tuple(self.names))
        _whole("Models.max_loaded", self.max_loaded, 1)
        _above_zero("Models.max_memory_mb", self.max_memory_mb, "a number of MiB")


@dataclass(frozen=True)
class InferenceLog(OptionGroup):
    """How the inference log (hops' `inference_logging`; instance/inference_log.py) writes its Parquet files: a file
    every `roll_seconds` or at `roll_bytes`, with at most `queue` records waiting for the writer (more are dropped
    and counted, never slowing a request)."""

    RECORD: ClassVar[dict[str, str]] = {"roll_seconds": "inference_log_roll_seconds",
                                        "roll_bytes": "inference_log_roll_bytes", "queue": "inference_log_queue"}
    KEYWORD: ClassVar[str] = "inference_log"

    roll_seconds: int | None = None
    roll_bytes: int | None = None
    queue: int | None = None

    def __post_init__(self) -> None:
        _whole("InferenceLog.roll_seconds", self.roll_seconds, 1)
        _whole("InferenceLog.roll_bytes", self.roll_bytes, 1)
        _whole("InferenceLog.queue", self.queue, 1)


OPTION_GROUPS: tuple[type[OptionGroup], ...] = (Batching, Canary, Scaling, Models, InferenceLog)


def moved_option(keyword: str) -> str | None:
    """Where a flat keyword create_or_update once took now goes ('max_batch_size= is now
    batching=Batching(max_batch_size=...)'), None for a keyword that never was one of them."""
    for group in OPTION_GROUPS:
        for name, key in group.RECORD.items():
            if key == keyword and key != group.KEYWORD:
                return f"{key}= is now {group.KEYWORD}={group.__name__}({name}=...)"
    return None


def check_name(serving_name: object) -> str:
    """hops' rule for serving names (letters and digits, at most 256), which also makes a safe folder name."""
    if not isinstance(serving_name, str) or not _NAME.match(serving_name) or len(serving_name) > 256:
        raise ServingError(f"invalid serving name {serving_name!r}: use 1-256 letters and digits only "
                           "(as Hopsworks requires), e.g. 'mnist' or 'irisClassifier2'")
    return serving_name


@dataclass
class ServingDefinition:
    """What `create_or_update` recorded; `model_name`/`model_version` name the registry version served."""

    name: str
    model_path: str
    model_name: str
    model_version: int
    model_server: str
    id: int = 0
    artifact_version: int | str | None = None
    predictor: str | None = None
    transformer: str | None = None
    serving_tool: str = SERVING_TOOL_DEFAULT
    batching_enabled: bool = False
    topic_name: str | None = "CREATE"
    num_partitions: int = 1
    num_replicas: int = 1
    inference_logging: str | None = "ALL"
    instances: int = 1
    transformer_instances: int | None = None
    predictor_resource_config: dict[str, Any] | None = None
    host: str = DEFAULT_HOST
    port: int = 0
    max_body_bytes: int = 16 << 20
    max_batch_size: int = 32
    batch_timeout_micros: int = 1000
    max_enqueued_batches: int = 100
    inference_log_roll_seconds: int = 10
    inference_log_roll_bytes: int = 8 << 20
    inference_log_queue: int = 10000
    canary_version: int | None = None     # a second version of the model, served beside model_version (stable)
    canary_traffic_percent: int = 0       # of the requests that name no version, sent to the canary
    # Scaling with load (KServe's minReplicas/maxReplicas/scaleTarget on concurrency): None = `instances`, fixed.
    min_instances: int | None = None      # 0: scale to zero after `scale_window_s` without a request
    max_instances: int | None = None
    scale_target: float = 10.0            # concurrent requests per instance the autoscaler aims at
    scale_window_s: float = 30.0          # scaling in (and to zero) looks this far back; out, a tenth of it
    # Several models per server (multiplex.py): other registry models its instances also answer for, by name, each
    # loaded on its first request; the least recently used evicted past either bound. None: one model, as hops.
    models: list[str] | None = None
    max_loaded_models: int | None = None
    max_models_memory_mb: float | None = None
    creator: str = field(default_factory=lambda: os.environ.get("HOPSML_USER") or getpass.getuser())
    created: str = field(default_factory=_now)

    def __post_init__(self) -> None:
        check_name(self.name)
        if self.model_server not in MODEL_SERVERS:
            raise ServingError(f"model_server {self.model_server!r} is not supported; use one of "
                               f"{', '.join(MODEL_SERVERS)}")
        for what, number, low in (("instances", self.instances, 1), ("model_version", self.model_version, 1),
                                  ("num_partitions", self.num_partitions, 1), ("num_replicas", self.num_replicas, 1),
                                  ("port", self.port, 0), ("max_body_bytes", self.max_body_bytes, 1)):
            if isinstance(number, bool) or not isinstance(number, int) or number < low:
                raise ServingError(f"{what} must be a whole number of at least {low}, not {number!r}")
        record = vars(self)
        for group in OPTION_GROUPS:   # each checks its own values; what needs two groups or hops' fields is below
            group.from_record(record)
        for key in ("max_batch_size", "batch_timeout_micros", "max_enqueued_batches", "inference_log_roll_seconds",
                    "inference_log_roll_bytes", "inference_log_queue", "canary_traffic_percent", "scale_target",
                    "scale_window_s"):
            if record[key] is None:
                raise ServingError(f"{key} must be given (it has a default); remove it from the record to take that")
        if self.canary_version is not None and self.canary_version == self.model_version:
            raise ServingError(f"the canary's version {self.canary_version} is the stable version itself; give "
                               "another version of the model")
        if self.canary_traffic_percent and self.canary_version is None:
            raise ServingError(f"a canary's traffic_percent={self.canary_traffic_percent} needs its version: "
                               "Canary(version=V, traffic_percent=P)")
        low, high = self.scaling_bounds
        if low > high:
            raise ServingError(f"min_instances ({low}) is more than max_instances ({high})")
        self._check_models()
        if not 0 <= self.port <= 65535:
            raise ServingError(f"port {self.port} is not a port: give 1-65535, or 0 for any free one")
        if self.transformer_instances is not None and (isinstance(self.transformer_instances, bool) or not
                                                       isinstance(self.transformer_instances, int)):
            raise ServingError(f"transformer_instances must be a whole number, not {self.transformer_instances!r}")
        if not isinstance(self.batching_enabled, bool):
            raise ServingError(f"batching_enabled must be True or False, not {self.batching_enabled!r}")
        if self.inference_logging is not None and self.inference_logging not in INFERENCE_LOGGING_MODES:
            raise ServingError(f"inference_logging {self.inference_logging!r} is not a mode; use one of "
                               f"{', '.join(INFERENCE_LOGGING_MODES)}")
        if self.model_server == TENSORFLOW_SERVING and self.predictor is not None:
            raise ServingError("a predictor script needs model_server='PYTHON' (TensorFlow Serving runs no "
                               "Python code, as on Hopsworks)")
        if self.predictor_resource_config is not None:
            config = self.predictor_resource_config
            if not isinstance(config, dict) or "memory" not in config or "cores" not in config:
                raise ServingError("predictor_resource_config must be a dict with the keys 'memory' and 'cores', "
                                   "e.g. {'memory': 2048, 'cores': 1, 'gpus': 0}")

    def _check_models(self) -> None:
        if self.models is not None:
            if not isinstance(self.models, list):
                raise ServingError(f"models must be a list of registered model names, not {self.models!r}")
            if self.model_name in self.models:
                raise ServingError(f"Models.names lists {self.model_name!r}, the serving's own model: its versions "
                                   f"are served already, at /v1/models/{self.name}/versions/<v>")
            if self.canary_version is not None:
                raise ServingError("a canary needs a serving of one model; with Models(names=[...]) each version is "
                                   f"served at /v1/models/{self.name}/versions/<v> instead")
        elif self.max_loaded_models is not None or self.max_models_memory_mb is not None:
            raise ServingError("Models.max_loaded and Models.max_memory_mb bound a serving of several models: give "
                               "Models(names=[...]) too")

    @property
    def scaling_bounds(self) -> tuple[int, int]:
        """(min, max) instances; both `instances` when neither bound is given, and `instances` standing in for the
        bound not given (so `max_instances=4` alone scales between `instances` and 4)."""
        low = self.instances if self.min_instances is None else self.min_instances
        high = max(self.instances, low) if self.max_instances is None else self.max_instances
        return low, high

    @property
    def autoscaled(self) -> bool:
        low, high = self.scaling_bounds
        return high > low

    @property
    def batching_options(self) -> Batching:
        """The batching knobs as recorded (used when `batching_enabled`)."""
        return Batching.from_record(vars(self))

    @property
    def canary_options(self) -> Canary | None:
        """The canary, None when the serving has none."""
        return Canary.from_record(vars(self)) if self.canary_version is not None else None

    @property
    def scaling_options(self) -> Scaling:
        """Scaling with load as recorded (both bounds None: `instances`, fixed; `scaling_bounds` resolves them)."""
        return Scaling.from_record(vars(self))

    @property
    def models_options(self) -> Models | None:
        """The other models served, None for a serving of one model (as hops)."""
        return Models.from_record(vars(self)) if self.models is not None else None

    @property
    def inference_log_options(self) -> InferenceLog:
        return InferenceLog.from_record(vars(self))

    @property
    def logs_inferences(self) -> bool:
        """Whether requests are logged: an `inference_logging` mode and a topic (hops logged nothing with
        topic_name 'NONE' or None; the topic itself is not used here)."""
        return self.inference_logging is not None and self.topic_name not in (None, "NONE")

    @property
    def kserve(self) -> bool:
        return self.serving_tool == SERVING_TOOL_KSERVE

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ServingDefinition:
        names = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in data.items() if k in names})


def restart_needed(old: ServingDefinition, new: ServingDefinition) -> str | None:
    """Why a running serving must restart to take `new` instead of reloading it in place (None: it reloads). A
    reload starts the new definition's instances beside the running ones on the same socket and drains the old
    ones, so what the socket, the autoscaler's slots or a catalog of several models was set up with must stay."""
    kept = {"host": "its host", "port": "its port", "scaling_bounds": "its instance bounds (autoscaling)",
            "models": "the models it serves besides its own", "logs_inferences": "whether it logs inferences",
            "serving_tool": "KServe or not", "model_name": "its model"}
    changed = [what for name, what in kept.items() if getattr(old, name) != getattr(new, name)]
    if old.autoscaled or old.models is not None:
        changed.insert(0, "an autoscaled serving or one of several models")
    return ", ".join(changed) or None


def parse_model_path(model_path: str, project: str, model_version: int | None) -> tuple[str, int | None]:
    """(model name, version or None) from hops' `model_path`: 'Models/<name>', '/Models/<name>/<version>',
    '/Projects/<project>/Models/<name>', 'hdfs://nn/Projects/...' or a URI of the root; a version in the
    path wins over `model_version`."""
    if not isinstance(model_path, str) or not model_path.strip():
        raise ServingError(f"model_path must be a path such as 'Models/mnist', not {model_path!r}")
    text = model_path.strip()
    if "://" in text:
        text = "/" + text.split("://", 1)[1].split("/", 1)[-1]  # drop scheme and namenode / bucket
    parts = [p for p in posixpath.normpath("/" + text).split("/") if p]
    if layout.MODELS in parts:
        at = len(parts) - 1 - parts[::-1].index(layout.MODELS)
        before = parts[:at]
        if len(before) >= 2 and before[-2] == layout.PROJECTS and before[-1] != project:
            raise ServingError(f"model_path {model_path!r} is in project {before[-1]!r}; a serving serves models "
                               f"of its own project ({project!r})")
        parts = parts[at:]
    if len(parts) < 2 or parts[0] != layout.MODELS or len(parts) > 3:
        raise ServingError(f"model_path {model_path!r} is not a registry model: give 'Models/<name>' or "
                           "'Models/<name>/<version>' as hops does (export it first with hopsml.model.export)")
    name = layout.validate_name(parts[1], "model name")
    if len(parts) == 3:
        return name, layout.validate_version(parts[2])
    return name, model_version


def read(storage: Storage, project: str, name: str) -> ServingDefinition:
    """The definition of serving `name`, or ServingNotFound naming those that exist."""
    sdir = layout.ServingDir.of(project, check_name(name))
    if not storage.exists(sdir.definition):
        known = ", ".join(names(storage, project)) or "none"
        raise ServingNotFound(f"no serving {name!r} in project {project!r} (servings: {known}); create it with "
                              "hopsml.serving.create_or_update(name, 'Models/<model>', 'PYTHON')")
    return _parse(storage, sdir.definition)


# What serving.json must hold before a ServingDefinition is made of it (which checks the rest).
DEFINITION_SHAPE = Shape(layout.SERVING_DEFINITION, required=("name", "model_path", "model_name", "model_version"),
                         types={"name": (str,), "model_path": (str,), "model_name": (str,), "model_version": (int,),
                                "id": (int,), "instances": (int,), "predictor": (str,), "transformer": (str,),
                                "host": (str,), "port": (int,)})


def _parse(storage: Storage, rel: str) -> ServingDefinition:
    """The definition at `rel` through the guarded reader; BrokenRecordError naming the file and the reason."""
    data = read_record(storage, rel, DEFINITION_SHAPE)
    try:
        return ServingDefinition.from_dict(data)
    except (TypeError, ServingError) as exc:
        reason = f"{layout.SERVING_DEFINITION} does not define a serving: {exc}"
        raise BrokenRecordError(f"{reason}. The record is {storage.uri(rel)}: create the serving again with "
                                "hopsml.serving.create_or_update, or remove its folder", reason=reason) from None


def scan(storage: Storage, project: str) -> list[tuple[str, ServingDefinition | BrokenRecordError]]:
    """Every serving of the project by name: its definition, or why it cannot be read (listed as BROKEN)."""
    found: list[tuple[str, ServingDefinition | BrokenRecordError]] = []
    for name in names(storage, project):
        rel = layout.ServingDir.of(project, name).definition
        found.append((name, read_or_broken(partial(_parse, storage, rel), layout.SERVING_DEFINITION)))
    return found


def write(storage: Storage, project: str, definition: ServingDefinition) -> None:
    storage.write_json(layout.ServingDir.of(project, definition.name).definition, definition.to_dict())


def names(storage: Storage, project: str) -> list[str]:
    """Every serving of the project with a definition, by name."""
    found = []
    for rel in storage.ls(layout.servings_dir(project)):
        base = posixpath.basename(rel)
        if _NAME.match(base) and storage.exists(layout.ServingDir.of(project, base).definition):
            found.append(base)
    return sorted(found)


def next_id(storage: Storage, project: str) -> int:
    """An id for a new serving: one more than the largest in the project (hops' ids are integers)."""
    return max((d.id for _, d in scan(storage, project) if isinstance(d, ServingDefinition)), default=0) + 1
