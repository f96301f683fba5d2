"""hopsml: Spark-integrated ML pipelines. Prepare data and features, train data-parallel, search hyperparameters,
version every experiment, serve and monitor models, and run it all as jobs and Airflow pipelines, in one project
folder (local, HDFS or S3). `hopsml quickstart` runs the whole path on bundled data."""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import shlex
import sys
import tempfile
from collections.abc import Iterator, Sequence
from typing import Any

import hopsml
from hopsml import config, layout, run_catalog
from hopsml.airflow import commands as pipeline_commands
from hopsml.cli_tables import format_fields, format_table, number, pairs
from hopsml.cluster import shipping
from hopsml.data import commands as data_commands
from hopsml.errors import HopsmlError, StorageError
from hopsml.featurestore import commands as fs_commands
from hopsml.fs import Storage
from hopsml.jobs import commands as jobs_commands
from hopsml.model import commands as model_commands
from hopsml.redact import redact_conf, redact_uri
from hopsml.serving.control import commands as serving_commands
from hopsml.tracking import environment
from hopsml.tracking import record as records
from hopsml.tracking.metrics import read_metrics
from hopsml.ui import commands as ui_commands

LIST_COLUMNS = ("id", "user", "name", "start", "finished", "status", "module", "function",
                "hyperparameters", "metric")
MAX_PACKAGE_LINES = 30   # of the packages that changed since the run before, in `experiments show`


def _short_time(stamp: str | None) -> str | None:
    return stamp[:19].replace("T", " ") if stamp else None


def _list_rows(storage: Storage, project: str, name: str | None, state: str | None,
               lost_after_s: float, sort: str = "start", kind: str | None = None) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    broken: list[dict[str, Any]] = []
    readable: list[records.ExperimentRecord] = []
    for rec in records.scan_records(storage, project):
        if isinstance(rec, records.BrokenRecord):
            if not name and not kind and (not state or state.upper() == rec.state):
                broken.append({"id": rec.id, "status": rec.state, "problem": rec.reason})
            continue
        if (name and name not in rec.name) or (kind and rec.type != kind.upper()):
            continue
        readable.append(rec)
    directions = {r.direction for r in readable if r.direction in ("max", "min")}
    direction = directions.pop() if len(directions) == 1 else "max"
    for rec in run_catalog.sort_records(readable, sort, direction):
        shown, lost = records.shown_state(storage, project, rec, lost_after_s)
        if state and shown != state.upper():
            continue
        row = {"id": rec.id, "user": rec.user, "name": rec.name, "start": _short_time(rec.start),
               "finished": _short_time(rec.finished), "status": shown, "module": rec.module,
               "function": rec.function, "hyperparameters": rec.hyperparameters, "metric": rec.metric}
        if lost and rec.state == records.State.RUNNING.value:
            row["lost"] = lost
        rows.append(row)
    return rows + broken


def experiments_list(settings: config.Settings, name: str | None = None, state: str | None = None,
                     limit: int | None = None, sort: str = "start", kind: str | None = None) -> str:
    """The table of the project's experiments: newest first, or best metric first (sort='metric')."""
    rows = _list_rows(Storage(settings.root), settings.project, name, state, settings.lost_after_s,
                      sort, kind)[:limit]
    if not rows:
        return f"no experiments in project {settings.project!r} under {Storage(settings.root).uri()}"
    notes = []  # below the table: a reason is too long for a column
    problems = [f"{row['id']}: {row['status']}: {row['problem']}" for row in rows if "problem" in row]
    if problems:
        notes += ["", "records that cannot be read ('hopsml experiments show ID' says more):"] + problems
    lost = [f"{row['id']}: {row['lost']}" for row in rows if "lost" in row]
    if lost:
        notes += ["", "RUNNING in their record, but LOST: 'hopsml experiments mark-lost ID' records it, "
                      "'hopsml experiments clean ID' (or --lost) removes them:"] + lost
    return "\n".join([format_table(rows, LIST_COLUMNS)] + notes)


