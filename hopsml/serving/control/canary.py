"""Canary rollouts: a serving's second version (`Canary(version=, traffic_percent=)`: it takes that share of the
requests that name no version; protocol.VersionRouter splits them in each instance) is promoted to stable or
rolled back, by hand or by the gate.

The gate looks at a window of the inference log, each version's requests apart, and promotes the canary only
when all of these hold: the features it was served do not skew from its *own* training dataset (the monitor's
drift and preprocessing checks, on the canary's requests), its predictions do not drift from the stable
version's (PSI of their histograms), its error rate is not above the stable one's by more than a margin, and
its p99 latency is not above the stable one's by more than a factor. Anything else rolls it back. Too few
canary requests decide nothing. Every decision, with its reasons and figures, is kept in
`Serving/<name>/canary.json` (the serving's page shows the last one); KServe rolls back on failing health
checks, this on what the model sees.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from collections.abc import Sequence
from datetime import datetime, timedelta, timezone
from typing import Any

import numpy as np

from hopsml import config, layout
from hopsml.clock import utc_now
from hopsml.fs import Storage
from hopsml.serving import definition as defs
from hopsml.serving.analysis.monitor import KS_THRESHOLD, PSI_THRESHOLD, psi
from hopsml.serving.analysis.monitor import monitor as skew_report
from hopsml.serving.control import lifecycle
from hopsml.serving.definition import ServingError
from hopsml.serving.instance import inference_log

log = logging.getLogger(__name__)

MIN_REQUESTS = 50              # canary requests in the window before the gate decides
MAX_PREDICTION_PSI = 0.2       # the canary's predictions against the stable version's
MAX_ERROR_RATE_INCREASE = 0.01
MAX_P99_RATIO = 1.5


def deploy(serving_name: str, version: int, traffic_percent: int = 10,
           settings: config.Settings | None = None) -> lifecycle.Serving:
    """Version `version` of the serving's model as its canary, beside the stable version, with everything else of
    the serving's stored definition kept (scripts, batching, instances, resources, inference logging, limits,
    scaling). A predictor or transformer named by file name is the version's own: when the canary's folder lacks
    it, the canary runs the stable version's (named by its project path)."""
    settings = settings or config.load()
    storage = Storage(settings.root)
    d = defs.read(storage, settings.project, serving_name)
    if int(version) == d.model_version:
        raise ServingError(f"serving {serving_name!r} already serves version {version} of {d.model_name!r} as its "
                           "stable version; a canary is another version")
    scripts = {}
    for role in ("predictor", "transformer"):
        script = getattr(d, role)
        if script is not None and "/" not in script and ":" not in script:
            own = layout.join(layout.model_dir(settings.project, d.model_name, int(version)), script)
            if not storage.exists(own):
                script = layout.join(layout.MODELS, d.model_name, str(d.model_version), script)
        scripts[role] = script
    return lifecycle.create_or_update(
        serving_name, f"Models/{d.model_name}", d.model_server, d.model_version, d.artifact_version,
        scripts["predictor"], scripts["transformer"], d.kserve, d.batching_enabled, d.topic_name, d.num_partitions,
        d.num_replicas, d.inference_logging, d.instances, d.transformer_instances, d.predictor_resource_config,
        canary=defs.Canary(version=int(version), traffic_percent=int(traffic_percent)), settings=settings)


def promote(serving_name: str, settings: config.Settings | None = None,
            reasons: Sequence[str] = ("promoted by hand",), figures: dict[str, Any] | None = None
            ) -> lifecycle.Serving:
    """The canary version becomes the stable one (all requests); a running serving takes it in place. `reasons`
    and `figures` go into the record (a gate's, when it decided)."""
    d = _with_canary(serving_name, settings)
    serving = _redefine(serving_name, d, d.canary_version, settings)
    _decided(serving_name, d, "promoted", list(reasons), dict(figures or {}), settings)
    return serving


def rollback(serving_name: str, settings: config.Settings | None = None,
             reasons: Sequence[str] = ("rolled back by hand",), figures: dict[str, Any] | None = None
             ) -> lifecycle.Serving:
    """The canary is dropped: the stable version takes every request again (a running serving takes it in place)."""
    d = _with_canary(serving_name, settings)
    serving = _redefine(serving_name, d, d.model_version, settings)
    _decided(serving_name, d, "rolled back", list(reasons), dict(figures or {}), settings)
    return serving


