"""The model commands of the ``hopsml`` CLI: ``models list|show`` and ``predict``.

``add_commands(subparsers)`` adds them to the CLI's parser; ``run(args, settings)`` runs the one
that was parsed and returns the text to print.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import os
import sys
from collections.abc import Callable
from typing import Any

from hopsml import config
from hopsml.cli_tables import format_table, pairs
from hopsml.model import inference, registry
from hopsml.records import BROKEN, BrokenRecordError

COMMANDS = ("models", "predict")


def add_commands(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``models`` and ``predict`` to the CLI's subparsers."""
    models = subparsers.add_parser("models", help="list and inspect registered models")
    actions = models.add_subparsers(dest="models_action", required=True)
    actions.add_parser("list", help="every model of the project with its latest version")
    show = actions.add_parser("show", help="one model: its versions, or one version's record and files")
    show.add_argument("name", help="the model's name, as in 'hopsml models list'")
    show.add_argument("version", nargs="?", help="a version number (default: list every version)")

    pred = subparsers.add_parser("predict", help="batch inference with Spark: a model over a prepared dataset")
    pred.add_argument("model", help="'name' (latest version) or 'name:version'")
    pred.add_argument("dataset", help="a prepared dataset of the project")
    pred.add_argument("--fn", required=True,
                      help="the predict function fn(model_path, batch): 'package.module:function' or "
                           "'path/to/file.py:function'")
    pred.add_argument("--output",
                      help="name of the predictions dataset (default <dataset>-<model>-<version>-predictions)")
    pred.add_argument("--split", action="append", help="split to predict (repeatable; default: every split)")
    pred.add_argument("--best", metavar="METRIC", help="use the version with the best METRIC instead")
    pred.add_argument("--direction", choices=("max", "min"), default="max", help="for --best (default max)")
    pred.add_argument("--batch-size", type=int, default=1024, help="rows per call of the function (default 1024)")
    pred.add_argument("--keep", help="input columns to copy beside the predictions, comma separated")
    pred.add_argument("--overwrite", action="store_true", help="replace an existing dataset of that name")


def load_function(spec: str) -> Callable[..., Any]:
    """'package.module:function' or 'path/to/file.py:function' -> the function."""
    module_name, sep, attr = spec.rpartition(":")
    if not sep or not module_name or not attr:
        raise inference.PredictionError(f"--fn {spec!r}: give 'package.module:function' or 'file.py:function'")
    try:
        if module_name.endswith(".py"):
            path = os.path.abspath(module_name)
            if not os.path.isfile(path):
                raise inference.PredictionError(f"--fn {spec!r}: no file {path}")
            name = "hopsml_predict_" + os.path.splitext(os.path.basename(path))[0].replace("-", "_")
            module_spec = importlib.util.spec_from_file_location(name, path)
            if module_spec is None or module_spec.loader is None:
                raise inference.PredictionError(f"--fn {spec!r}: {path} cannot be loaded as a Python module")
            module = importlib.util.module_from_spec(module_spec)
            sys.modules[name] = module  # so that Spark can ship it by value
            module_spec.loader.exec_module(module)
        else:
            module = importlib.import_module(module_name)
    except ImportError as exc:
        raise inference.PredictionError(f"--fn {spec!r}: cannot import {module_name!r}: {exc}") from exc
    fn = getattr(module, attr, None)
    if not callable(fn):
        raise inference.PredictionError(f"--fn {spec!r}: {module_name!r} has no function {attr!r}")
    return fn


def models_list(settings: config.Settings) -> str:
    """Every model with its latest version; metrics with 4 significant digits, never cut off."""
    rows: list[dict[str, Any]] = []
    broken: list[str] = []
    for name, latest, mv in registry.scan_models(settings):
        if isinstance(mv, BrokenRecordError):
            rows.append({"name": name, "latest": latest, "metrics": BROKEN})
            broken.append(f"{name} version {latest}: {BROKEN}: {mv.reason}")
            continue
        rows.append({"name": mv.name, "latest": mv.version, "versions": len(registry.versions(mv.name, settings)),
                     "metrics": pairs(mv.metrics or None), "created": (mv.created or "")[:19].replace("T", " "),
                     "experiment": (mv.experiment or {}).get("id")})
    if not rows:
        return f"no models in project {settings.project!r}; export one with hopsml.model.export(path, name)"
    table = format_table(rows, ("name", "latest", "versions", "metrics", "created", "experiment"), uncut=("metrics",))
    if broken:
        table += "\n\nrecords that cannot be read ('hopsml models show NAME VERSION' says more):\n" + "\n".join(broken)
    return table


def models_show(settings: config.Settings, name: str, version: str | None) -> str:
    if version is None:
        rows = [{"version": mv.version, "metrics": pairs(mv.metrics or None),
                 "created": (mv.created or "")[:19].replace("T", " "),
                 "user": mv.user, "experiment": (mv.experiment or {}).get("id"),
                 "datasets": ",".join(d["name"] for d in mv.datasets) or None,
                 "files": len(mv.files)} for mv in registry.versions(name, settings)]
        return format_table(rows, ("version", "metrics", "created", "user", "experiment", "datasets", "files"),
                            uncut=("metrics",))
    mv = registry.get_model(name, version, settings=settings)
    lines = [json.dumps({k: v for k, v in mv.to_dict().items() if k != "files"}, indent=2, default=str), "",
             f"files in {mv.path}:"]
    lines += [f"  {f['path']}  ({f['size']} bytes)" for f in mv.files]
    return "\n".join(lines)


def run(args: argparse.Namespace, settings: config.Settings) -> str:
    """Run the parsed model command; returns what to print."""
    if args.command == "models":
        if args.models_action == "list":
            return models_list(settings)
        return models_show(settings, args.name, args.version)
    if args.best:
        name = args.model.partition(":")[0]
        model = registry.get_best_model(name, args.best, args.direction, settings=settings)
    else:
        model = registry.resolve(args.model, settings)
    keep = [k.strip() for k in args.keep.split(",") if k.strip()] if args.keep is not None else None
    summary = inference.predict(model, args.dataset, load_function(args.fn), args.output, split=args.split,
                                batch_size=args.batch_size, keep=keep, overwrite=args.overwrite,
                                settings=settings)
    return str(summary)