def experiments_mark_lost(settings: config.Settings, ids: Sequence[str], every: bool = False,
                          force: bool = False) -> str:
    """Write state LOST into the records of runs whose driver stopped beating."""
    storage = Storage(settings.root)
    if every:
        ids = [i for i in records.lost_ids(storage, settings.project, settings.lost_after_s)
               if records.read_record(storage, settings.project, i).state == records.State.RUNNING.value]
    elif not ids:
        raise HopsmlError("name the experiments to mark (ids as in 'hopsml experiments list'), or pass --all")
    if not ids:
        return "no RUNNING experiment has lost its driver"
    lines = []
    for exp_id in ids:
        rec = records.mark_lost(storage, settings.project, exp_id, settings.lost_after_s, force=force)
        lines.append(f"{exp_id}: marked LOST; {rec.error}")
    return "\n".join(lines)


def experiments_clean(settings: config.Settings, ids: Sequence[str], lost: bool = False,
                      dry_run: bool = False) -> str:
    """Remove the folders of LOST runs (named, or all of them with `lost`)."""
    storage = Storage(settings.root)
    if lost:
        ids = records.lost_ids(storage, settings.project, settings.lost_after_s)
    elif not ids:
        raise HopsmlError("name the LOST experiments to remove (ids as in 'hopsml experiments list'), "
                          "or pass --lost to remove every LOST one")
    if not ids:
        return "no LOST experiments"
    lines = []
    for exp_id in ids:
        if dry_run:
            rec = records.read_record(storage, settings.project, exp_id)
            state, _ = records.shown_state(storage, settings.project, rec, settings.lost_after_s)
            lines.append(f"{exp_id}: {state}, would be removed" if state == records.State.LOST.value
                         else f"{exp_id}: {state}, not LOST: would be kept")
            continue
        records.remove_lost(storage, settings.project, exp_id, settings.lost_after_s)
        lines.append(f"removed {exp_id}")
    return "\n".join(lines)


def _duration(seconds: object) -> str | None:
    if not isinstance(seconds, (int, float)):
        return None
    minutes, rest = divmod(float(seconds), 60)
    return f"{int(minutes)} min {rest:.0f} s" if minutes else f"{rest:.1f} s"


def _summary(rec: records.ExperimentRecord, state: str, storage: Storage, exp_dir: layout.ExperimentDir) -> str:
    """The record as a person reads it: what ran, how it ended, what it found and with what."""
    function = ".".join(part for part in (rec.module, rec.function) if part) or None
    when = _short_time(rec.start)
    if rec.finished:
        when = f"{when} to {_short_time(rec.finished)}"
    duration = _duration(rec.duration)
    metric = None
    if rec.metric is not None:
        key = rec.optimization_key or rec.metric_key or "metric"
        metric = f"{key} = {number(rec.metric)}" + (f" ({rec.direction})" if rec.direction else "")
    results = rec.results
    if isinstance(results, list):
        results = f"{len(results)} executions (see .outputs.json in their folders)"
    elif isinstance(results, dict):
        results = pairs({k: v for k, v in results.items() if k != "log"}, sep=", ")
    versions = ", ".join(f"{k} {v}" for k, v in (rec.versions or {}).items() if v) or None
    git = None
    if isinstance(rec.git, dict) and rec.git.get("revision"):
        git = str(rec.git["revision"])[:12] + (" (uncommitted changes)" if rec.git.get("dirty") else "")
    gpus = f", {rec.gpus_per_executor} GPU each" if rec.gpus_per_executor else ""
    python_environment = None
    if isinstance(rec.python_environment, dict) and rec.python_environment.get("fingerprint"):
        archive = rec.python_environment.get("archive")
        python_environment = (str(rec.python_environment["fingerprint"])
                              + (f", shipped to the executors as {archive}" if archive else
                                 " (not shipped: the executors ran their own Python)"))
    title = f"experiment {rec.id}: {rec.name} ({state})"
    return "\n".join([title, format_fields([
        ("type", rec.type),
        ("description", rec.description),
        ("user", rec.user),
        ("function", function),
        ("ran", f"{when} ({duration})" if duration else when),
        ("metric", metric),
        ("hyperparameters", pairs(rec.hyperparameters, sep=", ") if rec.hyperparameters else None),
        ("results", results),
        ("executors", f"{rec.executors}{gpus}"),
        ("error", rec.error),
        ("program", rec.program),
        ("environment", rec.environment),
        ("python environment", python_environment),
        ("resources", ", ".join(rec.resources) if rec.resources else None),
        ("git", git),
        ("versions", versions),
        ("folder", storage.uri(exp_dir.path)),
    ])])


