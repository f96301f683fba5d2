"""A serving as KServe runs it: `export_kserve(name, out_dir)` writes a KServe v1beta1 `InferenceService`
manifest for the serving's definition and the model layout that manifest's `storageUri` reads, so a team
moving to Kubernetes serves the same version there.

What maps to what:

* the model version: copied from the registry into `out_dir/<version>/` in the layout of the runtime that serves
  its kind (scikit-learn pickles for kserve-sklearnserver, ONNX and TorchScript as a Triton model repository,
  a SavedModel as TF Serving's numbered folder; a PYTHON predictor script as a custom predictor, the adapter
  `kserve_predictor.py` beside it); `storageUri` is `<storage_uri>/<version>`, where the team uploads that folder;
* the batcher (`batching_enabled`, `Batching`): `spec.predictor.batcher` (maxBatchSize, maxLatency in
  milliseconds) for the v1 runtimes, whose requests KServe's agent batches; Triton (v2, which KServe's batcher does
  not take) batches by its own `dynamic_batching` in the model's config.pbtxt;
* the canary (`Canary`): KServe splits traffic between the last revision rolled out and the newest one, so a canary
  is two applies: `inferenceservice.yaml` (the stable version), then `inferenceservice-canary.yaml` (the canary's
  `storageUri` with `canaryTrafficPercent`);
* scaling (`Scaling`): minReplicas/maxReplicas from its min/max_instances (both `instances` when fixed), and
  `scaleMetric: concurrency` with `scaleTarget` (whole requests per instance) when the serving scales;
* inference logging: `spec.predictor.logger` mode all/request/response for ALL/MODEL_INPUTS/PREDICTIONS.

The manifests are written with sorted keys and no timestamps (the same serving writes the same bytes), and read
back as YAML into the same mapping.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import tempfile
from dataclasses import dataclass, field
from typing import Any

from hopsml import config
from hopsml.fs import Storage
from hopsml.model import registry
from hopsml.serving import definition as defs
from hopsml.serving.definition import ServingError
from hopsml.serving.instance import loaders

API_VERSION = "serving.kserve.io/v1beta1"
KIND = "InferenceService"
MANIFEST = "inferenceservice.yaml"
CANARY_MANIFEST = "inferenceservice-canary.yaml"
ADAPTER = "kserve_predictor.py"
DEFAULT_STORAGE = "pvc://hopsml-models"   # + /<inferenceservice name>/<version>
LOGGER_MODES = {"ALL": "all", "MODEL_INPUTS": "request", "PREDICTIONS": "response"}
CUSTOM_IMAGE_NEEDS = ("an image with Python 3, `pip install kserve` and what the predictor script imports "
                      "(e.g. scikit-learn, joblib); KServe's storage initializer puts the layout in /mnt/models")

_DNS_LABEL = re.compile(r"[^a-z0-9-]")


class KServeExportError(ServingError):
    """The serving cannot be written as a KServe InferenceService as asked; the message says what to change."""


@dataclass(frozen=True)
class Runtime:
    """How KServe serves one exported version: `model_format` (modelFormat.name) on `runtime` over `protocol`,
    or, with `custom`, a container running the adapter script."""

    model_format: str | None
    runtime: str | None
    protocol: str
    custom: bool = False

    @property
    def batches_itself(self) -> bool:
        """Triton batches by its model config; KServe's batcher takes v1 requests only."""
        return self.protocol == "v2"


SKLEARN = Runtime("sklearn", "kserve-sklearnserver", "v1")
ONNX = Runtime("onnx", "kserve-tritonserver", "v2")
TORCHSCRIPT = Runtime("pytorch", "kserve-tritonserver", "v2")   # Triton's libtorch backend: no .mar archive
TENSORFLOW = Runtime("tensorflow", "kserve-tensorflow-serving", "v1")
CUSTOM = Runtime(None, None, "v1", custom=True)


