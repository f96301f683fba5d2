"""The pipeline commands of the ``hopsml`` CLI: ``pipelines dag MODEL`` writes the Airflow DAG that re-runs what
produced the model's current version, from its recorded lineage (lineage.py).

``add_commands(subparsers)`` adds them to the CLI's parser; ``run(args, settings)`` runs the one that was parsed and
returns the text to print. Neither needs Airflow installed: the file is written here, Airflow runs it elsewhere.
"""

from __future__ import annotations

import argparse
import os

from hopsml import config
from hopsml.airflow import lineage
from hopsml.airflow.steps import StepError

COMMANDS = ("pipelines",)


def add_commands(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    pipelines = subparsers.add_parser("pipelines", help="Airflow pipelines of the project's steps")
    actions = pipelines.add_subparsers(dest="pipelines_action", required=True)
    dag = actions.add_parser("dag", help="write the Airflow DAG that re-runs what produced a model's current "
                                         "version, from its lineage")
    dag.add_argument("model", help="the model's name")
    dag.add_argument("--schedule", help="a cron expression or preset (@daily), or 'none' (default: on the upstream "
                                        "feature groups' Assets, else manual)")
    dag.add_argument("--output", "-o", help="the file to write (default: print it); e.g. $AIRFLOW_HOME/dags/x.py")
    dag.add_argument("--dag-id", help="the DAG's id (default: retrain_<model>)")
    dag.add_argument("--serving", help="the serving to roll the new version out to as a canary (default: the one "
                                         "serving the model, if any; 'none': end at the new version)")
    dag.add_argument("--force", action="store_true", help="replace an existing --output file")
    dag.add_argument("--canary-percent", type=int, default=20, help="the share of the serving's requests the new "
                                                                    "version takes as a canary (default 20)")
    dag.add_argument("--min-requests", type=int, default=50, help="the canary's own answered requests the gate "
                                                                  "waits for (default 50)")
    dag.add_argument("--canary-timeout", type=float, default=3600.0, help="seconds to wait for them (default 3600)")
    dag.add_argument("--poke-interval", type=float, default=30.0, help="seconds between looks at the inference log")
    dag.add_argument("--max-p99-ratio", type=float, default=1.5, help="the canary's p99 latency over the stable "
                                                                      "version's that rolls it back (default 1.5)")


def run(args: argparse.Namespace, settings: config.Settings) -> str:
    canary = lineage.Canary(traffic_percent=args.canary_percent, min_requests=args.min_requests,
                            timeout_s=args.canary_timeout, poke_interval_s=args.poke_interval,
                            max_p99_ratio=args.max_p99_ratio)
    source = lineage.dag_source(settings, args.model, schedule=args.schedule, dag_id=args.dag_id,
                                serving_name=args.serving, canary=canary)
    if not args.output:
        return source
    path = os.path.abspath(os.path.expanduser(args.output))
    if os.path.exists(path) and not args.force:
        raise StepError(f"{path} exists already (perhaps with your edits); pass --force to replace it or choose "
                        "another --output")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path + ".tmp", "w", encoding="utf-8") as handle:
        handle.write(source)
    os.replace(path + ".tmp", path)
    return f"wrote {path}: the DAG {args.dag_id or 'retrain_' + lineage._var(args.model)} re-runs model {args.model!r}"