def experiments_show(settings: config.Settings, exp_id: str, raw: bool = False) -> str:
    """One experiment: a readable summary of its record, traceback, files, trials and last metrics;
    `raw` gives the record itself as JSON."""
    storage = Storage(settings.root)
    rec = records.read_record(storage, settings.project, exp_id)
    if raw:
        return json.dumps(rec.to_dict(), indent=2, default=str)
    exp_dir = layout.ExperimentDir.from_id(settings.project, exp_id)
    data = rec.to_dict()
    texts = {key: data.pop(key) for key in ("traceback", "output_tail") if data.get(key)}
    state, lost = records.shown_state(storage, settings.project, rec, settings.lost_after_s)
    lines = [_summary(rec, state, storage, exp_dir)]
    change = environment.since_previous(storage, settings.project, rec)
    if change is not None:
        changed = change.lines()
        lines += ["", f"packages that differ from {change.previous}'s: {len(changed) or 'none'}"]
        lines += [f"  {line}" for line in changed[:MAX_PACKAGE_LINES]]
        if len(changed) > MAX_PACKAGE_LINES:
            lines.append(f"  and {len(changed) - MAX_PACKAGE_LINES} more (compare the two runs' {layout.ENVIRONMENT})")
    for key, title in (("traceback", "traceback"), ("output_tail", "last output lines")):
        if key in texts:   # as lines, not one JSON string full of \n
            lines += ["", f"{title}:", str(texts[key]).rstrip()]
    if lost and rec.state == records.State.RUNNING.value:
        lines += ["", f"state: LOST, {lost}. 'hopsml experiments mark-lost {exp_id}' records it, "
                      f"'hopsml experiments clean {exp_id}' removes the run"]
    lines += ["", f"files in {storage.uri(exp_dir.path)}:"]
    lines += [f"  {p[len(exp_dir.path) + 1:]}" for p in storage.ls(exp_dir.path, recursive=True)]
    if storage.exists(exp_dir.summary) and storage.contains(exp_dir.summary):   # not through a link out
        try:
            lines += ["", "trials, best first:", _trials_table(storage.read_json(exp_dir.summary)["trials"],
                                                              rec.direction or "max")]
        except (StorageError, ValueError, KeyError, TypeError, AttributeError) as exc:
            lines += ["", f"trials: {layout.SUMMARY} cannot be read ({type(exc).__name__}: {exc})"]
    if storage.exists(exp_dir.metrics) and storage.contains(exp_dir.metrics):
        last: dict[str, dict[str, Any]] = {}
        try:
            for row in read_metrics(storage.read_text(exp_dir.metrics)):
                last[row["name"]] = row
        except (StorageError, ValueError, KeyError, TypeError) as exc:
            lines += ["", f"metrics: {layout.METRICS} cannot be read ({type(exc).__name__}: {exc})"]
        if last:
            lines += ["", "last metrics:"]
            lines += [f"  {n} = {r.get('value')} (step {r.get('step')})" for n, r in sorted(last.items())]
    return "\n".join(lines)