@dataclass
class KServeExport:
    """What `export_kserve` wrote: the manifests (stable first), each version's layout folder and storageUri."""

    name: str                                   # the InferenceService's name
    out_dir: str
    manifests: list[str]
    layouts: dict[int, str]
    storage_uris: dict[int, str]
    runtimes: dict[int, Runtime]
    manifest: dict[str, Any]
    canary_manifest: dict[str, Any] | None = None
    notes: list[str] = field(default_factory=list)


def inference_service_name(serving_name: str) -> str:
    """The serving's name as a Kubernetes name (DNS-1035: lower case, starting with a letter)."""
    name = _DNS_LABEL.sub("", defs.check_name(serving_name).lower())
    return name if name[:1].isalpha() else f"s{name}"


def export_kserve(serving_name: str, out_dir: str, *, storage_uri: str | None = None, namespace: str | None = None,
                  logger_url: str | None = None, image: str | None = None, overwrite: bool = False,
                  settings: config.Settings | None = None) -> KServeExport:
    """Write the serving's InferenceService manifest(s) and its versions' model layouts into `out_dir`.

    `storage_uri`: where the team will upload `out_dir`'s version folders (s3://bucket/path, gs://..., pvc://claim/
    path); each version's storageUri is `<storage_uri>/<version>`. Default `pvc://hopsml-models/<name>`.
    `logger_url`: where KServe's logger sends requests/responses (KServe's default broker when None).
    `image`: the custom predictor's image, for a serving with a predictor script (see CUSTOM_IMAGE_NEEDS).
    An existing version folder or manifest is replaced only with `overwrite=True`."""
    settings = settings or config.load()
    storage = Storage(settings.root)
    d = defs.read(storage, settings.project, serving_name)
    name = inference_service_name(d.name)
    base = _storage_base(storage_uri, name)
    out_dir = os.path.abspath(os.path.expanduser(out_dir))
    versions = [d.model_version] + ([d.canary_version] if d.canary_version is not None else [])
    targets = {v: os.path.join(out_dir, str(v)) for v in versions}
    manifests = [os.path.join(out_dir, MANIFEST)] + ([os.path.join(out_dir, CANARY_MANIFEST)] if len(versions) > 1
                                                     else [])
    taken = [p for p in list(targets.values()) + manifests if os.path.exists(p)]
    if taken and not overwrite:
        raise KServeExportError(f"{', '.join(taken)} already exist(s); pass overwrite=True (--overwrite) or another "
                                "out_dir")
    os.makedirs(out_dir, exist_ok=True)
    stale = os.path.join(out_dir, CANARY_MANIFEST)
    if d.canary_version is None and os.path.exists(stale):
        if not overwrite:
            raise KServeExportError(f"{stale} is left from an export with a canary; pass overwrite=True (--overwrite) "
                                    "or another out_dir")
        os.remove(stale)   # the serving has no canary now: its old rollout must not be applied by mistake
    runtimes: dict[int, Runtime] = {}
    notes: list[str] = []
    for version, target in targets.items():
        if os.path.exists(target):
            shutil.rmtree(target)
        try:
            runtimes[version] = _write_layout(storage, settings, d, version, target, notes)
        except BaseException:
            shutil.rmtree(target, ignore_errors=True)   # no half-written version folder to upload by mistake
            raise
    uris = {v: f"{base}/{v}" for v in versions}
    stable = manifest(d, runtimes[d.model_version], uris[d.model_version], namespace=namespace,
                      logger_url=logger_url, image=image)
    _write_manifest(manifests[0], stable, _header(d, d.model_version, runtimes[d.model_version], uris))
    canary = None
    if d.canary_version is not None:
        canary = manifest(d, runtimes[d.canary_version], uris[d.canary_version], namespace=namespace,
                          logger_url=logger_url, image=image, canary=d.canary_options)
        _write_manifest(manifests[1], canary, _header(d, d.canary_version, runtimes[d.canary_version], uris))
    return KServeExport(name, out_dir, manifests, targets, uris, runtimes, stable, canary, notes)


