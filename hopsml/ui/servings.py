"""What the web view shows of model servings: the list, and a page per serving with its status, traffic
(request rate, latency p50/p99, model-call batch sizes, from the inference log) and drift (the monitor's report,
computed when the page is asked for, with train and serving histograms to overlay)."""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

from hopsml import config
from hopsml.errors import HopsmlError
from hopsml.records import BROKEN, BrokenRecordError
from hopsml.serving import definition as defs
from hopsml.serving.analysis.monitor import last_report
from hopsml.serving.analysis.monitor import monitor as run_monitor
from hopsml.serving.control import lifecycle
from hopsml.serving.control.canary import last_decision
from hopsml.serving.instance import inference_log

log = logging.getLogger(__name__)


def _settings(settings: config.Settings, project: str) -> config.Settings:
    return dataclasses.replace(settings, project=project)


def serving_rows(settings: config.Settings, project: str) -> list[dict[str, Any]]:
    """Every serving of the project with its status, model and endpoint; one whose serving.json cannot be read is
    a BROKEN row with the reason."""
    rows: list[dict[str, Any]] = []
    for name, serving in lifecycle.scan_all(_settings(settings, project)):
        if isinstance(serving, BrokenRecordError):
            rows.append({"name": name, "status": BROKEN, "reason": serving.reason, "model": None, "version": None,
                         "instances": "", "endpoint": None, "restarts": 0, "batching": None, "broken": True})
            continue
        rows.append({"name": serving.name, "status": str(serving.status), "reason": serving.status.reason,
                     "model": serving.model_name, "version": serving.model_version,
                     "instances": f"{serving.available_instances}/{serving.requested_instances}",
                     "endpoint": (f"http://{serving.internal_ips[0]}:{serving.internal_port}{serving.internal_path}"
                                  if serving.internal_path else None),
                     "restarts": len(serving.restarts), "batching": serving.batching_enabled})
    return rows


def servings_by_model(settings: config.Settings, project: str) -> dict[str, list[str]]:
    """'model:version' -> the servings that serve it (for the models page)."""
    out: dict[str, list[str]] = {}
    try:
        for row in serving_rows(settings, project):
            if row.get("broken"):
                continue
            out.setdefault(f"{row['model']}:{row['version']}", []).append(row["name"])
    except HopsmlError as exc:
        log.warning("cannot list the servings of %s: %s", project, exc)
    return out


def serving_view(settings: config.Settings, project: str, name: str) -> dict[str, Any]:
    """The serving's page: status, traffic and drift. A report that cannot be made says why; the last one
    `hopsml serving monitor` wrote is shown then."""
    from hopsml.ui.views import NotFound

    here = _settings(settings, project)
    try:
        serving = lifecycle.get(defs.check_name(name), here)
    except BrokenRecordError as exc:   # it exists: its page says why it cannot be shown, as the list does
        return {"broken": True, "name": name, "status": BROKEN, "reason": exc.reason, "message": str(exc)}
    except defs.ServingError as exc:
        raise NotFound(str(exc)) from None
    folder = lifecycle.get_inference_log(name, here)
    traffic = inference_log.summary(folder) if folder is not None else None
    report, problem = None, None
    if folder is not None:
        try:
            report = run_monitor(name, settings=here, write=False)
        except HopsmlError as exc:
            problem = str(exc)
            report = last_report(name, here)
    else:
        problem = (f"serving {name!r} logs no inferences (inference_logging={serving.inference_logging!r}): "
                   "there is no traffic or drift to show")
    features = []
    for feature in (report or {}).get("features", []):
        histogram = feature.get("histogram") or {}
        chart: dict[str, Any] | None = None
        if "edges" in histogram:
            chart = {"kind": "numeric", "parts": {"train": (histogram["edges"], histogram["train"]),
                                                  "serving": (histogram["edges"], histogram["serving"])},
                     "outside": histogram.get("below", 0) + histogram.get("above", 0)}
        elif "categories" in histogram:
            chart = {"kind": "category",
                     "parts": {"train": [[c, n] for c, n in zip(histogram["categories"], histogram["train"])],
                               "serving": [[c, n] for c, n in zip(histogram["categories"], histogram["serving"])]}}
        features.append({**feature, "chart": chart})
    return {"serving": serving, "status": str(serving.status), "reason": serving.status.reason,
            "log_tail": serving.status.log_tail, "folder": folder, "traffic": traffic, "report": report,
            "problem": problem, "features": features, "canary": last_decision(name, here),
            "batch_sizes": sorted((traffic or {}).get("batch_sizes", {}).items())}