def gate(serving_name: str, *, window_s: float = 3600.0, min_requests: int = MIN_REQUESTS,
         psi_threshold: float = PSI_THRESHOLD, ks_threshold: float = KS_THRESHOLD,
         max_prediction_psi: float = MAX_PREDICTION_PSI, max_error_rate_increase: float = MAX_ERROR_RATE_INCREASE,
         max_p99_ratio: float = MAX_P99_RATIO, act: bool = True,
         settings: config.Settings | None = None) -> dict[str, Any]:
    """Decide on the canary from the last `window_s` seconds of traffic (see the module docstring): 'promoted',
    'rolled back' or 'waiting' (too few canary requests); with `act` the decision is carried out. Returns the
    decision with its reasons and figures, as `canary.json` keeps it."""
    settings = settings or config.load()
    started = time.perf_counter()
    d = _with_canary(serving_name, settings)
    since = datetime.now(timezone.utc) - timedelta(seconds=window_s)
    folder = inference_log.inference_log_path(settings, settings.project, serving_name)
    table = inference_log.read(folder, ["time", "model_version", "status", "latency_ms", "response"])
    stable = _traffic(table, d.model_version, since)
    canary = _traffic(table, int(d.canary_version or 0), since)
    figures: dict[str, Any] = {"window_s": window_s, "stable": _summary(stable), "canary": _summary(canary)}
    if canary["requests"] < min_requests:
        reasons = [f"{canary['requests']} canary requests in the last {window_s:g} s, fewer than the "
                   f"{min_requests} the gate waits for"]
        return _decided(serving_name, d, "waiting", reasons, figures, settings)
    reasons = []
    skew = skew_report(serving_name, version=d.canary_version, since=since, psi_threshold=psi_threshold,
                           ks_threshold=ks_threshold, write=False, settings=settings)
    figures["skew"] = {"dataset": skew["dataset"]["name"], "rows": skew["rows"], "drifted": skew["drifted"],
                       "preprocessing": skew["preprocessing"],
                       "psi": {f["name"]: f.get("psi") for f in skew["features"]}}
    if skew["drifted"]:
        reasons.append(f"the canary's served features skew from its training dataset {skew['dataset']['name']!r}: "
                       f"{', '.join(skew['drifted'])} (PSI over {psi_threshold:g} or KS over {ks_threshold:g})")
    if not skew["preprocessing"]["ok"]:
        reasons.append("the canary's inputs are not preprocessed as its training data was: "
                       + "; ".join(skew["preprocessing"]["problems"]))
    drift = prediction_psi(stable["predictions"], canary["predictions"])
    figures["prediction_psi"] = drift
    if drift is not None and drift > max_prediction_psi:
        reasons.append(f"the canary's predictions drift from the stable version's: PSI {drift:.3f} over "
                       f"{max_prediction_psi:g}")
    if canary["error_rate"] > stable["error_rate"] + max_error_rate_increase:
        reasons.append(f"the canary's error rate {canary['error_rate']:.2%} is above the stable version's "
                       f"{stable['error_rate']:.2%} by more than {max_error_rate_increase:.2%}")
    if stable["p99_ms"] and canary["p99_ms"] > max_p99_ratio * stable["p99_ms"]:
        reasons.append(f"the canary's p99 latency {canary['p99_ms']:.2f} ms is over {max_p99_ratio:g}x the stable "
                       f"version's {stable['p99_ms']:.2f} ms")
    figures["decision_ms"] = round((time.perf_counter() - started) * 1e3, 1)   # reading the log and judging it
    decision = "rolled back" if reasons else "promoted"
    if not reasons:
        reasons = [f"over {canary['requests']} canary requests: no skew from its training data, predictions as the "
                   "stable version's, error rate and p99 latency as good"]
    if act:   # carried out first: the record says what was done
        _redefine(serving_name, d, d.canary_version if decision == "promoted" else d.model_version, settings)
    else:
        decision += " (dry run: nothing changed)"
    return _decided(serving_name, d, decision, reasons, figures, settings)


def last_decision(serving_name: str, settings: config.Settings | None = None) -> dict[str, Any] | None:
    """The last decision on the serving's canary (by hand or by the gate), None when there is none."""
    settings = settings or config.load()
    storage = Storage(settings.root)
    rel = layout.ServingDir.of(settings.project, serving_name).canary_report
    return storage.read_json(rel) if storage.exists(rel) else None