# --- the manifest ------------------------------------------------------------------------------------------------
def manifest(d: defs.ServingDefinition, runtime: Runtime, storage_uri: str, *, namespace: str | None = None,
             logger_url: str | None = None, image: str | None = None,
             canary: defs.Canary | None = None) -> dict[str, Any]:
    """The InferenceService for one version of the serving (a pure function of its arguments): the canary's when
    `canary` is given (its traffic_percent), the stable version's otherwise. Batching and scaling are the
    definition's groups (`d.batching_options`, `d.scaling_options`)."""
    name = inference_service_name(d.name)
    metadata: dict[str, Any] = {"name": name, "labels": {"hopsml/serving": name, "hopsml/model": _label(d.model_name)}}
    if namespace:
        metadata["namespace"] = namespace
    predictor: dict[str, Any] = _scaling(d)
    if d.batching_enabled and not runtime.batches_itself:
        batching = d.batching_options
        predictor["batcher"] = {"maxBatchSize": batching.max_batch_size,
                                "maxLatency": _millis(int(batching.batch_timeout_micros or 0))}
    if d.logs_inferences:
        predictor["logger"] = {"mode": LOGGER_MODES[str(d.inference_logging)]}
        if logger_url:
            predictor["logger"]["url"] = logger_url
    if canary is not None and canary.traffic_percent is not None:
        predictor["canaryTrafficPercent"] = int(canary.traffic_percent)
    resources = _resources(d.predictor_resource_config)
    if runtime.custom:
        container: dict[str, Any] = {
            "name": "kserve-container", "image": image or f"{name}-predictor:latest",
            "command": ["python", f"/mnt/models/{ADAPTER}"], "args": ["--model_name", d.name],
            "env": [{"name": "STORAGE_URI", "value": storage_uri}]}
        if resources:
            container["resources"] = resources
        predictor["containers"] = [container]
    else:
        model: dict[str, Any] = {"modelFormat": {"name": runtime.model_format}, "runtime": runtime.runtime,
                                 "protocolVersion": runtime.protocol, "storageUri": storage_uri}
        if resources:
            model["resources"] = resources
        predictor["model"] = model
    return {"apiVersion": API_VERSION, "kind": KIND, "metadata": metadata, "spec": {"predictor": predictor}}


def _scaling(d: defs.ServingDefinition) -> dict[str, Any]:
    """minReplicas/maxReplicas (both `instances` for a serving of fixed size, older records too), and concurrency
    scaling where the serving scales with load."""
    low, high = d.scaling_bounds
    target = d.scaling_options.target
    scaling: dict[str, Any] = {"minReplicas": low, "maxReplicas": high}
    if d.autoscaled and target is not None:
        scaling["scaleMetric"] = "concurrency"
        scaling["scaleTarget"] = max(1, int(float(target) + 0.5))   # KServe takes whole requests
    return scaling