def _trials_table(trials: list[dict[str, Any]], direction: str) -> str:
    """The trials best first; below the table, why each failed one failed (too long for a column)."""
    sign = -1 if direction == "max" else 1
    ordered = sorted(trials, key=lambda t: (t["metric"] is None, sign * (t["metric"] or 0)))
    rows = [{"trial": t["dir"].rsplit("/", 1)[-1], "state": t["state"], "metric": t["metric"],
             "seconds": t["duration"]} for t in ordered]
    lines = [format_table(rows, ("trial", "state", "metric", "seconds"))]
    failed = [(row["trial"], row["state"], _reason(t)) for row, t in zip(rows, ordered)
              if row["state"] == records.State.FAILED.value or t.get("error")]
    if failed:
        lines += ["", "why they failed:"] + [f"  {name}: {state}: {reason}" for name, state, reason in failed]
    return "\n".join(lines)


def _reason(trial: dict[str, Any], limit: int = 500) -> str:
    """A trial's recorded error on one line, else the last line of its traceback."""
    error = trial.get("error") or (str(trial.get("traceback") or "").strip().splitlines() or [""])[-1]
    text = " ".join(str(error).split())
    if not text:
        return "no reason recorded"
    return text if len(text) <= limit else text[:limit - 1] + "…"


@contextlib.contextmanager
def samples_folder(settings: config.Settings) -> Iterator[str]:
    """The folder the quickstart writes its samples to, removed afterwards: the same path every time for a user
    and project, since the image records keep each file's path, so that samples prepared again are the same
    bytes and runs on an earlier quickstart's datasets can still be rerun."""
    import getpass
    import shutil

    folder = os.path.join(tempfile.gettempdir(), f"hopsml-samples-{getpass.getuser()}-{settings.project}")
    shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(folder, mode=0o700)
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def quickstart(settings: config.Settings, overwrite: bool = False) -> str:
    """Train the digits model as a versioned experiment and show where it went.

    The sample datasets of an earlier quickstart are reused; a 'digits' or 'iris' dataset holding
    other data is refused before Spark starts, unless `overwrite`."""
    from hopsml import experiment
    from hopsml.examples import digits

    print(f"hopsml quickstart: project {settings.project!r} under {Storage(settings.root).uri()}")
    print("\n0. prepare the bundled data with Spark (digits as image files, iris as a CSV table)")
    with samples_folder(settings) as workdir:   # the datasets are all that is kept
        for summary in data_commands.prepare_samples(settings, workdir, overwrite=overwrite):
            print(f"   {summary}")
    print("\n1. one training run (experiment.launch)")
    logdir, result = experiment.launch(digits.train, {"lr": 0.5, "epochs": 10}, name="quickstart-digits",
                                       description="softmax regression on scikit-learn's digits",
                                       metric_key="accuracy")
    print(f"   accuracy {result['accuracy']:.4f} -> {logdir}")
    print(f"\n2. data-parallel training on {settings.num_workers} ranks, each on its own shard of the "
          "prepared 'digits' images (experiment.allreduce)")
    dp_logdir, dp_result = experiment.allreduce(digits.train_on_dataset, name="quickstart-allreduce",
                                                description="gradients averaged by all-reduce",
                                                metric_key="accuracy")
    print(f"   accuracy {dp_result['accuracy']:.4f} -> {dp_logdir}")
    print("\n3. grid search over learning rate and dropout, trials in parallel (experiment.grid_search)")
    search_logdir, best, outputs = experiment.grid_search(
        digits.train_with_dropout, {"lr": [0.05, 0.5], "dropout": [0.0, 0.5]}, optimization_key="accuracy",
        name="quickstart-grid", description="learning rate x dropout of the digits model")
    print(f"   best {best}: accuracy {outputs['accuracy']:.4f} -> {search_logdir}")
    return "\n".join(["", experiments_list(settings, limit=10)])


def settings_text(settings: config.Settings) -> str:
    """`hopsml settings`: each setting's value as resolved here (credentials hidden), where it came from,
    and the table's environment variable, default and meaning."""
    shown = dict(_shown_settings(settings))
    blocks = []
    for name, env, default, text in config.describe():
        blocks.append(f"{name} = {shown[name]}   ({settings.source(name)})\n"
                      f"    {env}, default {default}: {text}")
    return "\n".join(blocks) + ("\n\norder: argument > HOPSML_* environment variable > conf/hopsml.toml "
                                "(or the file HOPSML_CONF names) > default")


