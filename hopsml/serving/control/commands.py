"""The serving commands of the ``hopsml`` CLI: ``serving create|start|stop|list|status|logs|monitor|delete``,
``promote|rollback|canary-gate`` and ``export-kserve``.

``add_commands(subparsers)`` adds them to the CLI's parser; ``run(args, settings)`` runs the one that
was parsed and returns the text to print.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from hopsml import config
from hopsml.cli_tables import format_table
from hopsml.records import BROKEN, BrokenRecordError
from hopsml.serving import definition as defs
from hopsml.serving.control import lifecycle

COMMANDS = ("serving",)
NAME_HELP = "the serving's name (hopsml serving list shows them)"


def add_commands(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``serving`` and its actions to the CLI's subparsers."""
    serving = subparsers.add_parser("serving", help="serve registered models over TF Serving's REST API")
    actions = serving.add_subparsers(dest="serving_action", required=True)
    create = actions.add_parser("create", help="define a serving of a registered model (or redefine one)")
    create.add_argument("name", help="serving name: letters and digits")
    create.add_argument("model", help="'Models/<name>' or 'Models/<name>/<version>', as hops takes model_path")
    create.add_argument("--version", type=int, default=1, help="model version (default 1)")
    create.add_argument("--model-server", choices=defs.MODEL_SERVERS, default=defs.PYTHON,
                        help="the model server, as hsml names it: PYTHON (the default; needed for a --predictor "
                             "script) or TENSORFLOW_SERVING (no Python code of yours runs)")
    create.add_argument("--instances", type=int, default=1, help="processes behind the port (default 1)")
    create.add_argument("--predictor", help="predictor script (a Predict class): a file in the version folder or "
                                            "a project path")
    create.add_argument("--transformer", help="transformer script (a Transformer class), as --predictor")
    create.add_argument("--host", help=f"address to listen on (default {defs.DEFAULT_HOST}: only this machine)")
    create.add_argument("--port", type=int, help="port to listen on (default 0: any free one at each start)")
    create.add_argument("--batching", action="store_true", default=None,
                        help="batch requests together as TF Serving's batcher does (batching_enabled)")
    create.add_argument("--max-batch-size", type=int, help="rows a batch holds at most (with --batching)")
    create.add_argument("--batch-timeout-micros", type=int,
                        help="how long a batch waits for more rows, in microseconds (with --batching)")
    create.add_argument("--inference-logging", choices=("ALL", "MODEL_INPUTS", "PREDICTIONS", "NONE"),
                        help="what the inference log keeps of each request (default ALL)")
    create.add_argument("--max-body-bytes", type=int, help="larger requests get 413")
    create.add_argument("--canary-version", type=int,
                        help="another version served beside --version, taking --canary-percent of the requests")
    create.add_argument("--canary-percent", type=int, help="percent of the requests sent to the canary (default 10)")
    create.add_argument("--min-instances", type=int,
                        help="scale with load between --min-instances and --max-instances (0: scale to zero when idle)")
    create.add_argument("--max-instances", type=int, help="the most instances scaling with load may start")
    create.add_argument("--scale-target", type=float,
                        help="concurrent requests per instance that scaling aims at (default 10)")
    create.add_argument("--models", nargs="*", metavar="MODEL",
                        help="other registered models this serving also answers for, each loaded on its first request "
                             "(with no names: the versions of its own model)")
    create.add_argument("--max-loaded-models", type=int, help="with --models: models kept loaded at most")
    create.add_argument("--max-models-memory-mb", type=float,
                        help="with --models: MiB the loaded models may take (the least recently used go first)")
    create.add_argument("--scale-window", type=float,
                        help="seconds of load scaling in looks back on (default 30; scaling out, a tenth of it)")
    for action, text in (("start", "start the serving's server (it keeps running after this command)"),
                         ("stop", "stop the server: no process or port is left"),
                         ("status", "status, endpoint, instances, restarts; the reason and log lines if it failed"),
                         ("delete", "stop it and remove its definition (its log stays)"),
                         ("promote", "the canary version becomes the stable one"),
                         ("rollback", "drop the canary: the stable version takes every request")):
        actions.add_parser(action, help=text).add_argument("name", help=NAME_HELP)
    gate = actions.add_parser("canary-gate", help="promote the canary if, over the last window, its served features "
                                                  "do not skew from its training data and its predictions, errors "
                                                  "and p99 hold up against the stable version's; else roll it back")
    gate.add_argument("name", help=NAME_HELP)
    gate.add_argument("--window", type=float, default=3600.0, help="seconds of traffic to judge (default 3600)")
    gate.add_argument("--min-requests", type=int, default=50, help="canary requests needed to decide (default 50)")
    gate.add_argument("--dry-run", action="store_true", help="decide and record, but change nothing")
    kserve = actions.add_parser("export-kserve", help="write a KServe InferenceService manifest for the serving "
                                                      "(versions, batcher, canary, scaling, logger) and the model "
                                                      "layout its storageUri reads")
    kserve.add_argument("name", help=NAME_HELP)
    kserve.add_argument("--out", help="folder to write (default ./kserve-NAME)")
    kserve.add_argument("--storage-uri", help="where the version folders will be uploaded, e.g. s3://bucket/path "
                                              "(default pvc://hopsml-models/NAME)")
    kserve.add_argument("--namespace", help="the manifest's Kubernetes namespace (default: none, kubectl's)")
    kserve.add_argument("--logger-url", help="where KServe's logger sends requests (default: KServe's broker)")
    kserve.add_argument("--image", help="the custom predictor's image, for a serving with a predictor script")
    kserve.add_argument("--overwrite", action="store_true", help="replace manifests and version folders there")
    actions.add_parser("list", help="every serving of the project with its status")
    watch = actions.add_parser("monitor", help="drift and training-serving skew: the logged inputs against the "
                                               "training dataset's statistics (JSON report in the serving's folder)")
    watch.add_argument("name", help=NAME_HELP)
    watch.add_argument("--dataset", help="the training dataset (default: the one the model's lineage names)")
    watch.add_argument("--split", default="train", help="the dataset split to compare with (default train)")
    watch.add_argument("--psi", type=float, default=None, help="PSI over this flags drift (default 0.2)")
    watch.add_argument("--ks", type=float, default=None, help="KS over this flags drift (default 0.15)")
    watch.add_argument("--json", action="store_true", help="print the whole report as JSON")
    logs = actions.add_parser("logs", help="the last lines of the serving's log")
    logs.add_argument("name", help=NAME_HELP)
    logs.add_argument("-n", "--lines", type=int, default=50, help="how many lines (default 50)")