def _millis(micros: int) -> int:
    """KServe's maxLatency is in milliseconds; a timeout under one rounds up to 1 (0 would mean KServe's default)."""
    return max(1, -(-int(micros) // 1000))


def _resources(config_: dict[str, Any] | None) -> dict[str, Any] | None:
    """hops' predictor_resource_config ({'memory': MiB, 'cores': n, 'gpus': g}) as Kubernetes requests/limits."""
    if not config_:
        return None
    quantities = {"cpu": str(config_["cores"]), "memory": f"{int(config_['memory'])}Mi"}
    limits = dict(quantities)
    if int(config_.get("gpus") or 0):
        limits["nvidia.com/gpu"] = str(int(config_["gpus"]))
    return {"requests": quantities, "limits": limits}


def _label(text: str) -> str:
    """A value a Kubernetes label accepts (63 letters, digits, '-', '_', '.'; alphanumeric at both ends)."""
    return re.sub(r"[^A-Za-z0-9_.-]", "-", text)[:63].strip("-_.") or "model"


def _storage_base(storage_uri: str | None, name: str) -> str:
    if storage_uri is None:
        return f"{DEFAULT_STORAGE}/{name}"
    text = storage_uri.strip().rstrip("/")
    if not text or not ("://" in text or text.startswith("/")):
        raise KServeExportError(f"storage_uri {storage_uri!r} is not a storage location KServe reads: give where "
                                "the layout will be uploaded, e.g. s3://bucket/models/<name>, gs://..., "
                                "pvc://<claim>/<path> or an absolute path")
    return text


# --- the model layouts -------------------------------------------------------------------------------------------
def _write_layout(storage: Storage, settings: config.Settings, d: defs.ServingDefinition, version: int,
                  target: str, notes: list[str]) -> Runtime:
    """Copy one version's files into `target` as its runtime reads them; returns that runtime."""
    scratch = tempfile.mkdtemp(prefix=f"hopsml-kserve-{d.name}-")
    try:
        local = registry.download_model(d.model_name, version, local_dir=scratch, settings=settings)
        os.makedirs(target)
        if d.predictor is not None:
            return _custom(storage, settings, d, version, local, target, notes)
        kind, rel = loaders.detect(local)
        source = os.path.join(local, *rel.split("/"))
        if kind == "sklearn":
            shutil.copy2(source, os.path.join(target, "model" + os.path.splitext(rel)[1].lower()))
            return SKLEARN
        if kind == "onnx":
            _triton(target, d, "model.onnx", 'platform: "onnxruntime_onnx"', source)
            return ONNX
        if kind == "pytorch":
            _torchscript(target, d, source)
            return TORCHSCRIPT
        if kind == "tensorflow":
            shutil.copytree(os.path.normpath(source), os.path.join(target, str(version)))   # TF Serving's numbering
            return TENSORFLOW
        raise KServeExportError(f"{d.model_name} version {version} is a {kind} model ({rel}), which no KServe "
                                "runtime serves: export it as a TensorFlow SavedModel (model.export(path)) or ONNX, "
                                "or serve it with a predictor script (model_server='PYTHON', predictor=...) to get "
                                "a custom predictor")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _triton(target: str, d: defs.ServingDefinition, file_name: str, platform: str, source: str | None = None,
            io: str = "") -> str:
    """A Triton model repository in `target`: `<serving>/config.pbtxt` and `<serving>/1/<file_name>` (Triton's
    model name is the serving's, so v2 clients keep their /v2/models/<serving> paths)."""
    folder = os.path.join(target, d.name, "1")
    os.makedirs(folder)
    batching = d.batching_options
    lines = [f'name: "{d.name}"', platform]
    if d.batching_enabled:
        lines += [f"max_batch_size: {batching.max_batch_size}",
                  f"dynamic_batching {{ max_queue_delay_microseconds: {batching.batch_timeout_micros} }}"]
    elif io:
        lines.append("max_batch_size: 0")
    config_text = "\n".join(lines + ([io] if io else [])) + "\n"
    with open(os.path.join(target, d.name, "config.pbtxt"), "w", encoding="utf-8") as stream:
        stream.write(config_text)
    path = os.path.join(folder, file_name)
    if source is not None:
        shutil.copy2(source, path)
    return path


def _torchscript(target: str, d: defs.ServingDefinition, source: str) -> None:
    """TorchScript for Triton's libtorch backend; a pickled nn.Module is scripted first. Triton does not read a
    libtorch model's inputs, so the config names INPUT__0/OUTPUT__0 (FP32, as hopsml feeds the model) with the
    row width the model's first Linear layer tells, else any."""
    import torch

    servable = loaders.TorchModel(source, threads=1)
    model = servable.model
    if not isinstance(model, torch.jit.ScriptModule):
        try:
            model = torch.jit.script(model)
        except (RuntimeError, TypeError, torch.jit.frontend.FrontendError) as exc:   # what it cannot compile
            raise KServeExportError(f"{os.path.basename(source)} is a pickled {type(model).__name__} that "
                                    f"torch.jit.script cannot compile ({str(exc).splitlines()[0]}): export "
                                    "torch.jit.script(model) or torch.jit.trace(model, example) with torch.jit.save, "
                                    "or serve it with a predictor script") from None
    width = [-1 if w is None else int(w) for w in (servable.input_shape or (None,))]
    batched = d.batching_enabled
    dims = width if batched else [-1] + width
    out = [-1] if batched else [-1, -1]
    io = (f'input [ {{ name: "INPUT__0", data_type: TYPE_FP32, dims: {json.dumps(dims)} }} ]\n'
          f'output [ {{ name: "OUTPUT__0", data_type: TYPE_FP32, dims: {json.dumps(out)} }} ]')
    path = _triton(target, d, "model.pt", 'platform: "pytorch_libtorch"', io=io)
    torch.jit.save(model, path)


def _custom(storage: Storage, settings: config.Settings, d: defs.ServingDefinition, version: int, local: str,
            target: str, notes: list[str]) -> Runtime:
    """The version's files, its predictor (and transformer) script and the adapter that serves them on KServe's
    ModelServer as hopsml's instances do: transformer.preprocess, Predict.predict(instances), postprocess."""
    from hopsml.serving.server.supervisor import script_rel

    for rel in loaders.model_files(local):
        dest = os.path.join(target, *rel.split("/"))
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        shutil.copy2(os.path.join(local, *rel.split("/")), dest)
    at_version = dataclasses.replace(d, model_version=version)
    names: dict[str, str | None] = {"predictor": None, "transformer": None}
    for what in names:
        script = getattr(d, what)
        if script is None:
            continue
        rel = script_rel(storage, settings.project, at_version, script)
        names[what] = os.path.basename(rel)
        storage.download(rel, os.path.join(target, os.path.basename(rel)))
    with open(os.path.join(target, ADAPTER), "w", encoding="utf-8") as stream:
        stream.write(ADAPTER_TEXT.replace("@PREDICTOR@", repr(names["predictor"]))
                     .replace("@TRANSFORMER@", repr(names["transformer"])))
    note = f"custom predictor: needs {CUSTOM_IMAGE_NEEDS}"
    if note not in notes:
        notes.append(note)
    return CUSTOM


ADAPTER_TEXT = '''"""KServe custom predictor for a hops-style predictor script (from `hopsml serving export-kserve`).

Runs on KServe's ModelServer (the image needs Python 3, `pip install kserve` and what the scripts import); the
storage initializer puts this folder in /mnt/models (or MODEL_DIR). Requests are KServe v1 (`instances`), answered
as hopsml answers them: the transformer's preprocess, Predict().predict(instances), the transformer's postprocess.
"""

import argparse
import importlib.util
import inspect
import os
import sys
import types

import kserve

PREDICTOR = @PREDICTOR@
TRANSFORMER = @TRANSFORMER@


def _load(path, attr):
    spec = importlib.util.spec_from_file_location(f"hops_{attr.lower()}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    cls = getattr(module, attr)
    # as hsml's model server: __init__(self), __init__(self, model) or __init__(self, async_logger, model)
    wanted = inspect.signature(cls.__init__).parameters
    given = {}
    if "model" in wanted:
        given["model"] = types.SimpleNamespace(model_path=os.environ["MODEL_FILES_PATH"],
                                               model_files_path=os.environ["MODEL_FILES_PATH"])
    if "async_logger" in wanted:
        given["async_logger"] = None
    return cls(**given)


def _plain(value):
    if hasattr(value, "tolist"):
        return value.tolist()
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


class HopsPredictor(kserve.Model):
    def __init__(self, name, model_dir):
        super().__init__(name)
        os.environ["MODEL_FILES_PATH"] = model_dir   # where hops scripts find the version's files
        os.environ["ARTIFACT_FILES_PATH"] = model_dir
        self.predictor = _load(os.path.join(model_dir, PREDICTOR), "Predict")
        self.transformer = _load(os.path.join(model_dir, TRANSFORMER), "Transformer") if TRANSFORMER else None
        self.ready = True

    def predict(self, payload, headers=None, response_headers=None):
        body = dict(payload)
        if self.transformer is not None:
            body = self.transformer.preprocess(body) or body
        answer = {"predictions": _plain(self.predictor.predict(body["instances"]))}
        if self.transformer is not None:
            answer = self.transformer.postprocess(answer) or answer
        return answer


if __name__ == "__main__":
    parser = argparse.ArgumentParser(parents=[kserve.model_server.parser])
    args, _ = parser.parse_known_args()
    model_dir = os.environ.get("MODEL_DIR", os.path.dirname(os.path.abspath(__file__)))
    kserve.ModelServer().start([HopsPredictor(args.model_name, model_dir)])
'''


# --- YAML out ----------------------------------------------------------------------------------------------------
def _header(d: defs.ServingDefinition, version: int, runtime: Runtime, uris: dict[int, str]) -> list[str]:
    lines = [f"KServe InferenceService for hopsml serving '{d.name}': model {d.model_name} version {version}.",
             "Written by `hopsml serving export-kserve`. Upload the folder "
             f"{version}/ beside this file to {uris[version]} before applying it."]
    if runtime.custom:
        lines.append(f"Custom predictor ({ADAPTER}): the image needs {CUSTOM_IMAGE_NEEDS}.")
    else:
        lines.append(f"Runtime: {runtime.runtime} ({runtime.model_format}, protocol {runtime.protocol}).")
        if runtime.batches_itself and d.batching_enabled:
            lines.append("Batching: Triton's dynamic batcher, in the model's config.pbtxt (KServe's batcher takes "
                         "v1 requests only).")
    if d.canary_version is not None:
        if version == d.canary_version:
            lines += [f"Canary: apply {MANIFEST} (version {d.model_version}) first and wait until it is ready; this "
                      f"rolls out version {version} to {d.canary_traffic_percent}% of the requests.",
                      "Promote: remove canaryTrafficPercent and apply. "
                      "Roll back: set canaryTrafficPercent: 0 and apply."]
        else:
            lines.append(f"Canary: {CANARY_MANIFEST} rolls version {d.canary_version} out after this one is ready.")
    return lines


def _write_manifest(path: str, data: dict[str, Any], header: list[str]) -> None:
    text = "".join(f"# {line}\n" for line in header) + to_yaml(data)
    with open(path, "w", encoding="utf-8") as stream:
        stream.write(text)


_PLAIN_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_./-]*$")
_PLAIN_VALUE = re.compile(r"^[A-Za-z]([A-Za-z0-9_./:-]*[A-Za-z0-9_./-])?$")   # no ': ', ' #', ':' at the end
_YAML_WORDS = {"y", "n", "yes", "no", "on", "off", "true", "false", "null"}   # YAML 1.1 readers take these as bools


def to_yaml(value: object, indent: int = 0) -> str:
    """Block-style YAML of JSON-like data: keys sorted, strings plain where no YAML reader can take them
    for anything else, else double-quoted (JSON's escapes are YAML's), so any
    YAML reader gets the same mapping back and the same data always gives the same text."""
    pad = " " * indent
    if isinstance(value, dict):
        if not value:
            return pad + "{}\n"
        out = []
        for key in sorted(value):
            shown = key if _PLAIN_KEY.match(key) else json.dumps(key)
            item = value[key]
            if isinstance(item, (dict, list)) and item:
                out.append(f"{pad}{shown}:\n{to_yaml(item, indent + 2)}")
            else:
                out.append(f"{pad}{shown}: {_scalar(item)}\n")
        return "".join(out)
    if isinstance(value, list):
        if not value:
            return pad + "[]\n"
        out = []
        for item in value:
            if isinstance(item, (dict, list)) and item:
                inner = to_yaml(item, indent + 2)
                out.append(f"{pad}- {inner[indent + 2:]}")
            else:
                out.append(f"{pad}- {_scalar(item)}\n")
        return "".join(out)
    return pad + _scalar(value) + "\n"


def _scalar(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return json.dumps(value)
    if isinstance(value, dict):
        return "{}"
    if isinstance(value, list):
        return "[]"
    text = str(value)
    return text if _PLAIN_VALUE.match(text) and text.lower() not in _YAML_WORDS else json.dumps(text)


__all__ = ["API_VERSION", "KIND", "MANIFEST", "CANARY_MANIFEST", "KServeExport", "KServeExportError", "Runtime",
           "export_kserve", "inference_service_name", "manifest", "to_yaml"]