def prediction_psi(expected: Sequence[float], actual: Sequence[float]) -> float | None:
    """PSI of two sets of predictions: over their classes when there are at most 20 distinct values, else over
    ten bins between the expected ones' deciles. None when either side has none.

    >>> prediction_psi([0, 1] * 50, [0, 1] * 50)
    0.0
    >>> round(prediction_psi([0] * 90 + [1] * 10, [0] * 10 + [1] * 90), 2)
    3.52
    """
    if not len(expected) or not len(actual):
        return None
    a, b = np.asarray(expected, dtype=np.float64), np.asarray(actual, dtype=np.float64)
    values = np.unique(np.concatenate([a, b]))
    if len(values) <= 20:
        return psi([float((a == v).sum()) for v in values], [float((b == v).sum()) for v in values])
    edges = np.unique(np.quantile(a, np.linspace(0, 1, 11)))
    inner = edges[1:-1]
    return psi(np.bincount(np.searchsorted(inner, a, side="right"), minlength=len(inner) + 1).tolist(),
                       np.bincount(np.searchsorted(inner, b, side="right"), minlength=len(inner) + 1).tolist())


# --- inside -------------------------------------------------------------------------------------------
def _with_canary(serving_name: str, settings: config.Settings | None) -> defs.ServingDefinition:
    settings = settings or config.load()
    d = defs.read(Storage(settings.root), settings.project, serving_name)
    if d.canary_version is None:
        raise ServingError(f"serving {serving_name!r} has no canary: create_or_update({serving_name!r}, ..., "
                           "canary=Canary(version=V, traffic_percent=P)) gives it one")
    return d


def _redefine(serving_name: str, d: defs.ServingDefinition, version: int | None,
              settings: config.Settings | None) -> lifecycle.Serving:
    """The serving with `version` stable and no canary, through create_or_update (a running one reloads in place)."""
    settings = settings or config.load()
    storage = Storage(settings.root)
    defs.write(storage, settings.project, dataclasses.replace(d, canary_version=None, canary_traffic_percent=0))
    return lifecycle.create_or_update(serving_name, f"Models/{d.model_name}", d.model_server, int(version or 1),
                                      d.artifact_version, d.predictor, d.transformer, d.kserve, d.batching_enabled,
                                      d.topic_name, d.num_partitions, d.num_replicas, d.inference_logging,
                                      d.instances, d.transformer_instances, d.predictor_resource_config,
                                      settings=settings)


def _traffic(table: Any, version: int, since: datetime) -> dict[str, Any]:
    """One version's requests in the window: count, error rate, latencies and predictions."""
    latencies, statuses, predictions = [], [], []
    for when, v, status, latency, response in zip(*(table.column(c).to_pylist() for c in (
            "time", "model_version", "status", "latency_ms", "response"))):
        if v != version or when < since:
            continue
        statuses.append(status)
        latencies.append(latency)
        if status == 200 and response:
            predictions += _predictions(response)
    errors = sum(1 for s in statuses if s >= 500)
    return {"requests": len(statuses), "error_rate": errors / len(statuses) if statuses else 0.0,
            "p99_ms": float(np.percentile(latencies, 99)) if latencies else 0.0, "predictions": predictions}


def _summary(traffic: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in traffic.items() if k != "predictions"} | {"predictions": len(traffic["predictions"])}


def _predictions(response: str) -> list[float]:
    """The numbers a logged answer predicted (v1 'predictions' or 'outputs', v2 outputs' data), flat."""
    try:
        body = json.loads(response)
    except ValueError:
        return []
    if not isinstance(body, dict):
        return []
    found = body.get("predictions", body.get("outputs"))
    if isinstance(found, list) and found and isinstance(found[0], dict):   # v2 tensors
        found = [x for tensor in found for x in (tensor.get("data") or [])]
    flat = np.asarray(found, dtype=object).ravel().tolist() if isinstance(found, list) else []
    return [float(x) for x in flat if isinstance(x, (int, float)) and not isinstance(x, bool)]


def _decided(serving_name: str, d: defs.ServingDefinition, decision: str, reasons: list[str],
             figures: dict[str, Any], settings: config.Settings | None) -> dict[str, Any]:
    settings = settings or config.load()
    report = {"serving": serving_name, "decision": decision, "stable": d.model_version, "canary": d.canary_version,
              "percent": d.canary_traffic_percent, "reasons": reasons, "figures": figures,
              "time": utc_now()}
    Storage(settings.root).write_json(layout.ServingDir.of(settings.project, serving_name).canary_report, report)
    log.info("serving %s: canary version %s %s: %s", serving_name, d.canary_version, decision, "; ".join(reasons))
    return report