def _status_text(serving: lifecycle.Serving) -> str:
    shown = {key: value for key, value in vars(serving).items()
             if key not in ("status", "restarts", "kafka_topic_dto", "scaling")}
    lines = [f"status: {serving.status}"]
    if serving.internal_path is not None:
        lines.append(f"endpoint: http://{serving.internal_ips[0]}:{serving.internal_port}{serving.internal_path}:predict")
    lines.append(json.dumps(shown, indent=2, default=str))
    if serving.restarts:
        lines += ["", f"restarts ({len(serving.restarts)}):"]
        lines += [f"  {r.time} {r.reason}" for r in serving.restarts]
    if serving.scaling:
        lines += ["", f"scaling (the last {min(len(serving.scaling), 10)} steps):"]
        lines += [f"  {step.time} {step.before} -> {step.after}: {step.reason}"
                  + (f" (ready after {step.ready_s} s)" if step.ready_s is not None else "")
                  for step in serving.scaling[-10:]]
    if serving.status.reason:
        lines += ["", f"reason: {serving.status.reason}", "", f"last lines of {serving.log}:", serving.status.log_tail]
    return "\n".join(lines)


def run(args: argparse.Namespace, settings: config.Settings) -> str:
    """Run the parsed serving command; returns what to print."""
    action = args.serving_action
    if action == "create":
        logging_mode = {"NONE": None, None: "ALL"}.get(args.inference_logging, args.inference_logging)
        serving = lifecycle.create_or_update(args.name, args.model, args.model_server, args.version,
                                             instances=args.instances, predictor=args.predictor,
                                             transformer=args.transformer, host=args.host, port=args.port,
                                             batching_enabled=bool(args.batching),
                                             inference_logging=logging_mode, max_body_bytes=args.max_body_bytes,
                                             settings=settings,
                                             # a flag not given is None in its group: the serving's value is kept
                                             batching=defs.Batching(max_batch_size=args.max_batch_size,
                                                                    batch_timeout_micros=args.batch_timeout_micros),
                                             canary=defs.Canary(version=args.canary_version,
                                                                traffic_percent=args.canary_percent),
                                             scaling=defs.Scaling(min_instances=args.min_instances,
                                                                  max_instances=args.max_instances,
                                                                  target=args.scale_target, window_s=args.scale_window),
                                             models=defs.Models(names=args.models, max_loaded=args.max_loaded_models,
                                                                max_memory_mb=args.max_models_memory_mb))
        canary_text = (f", canary version {serving.canary_version} at {serving.canary_traffic_percent}%"
                       if serving.canary_version is not None else "")
        scaling_text = (f", {serving.min_instances} to {serving.max_instances} instances with load"
                        if serving.max_instances is not None else "")
        return (f"serving {serving.name} (id {serving.id}) serves {serving.model_name} version "
                f"{serving.model_version}{canary_text}{scaling_text}")
    if action in ("promote", "rollback", "canary-gate"):
        from hopsml.serving.control import canary

        if action == "canary-gate":
            report = canary.gate(args.name, window_s=args.window, min_requests=args.min_requests,
                                 act=not args.dry_run, settings=settings)
        else:
            getattr(canary, action)(args.name, settings=settings)
            report = canary.last_decision(args.name, settings) or {}
        return (f"{args.name}: canary version {report.get('canary')} {report.get('decision')}"
                + "".join(f"\n  {reason}" for reason in report.get("reasons", [])))
    if action == "export-kserve":
        from hopsml.serving.control.kserve import export_kserve

        done = export_kserve(args.name, args.out or f"kserve-{args.name}", storage_uri=args.storage_uri,
                             namespace=args.namespace, logger_url=args.logger_url, image=args.image,
                             overwrite=args.overwrite, settings=settings)
        lines = [f"InferenceService {done.name}: {', '.join(done.manifests)}"]
        lines += [f"  version {v}: upload {done.layouts[v]} to {done.storage_uris[v]}" for v in done.layouts]
        return "\n".join(lines + [f"  {note}" for note in done.notes])
    if action == "list":
        rows: list[dict[str, Any]] = []
        broken: list[str] = []
        for name, s in lifecycle.scan_all(settings):
            if isinstance(s, BrokenRecordError):
                rows.append({"name": name, "status": BROKEN})
                broken.append(f"{name}: {BROKEN}: {s.reason}")
                continue
            rows.append({"name": s.name, "id": s.id, "status": s.status, "model": f"{s.model_name}:{s.model_version}",
                         "instances": f"{s.available_instances}/{s.requested_instances}",
                         "endpoint": f"http://{s.internal_ips[0]}:{s.internal_port}" if s.internal_ips else None,
                         "restarts": len(s.restarts)})
        if not rows:
            return (f"no servings in project {settings.project!r}; "
                    "create one with 'hopsml serving create NAME Models/MODEL'")
        table = format_table(rows, ("name", "id", "status", "model", "instances", "endpoint", "restarts"))
        if broken:
            table += "\n\nrecords that cannot be read ('hopsml serving status NAME' says more):\n" + "\n".join(broken)
        return table
    if action == "monitor":
        from hopsml.serving.analysis.monitor import KS_THRESHOLD, PSI_THRESHOLD, monitor, report_text

        report = monitor(args.name, args.dataset, split=args.split,
                         psi_threshold=args.psi if args.psi is not None else PSI_THRESHOLD,
                         ks_threshold=args.ks if args.ks is not None else KS_THRESHOLD, settings=settings)
        return json.dumps(report, indent=2) if args.json else report_text(report)
    if action == "start":
        serving = lifecycle.start(args.name, settings=settings)
        return f"serving {serving.name}: {serving.status} at http://{serving.internal_ips[0]}:{serving.internal_port}"
    if action == "stop":
        lifecycle.stop(args.name, settings=settings)
        return f"serving {args.name}: {lifecycle.get_status(args.name, settings)}"
    if action == "delete":
        lifecycle.delete(args.name, settings=settings)
        return f"serving {args.name}: deleted"
    serving = lifecycle.get(args.name, settings)
    if action == "logs":
        return lifecycle.log_tail(serving.log, args.lines) or f"no log yet at {serving.log}"
    folder = lifecycle.get_inference_log(args.name, settings)
    if folder is None:
        return _status_text(serving) + "\ninference log: off"
    from hopsml.serving.instance import inference_log

    traffic = inference_log.summary(folder)
    line = f"\ninference log: {folder} ({traffic['requests']} requests"
    if traffic.get("latency_ms"):
        line += f", latency p50 {traffic['latency_ms']['p50']:.2f} ms, p99 {traffic['latency_ms']['p99']:.2f} ms"
    if traffic.get("expired"):
        line += f"; {traffic['expired']['records']} older records dropped to keep it under its bounds"
    return _status_text(serving) + line + ")"
