"""Model servings with hops' `hops.serving` names: serve a registry version over TF Serving's REST API.

    from hopsml import model, serving
    model.export("model.joblib", "iris")
    serving.create_or_update("iris", "Models/iris", "PYTHON", model_version=1, instances=2)
    serving.start("iris")
    serving.make_inference_request("iris", {"instances": [[5.1, 3.5, 1.4, 0.2]]})
    serving.stop("iris")

Where Hopsworks' server did the work, a local server does it: `start` runs `instances` processes behind
one port (127.0.0.1 unless `host=` says otherwise) under a supervisor that outlives the notebook and
restarts a crashed instance; the definition and the server's state live in the project
(`Serving/<name>/`), its log in `Logs/Serving/<name>/`. Parameters for Hopsworks services hopsml does not
run (the Kafka topic and its partitions and replicas, `kserve`,
`transformer_instances`, `artifact_version`, `predictor_resource_config`) are checked as hops checks them
and recorded, and change nothing here; the transformer runs inside each instance. What hops sent to the Kafka
topic (`inference_logging`: 'MODEL_INPUTS', 'PREDICTIONS' or 'ALL', the default) goes to the serving's
inference log, Parquet files in `Logs/Serving/<name>/inference/`; `monitor(name)` compares its inputs with the
training dataset. hopsml's own extensions come after hops' parameters in small typed groups, shared by the CLI,
the hsml face and the KServe export: `batching=Batching(...)`, `canary=Canary(version=2, traffic_percent=20)`,
`scaling=Scaling(...)`, `models=Models(names=[...])`, `inference_log=InferenceLog(...)`. A canary version serves
beside the stable one until `promote`, `rollback`, or `canary_gate(name)`, which decides on what the canary's
traffic looked like (control/canary.py). Importing this package starts nothing.

Laid out by process role, as `launcher/` is: `control/` runs in the user's process, `server/` is the supervisor's
process, `instance/` an instance's, `analysis/` reads the inference log in the user's process; what they share is
here (`definition`: what a serving is; `autoscale`: the load file the instances write and the supervisor reads).
Lowest first, shared -> instance -> server -> analysis -> control -> this face: nothing imports upward.
"""

from __future__ import annotations

import logging
from typing import Any

from hopsml.serving.analysis.monitor import monitor
from hopsml.serving.control.canary import gate as canary_gate
from hopsml.serving.control.canary import promote, rollback
from hopsml.serving.control.lifecycle import (
    InferenceError,
    KafkaTopic,
    Serving,
    Status,
    create_or_update,
    delete,
    get_all,
    get_inference_log,
    get_status,
    make_inference_request,
    start,
    stop,
)
from hopsml.serving.control.lifecycle import get as _get
from hopsml.serving.definition import (
    MODEL_SERVERS,
    PYTHON,
    TENSORFLOW_SERVING,
    Batching,
    Canary,
    InferenceLog,
    Models,
    Scaling,
    ServingError,
    ServingNotFound,
)

log = logging.getLogger(__name__)


def exists(serving_name: str) -> bool:
    """Whether the project has a serving of that name."""
    return get_id(serving_name) is not None


def get(serving_name: str) -> Serving | None:
    """The serving of that name, None if there is none (as hops)."""
    try:
        return _get(serving_name)
    except ServingNotFound:
        return None


def get_id(serving_name: str) -> int | None:
    """The serving's id, None if there is none (as hops)."""
    found = get(serving_name)
    return found.id if found is not None else None


def get_model_path(serving_name: str) -> str:
    """The registry folder of the served model, `Projects/<project>/Models/<name>`."""
    return _get(serving_name).model_path


def get_model_name(serving_name: str) -> str:
    """The name of the served model (hops 3.8 returned the version here by mistake)."""
    return _get(serving_name).model_name


def get_model_version(serving_name: str) -> int:
    """The model version the serving answers with (its stable one; a canary's is get_canary_version's)."""
    return _get(serving_name).model_version


def get_artifact_version(serving_name: str) -> int | str | None:
    """As given to create_or_update: hopsml serves the version folder itself and makes no artifacts."""
    return _get(serving_name).artifact_version


def get_predictor(serving_name: str) -> str | None:
    """The serving's predictor script (its path as recorded), None when the model is served without one."""
    return _get(serving_name).predictor


def get_transformer(serving_name: str) -> str | None:
    """The serving's transformer script (its path as recorded), None when requests go to the predictor as sent."""
    return _get(serving_name).transformer


def get_model_server(serving_name: str) -> str:
    """'PYTHON' or 'TENSORFLOW_SERVING'."""
    return _get(serving_name).model_server


def get_serving_tool(serving_name: str) -> str:
    """'DEFAULT', or 'KSERVE' when it was asked for (recorded; the local server is the same)."""
    return _get(serving_name).serving_tool


def get_available_instances(serving_name: str) -> int | tuple[int, int]:
    """Instances answering now; (instances, transformer instances) when there is a transformer, as hops."""
    found = _get(serving_name)
    if found.available_transformer_instances is None:
        return found.available_instances
    return found.available_instances, found.available_transformer_instances


def get_kafka_topic(serving_name: str) -> str | None:
    """The topic name given to create_or_update ('CREATE' by default; None for 'NONE'). hopsml runs no Kafka:
    the requests and answers hops sent to the topic are in the serving's inference log instead, Parquet files
    in `Logs/Serving/<name>/inference/` (`get_inference_log(name)` gives the folder; it is logged here too)."""
    found = _get(serving_name)
    where = get_inference_log(serving_name)
    log.info("serving %s: no Kafka topic here; its inference log is %s", serving_name,
             where if where is not None else "off (inference_logging or topic_name is None/'NONE')")
    return found.kafka_topic_dto.name


def get_predictor_resource_config(serving_name: str) -> dict[str, Any] | None:
    """As given to create_or_update (recorded; the local server takes what the machine has)."""
    return _get(serving_name).predictor_resource_config


def get_internal_endpoints(serving_name: str) -> list[str] | None:
    """['http://<host>:<port>'] of the running server, None when it is not running."""
    found = _get(serving_name)
    if found.internal_path is None:
        return None
    return [f"http://{ip}:{found.internal_port}" for ip in found.internal_ips]


def describe(serving_name: str) -> None:
    """Log every field of the serving (hops logs them too), status reason and restarts included."""
    found = _get(serving_name)
    log.info(", ".join(f"{key}: {value}" for key, value in vars(found).items()))
    if found.status.reason:
        log.info("status reason: %s\nlast log lines:\n%s", found.status.reason, found.status.log_tail)


__all__ = ["MODEL_SERVERS", "PYTHON", "TENSORFLOW_SERVING", "Batching", "Canary", "InferenceError", "InferenceLog",
           "Models", "Scaling", "KafkaTopic", "Serving", "ServingError",
           "ServingNotFound", "Status", "create_or_update", "delete", "describe", "exists", "get", "get_all",
           "get_artifact_version", "get_available_instances", "get_id", "get_inference_log", "get_internal_endpoints",
           "get_kafka_topic",
           "get_model_name", "get_model_path", "get_model_server", "get_model_version", "get_predictor",
           "get_predictor_resource_config", "get_serving_tool", "get_status", "get_transformer",
           "make_inference_request", "monitor", "start", "stop", "canary_gate", "promote", "rollback"]