def _shown_settings(settings: config.Settings) -> list[tuple[str, str]]:
    values = []
    for name, *_ in config.describe():
        value = getattr(settings, name)
        if name in ("root", "online_store"):
            value = redact_uri(value)
        elif name == "spark_conf":
            value = redact_conf(value)
        values.append((name, "" if value in ("", None) else str(value)))
    return values


def env_pack(settings: config.Settings, submit_args: bool = False, force: bool = False) -> str:
    """`hopsml env pack`: the project's archive of this environment, packed now or found."""
    packed = shipping.pack(Storage(settings.root), settings.project, force=force)
    if submit_args:  # unquoted: $(...) splits words but removes no quotes
        return " ".join(packed.submit_args())
    how = "found (packed before)" if packed.reused else f"packed in {packed.seconds:.1f} s"
    home = shipping.base_python(sys.prefix)
    needs = (f"\nthe archive does not carry Python: every executor needs this venv's base Python at {home}"
             if home else "")
    return (f"environment {packed.fingerprint}: {packed.size / 2**20:.1f} MiB, {how}\n{packed.uri}\n"
            f"spark-submit {' '.join(shlex.quote(word) for word in packed.submit_args())} <your job>{needs}")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="hopsml", description=__doc__)
    parser.add_argument("--root", help="root URI (default: HOPSML_ROOT, conf/hopsml.toml, ~/hopsml)")
    parser.add_argument("--project", help="project name (default: HOPSML_PROJECT, conf/hopsml.toml, demo)")
    parser.add_argument("-v", "--verbose", action="store_true", help="show hopsml's log messages")
    parser.add_argument("--version", action="version", version=f"hopsml {hopsml.__version__}",
                        help="print hopsml's version and exit")
    commands = parser.add_subparsers(dest="command", required=True)

    exps = commands.add_parser("experiments", help="list and inspect experiments")
    exp_commands = exps.add_subparsers(dest="action", required=True)
    lister = exp_commands.add_parser("list", help="experiments of the project, newest first (or --sort metric)")
    lister.add_argument("--name", help="only names containing this text")
    lister.add_argument("--state", choices=[s.value for s in records.State] + [records.BROKEN], type=str.upper,
                        help="only runs in this state (as the status column shows it, LOST included)")
    lister.add_argument("--limit", type=int, help="show at most this many")
    lister.add_argument("--sort", choices=run_catalog.SORT_KEYS, default="start",
                        help="start: newest first (default); metric: best first; name; duration: longest first")
    lister.add_argument("--type", dest="kind", choices=run_catalog.TYPES, type=str.upper,
                        help="only runs of this type (PARALLEL_EXPERIMENTS: searches)")
    shower = exp_commands.add_parser("show", help="one experiment: record, files, last metrics")
    shower.add_argument("id", help="experiment id, as in 'hopsml experiments list'")
    shower.add_argument("--json", dest="raw", action="store_true", help="print the record (experiment.json) as it is")
    timeliner = exp_commands.add_parser("timeline", help="write the run's timeline (a Chrome trace of every rank) "
                                        "and say how to open it")
    timeliner.add_argument("id", help="experiment id, as in 'hopsml experiments list'")
    timeliner.add_argument("-o", "--output", help="also copy the trace to this local file")
    marker = exp_commands.add_parser("mark-lost", help="record RUNNING experiments whose driver is gone as LOST")
    marker.add_argument("ids", nargs="*", help="experiment ids")
    marker.add_argument("--all", dest="every", action="store_true", help="every experiment shown as LOST")
    marker.add_argument("--force", action="store_true", help="also one whose heartbeat is still recent")
    cleaner = exp_commands.add_parser("clean", help="remove the folders of LOST experiments")
    cleaner.add_argument("ids", nargs="*", help="experiment ids (each must be LOST)")
    cleaner.add_argument("--lost", action="store_true", help="every LOST experiment of the project")
    cleaner.add_argument("--dry-run", action="store_true", help="say what would be removed, remove nothing")

    rerunner = exp_commands.add_parser("rerun", help="run an experiment again from its record, as a new experiment "
                                                      "linked to it, and say whether its metric reproduced")
    rerunner.add_argument("id", help="experiment id, as in 'hopsml experiments list'")
    rerunner.add_argument("--force", action="store_true",
                          help="rerun even when its datasets' fingerprints or the package versions differ")

    starter = commands.add_parser("quickstart", help="prepare the bundled data, then train, train data-parallel "
                                                     "and search")
    starter.add_argument("--overwrite", action="store_true",
                         help="prepare the sample datasets 'digits' and 'iris' again, replacing datasets of those "
                              "names (default: reuse the quickstart's own, refuse others)")
    commands.add_parser("settings", help="every setting: its value here and where it came from, its environment "
                        "variable, its default and what it does")
    env = commands.add_parser("env", help="the Python environment a cluster's executors run")
    env_commands = env.add_subparsers(dest="env_action", required=True)
    packer = env_commands.add_parser("pack", help="pack this environment into the project (once per set of packages)")
    packer.add_argument("--print-submit-args", action="store_true",
                        help="print only the spark-submit words that ship it: spark-submit $(hopsml env pack "
                             "--print-submit-args) job.py")
    packer.add_argument("--force", action="store_true", help="pack again even when the project has this one")
    data_commands.add_commands(commands)
    model_commands.add_commands(commands)
    fs_commands.add_commands(commands)
    serving_commands.add_commands(commands)
    jobs_commands.add_commands(commands)
    pipeline_commands.add_commands(commands)
    ui_commands.add_commands(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    try:
        settings = config.load(root=args.root, project=args.project)
        if args.command == "settings":
            output = settings_text(settings)
        elif args.command == "quickstart":
            output = quickstart(settings, overwrite=args.overwrite)
        elif args.command == "env":
            output = env_pack(settings, args.print_submit_args, args.force)
        elif args.command in data_commands.COMMANDS:
            output = data_commands.run(args, settings)
        elif args.command in model_commands.COMMANDS:
            output = model_commands.run(args, settings)
        elif args.command in fs_commands.COMMANDS:
            output = fs_commands.run(args, settings)
        elif args.command in serving_commands.COMMANDS:
            output = serving_commands.run(args, settings)
        elif args.command in jobs_commands.COMMANDS:
            output = jobs_commands.run(args, settings)
        elif args.command in pipeline_commands.COMMANDS:
            output = pipeline_commands.run(args, settings)
        elif args.command in ui_commands.COMMANDS:
            output = ui_commands.run(args, settings)
        elif args.action == "list":
            output = experiments_list(settings, args.name, args.state, args.limit, args.sort, args.kind)
        elif args.action == "timeline":
            from hopsml.timeline.commands import experiments_timeline

            output = experiments_timeline(settings, args.id, args.output)
        elif args.action == "mark-lost":
            output = experiments_mark_lost(settings, args.ids, args.every, args.force)
        elif args.action == "rerun":
            from hopsml.experiments import rerun
            output = str(rerun(args.id, force=args.force, settings=settings))
        elif args.action == "clean":
            output = experiments_clean(settings, args.ids, args.lost, args.dry_run)
        else:
            output = experiments_show(settings, args.id, raw=args.raw)
    except HopsmlError as exc:
        print(f"hopsml: error: {exc}", file=sys.stderr)
        return 1
    return _print(output)


def _print(output: str) -> int:
    """Print the command's output; a reader that stops early (``| head``) ends it quietly."""
    try:
        if output:  # a command that printed as it went (hopsml ui) returns nothing more to say
            print(output)
        sys.stdout.flush()
    except BrokenPipeError:
        # the rest goes nowhere, and Python's own flush at exit must not complain either
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    return 0


if __name__ == "__main__":
    sys.exit(main())
