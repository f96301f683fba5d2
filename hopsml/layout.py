"""The project directory layout: every path hopsml writes is built here and only here.

Pure string functions, no I/O. Paths are relative to the root URI (the storage layer joins them).

>>> exp = ExperimentDir.of("demo", "local-1700000000000", 3)
>>> exp.path
'Projects/demo/Experiments/local-1700000000000_3'
>>> exp.record
'Projects/demo/Experiments/local-1700000000000_3/experiment.json'
>>> exp.worker_log(1)
'Projects/demo/Experiments/local-1700000000000_3/logs/worker_1.log'
>>> exp.trial({"lr": 0.001, "dropout": 0.7}).path
'Projects/demo/Experiments/local-1700000000000_3/lr=0.001&dropout=0.7'
>>> dataset_dir("demo", "digits")
'Projects/demo/Datasets/digits'
>>> model_dir("demo", "mnist", 2)
'Projects/demo/Models/mnist/2'
>>> ModelDir.of("demo", "mnist", 2).record
'Projects/demo/Models/mnist/2/.model.json'
"""

from __future__ import annotations

import posixpath
import re
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from hopsml.errors import InvalidNameError

PROJECTS = "Projects"
EXPERIMENTS = "Experiments"
DATASETS = "Datasets"
MODELS = "Models"

RECORD = "experiment.json"
ENVIRONMENT = "conda.yml"
PROGRAM_STEM = "program"
OUTPUT_LOG = "output.log"
METRICS = "metrics.jsonl"
LOGS = "logs"
TENSORBOARD = "tensorboard"
CHECKPOINT = "checkpoint"
EVAL = "eval"
RESOURCES = "resources"
MODULES = "modules"  # the user's own module files that went with the run
SUMMARY = ".summary.json"
HPARAMS = ".hparams.json"
OUTPUTS = ".outputs.json"
METRIC = ".metric"
MODEL_RECORD = ".model.json"    # hopsml's record of a model version: a dot-file, so no model file takes its name
LEGACY_MODEL_RECORD = "model.json"   # where versions registered before kept it (read, never written)
MODEL_DONE = "_SUCCESS"
HSML_RECORD = "hsml.json"   # what hsml records of a version beyond model.json: its feature view, training dataset
DATASETS_USED = "datasets.json"
TIMELINE = "timeline"  # the run's timeline: one part per rank and the merged trace
TIMELINE_TRACE = "trace.json"
TIMELINE_SYSTEM = "system.json"  # each rank's system samples over time, taken out of the trace for the web view

_RUN_NAME = re.compile(r"^(?P<app_id>.+)_(?P<run_id>\d+)$")
_UNSAFE = re.compile(r"[^A-Za-z0-9._\-=+,]")


# File systems allow 255 bytes in one folder name; hidden staging folders add a prefix and a suffix.
MAX_NAME_BYTES = 200


def validate_name(name: str, what: str = "name") -> str:
    """Return `name` if it is safe as one path component, else raise InvalidNameError.

    >>> validate_name("mnist-v2")
    'mnist-v2'
    >>> validate_name("../etc")
    Traceback (most recent call last):
    ...
    hopsml.errors.InvalidNameError: invalid name '../etc': it must not contain '/', '\\\\' or '..' ...
    """
    if not isinstance(name, str) or not name.strip():
        raise InvalidNameError(f"invalid {what} {name!r}: it must be a non-empty string")
    unprintable = next((c for c in name if unicodedata.category(c) in ("Cc", "Cs")), None)
    if unprintable is not None:
        raise InvalidNameError(f"invalid {what} {name!r}: it holds the control character {unprintable!r} (names "
                               "become folder names and are printed; spaces and any other Unicode are fine)")
    if "/" in name or "\\" in name or ".." in name or name in (".",) or "\x00" in name:
        raise InvalidNameError(f"invalid {what} {name!r}: it must not contain '/', '\\\\' or '..' "
                               "(it becomes a single folder name); choose a plain name like 'mnist-v2'")
    if len(name.encode("utf-8")) > MAX_NAME_BYTES:
        raise InvalidNameError(f"invalid {what} {name[:40]!r}... ({len(name.encode('utf-8'))} bytes): it becomes a "
                               f"folder name, and those are limited, so it may have at most {MAX_NAME_BYTES} bytes")
    return name


# Characters the Delta Lake library (delta-rs) cannot have in a table's path: '[', ']', '|', '^' panic it, a '%'
# before two hex digits is decoded again, '?' and '#' empty its history. Not in a feature group's or view's name
# (each is a Delta table's folder), nor in the root that holds them.
TABLE_PATH_REFUSED = "[]|^%?#"


def validate_table_name(name: str, what: str = "name") -> str:
    """`name` if it is a valid name (`validate_name`) that a Delta table's folder can also have, else
    InvalidNameError naming the rule.

    >>> validate_table_name("ümlaut 名前")
    'ümlaut 名前'
    >>> validate_table_name("a[1]", "feature group name")
    Traceback (most recent call last):
    ...
    hopsml.errors.InvalidNameError: invalid feature group name 'a[1]': it must not contain any of '[', ']', ...
    """
    validate_name(name, what)
    refused = [c for c in TABLE_PATH_REFUSED if c in name]
    if refused:
        raise InvalidNameError(f"invalid {what} {name!r}: it must not contain any of "
                               f"{', '.join(map(repr, TABLE_PATH_REFUSED))} (the Delta Lake library cannot "
                               "keep a table in such a folder); spaces and any other Unicode are fine")
    return name


def join(*parts: str) -> str:
    """Join relative path parts with '/', whatever the local OS uses."""
    return posixpath.join(*parts)


def project_dir(project: str) -> str:
    return join(PROJECTS, validate_name(project, "project name"))


def experiments_dir(project: str) -> str:
    return join(project_dir(project), EXPERIMENTS)


def dataset_dir(project: str, name: str) -> str:
    return join(project_dir(project), DATASETS, validate_name(name, "dataset name"))


def models_dir(project: str) -> str:
    return join(project_dir(project), MODELS)


def model_versions_dir(project: str, name: str) -> str:
    """`Models/<name>/`: one folder per version below it."""
    return join(models_dir(project), validate_name(name, "model name"))


def model_dir(project: str, name: str, version: int) -> str:
    return join(model_versions_dir(project, name), str(validate_version(version)))


def environment_archive(project: str, fingerprint: str) -> str:
    """`Resources/environments/<fingerprint>.tar.gz`: a packed Python environment for the executors."""
    return join(project_dir(project), "Resources", "environments",
                validate_name(fingerprint, "fingerprint") + ".tar.gz")


def environment_manifest(project: str, fingerprint: str) -> str:
    """Beside the archive, written after it: the archive is whole (its size), what it holds."""
    return join(project_dir(project), "Resources", "environments", validate_name(fingerprint, "fingerprint") + ".json")


def validate_version(version: object) -> int:
    """A model version: a positive integer (also given as text, as on the command line).

    >>> validate_version("3")
    3
    >>> validate_version(0)
    Traceback (most recent call last):
    ...
    hopsml.errors.InvalidNameError: invalid model version 0: versions are whole numbers from 1 up
    """
    try:
        number = int(str(version).strip()) if not isinstance(version, bool) else 0
    except ValueError:
        number = 0
    if number < 1 or str(number) != str(version).strip():
        raise InvalidNameError(f"invalid model version {version!r}: versions are whole numbers from 1 up")
    return number


def experiment_id(app_id: str, run_id: int) -> str:
    """The id users see and type: '<app_id>_<run_id>'.

    >>> experiment_id("application_1_0001", 7)
    'application_1_0001_7'
    """
    return f"{validate_name(app_id, 'application id')}_{int(run_id)}"


def parse_experiment_id(exp_id: str) -> tuple[str, int]:
    """Split an experiment id into (app_id, run_id).

    >>> parse_experiment_id("local-1700000000000_12")
    ('local-1700000000000', 12)
    """
    match = _RUN_NAME.match(validate_name(exp_id, "experiment id"))
    if not match:
        raise InvalidNameError(f"invalid experiment id {exp_id!r}: expected '<app_id>_<run_id>', "
                               "as shown by 'hopsml experiments list'")
    return match["app_id"], int(match["run_id"])


def trial_name(params: Mapping[str, Any]) -> str:
    """A folder name for one trial, as Hopsworks writes it: 'k1=v1&k2=v2', made safe.

    >>> trial_name({"lr": 0.001, "optimizer": "adam/w"})
    'lr=0.001&optimizer=adam_w'
    """
    if not params:
        raise InvalidNameError("a trial needs at least one parameter to be named")
    text = "&".join(f"{_UNSAFE.sub('_', str(k))}={_UNSAFE.sub('_', str(v))}" for k, v in params.items())
    text = text.replace("..", "_").encode("utf-8")[:MAX_NAME_BYTES].decode("utf-8", errors="ignore")
    return validate_name(text, "trial name")


@dataclass(frozen=True)
class RunDir:
    """The files of anything that runs a function: an experiment or one trial of a search."""

    path: str

    @property
    def project(self) -> str | None:
        """The project the run belongs to: <project> in 'Projects/<project>/...', else None.

        >>> RunDir("Projects/demo/Experiments/app_1/trial-0").project
        'demo'
        """
        parts = self.path.split("/")
        return parts[1] if len(parts) > 1 and parts[0] == PROJECTS else None

    @property
    def output_log(self) -> str:
        return join(self.path, OUTPUT_LOG)

    @property
    def metrics(self) -> str:
        return join(self.path, METRICS)

    @property
    def tensorboard(self) -> str:
        return join(self.path, TENSORBOARD)

    @property
    def checkpoint(self) -> str:
        return join(self.path, CHECKPOINT)

    @property
    def eval(self) -> str:
        return join(self.path, EVAL)

    @property
    def datasets_used(self) -> str:
        """The datasets the run read (name, splits, when they were prepared): model lineage."""
        return join(self.path, DATASETS_USED)

    @property
    def timeline(self) -> str:
        """The timeline folder: `rank-<r>.json` per rank and the merged `trace.json`.

        >>> RunDir("Projects/demo/Experiments/app_1").timeline_trace
        'Projects/demo/Experiments/app_1/timeline/trace.json'
        """
        return join(self.path, TIMELINE)

    @property
    def timeline_trace(self) -> str:
        return join(self.path, TIMELINE, TIMELINE_TRACE)

    @property
    def timeline_system(self) -> str:
        """Each rank's system samples (CPU, memory, network, GPU) over the run, written with the merged trace."""
        return join(self.path, TIMELINE, TIMELINE_SYSTEM)

    def timeline_part(self, rank: int) -> str:
        """One rank's part of the timeline (a Chrome trace of its own)."""
        return join(self.path, TIMELINE, f"rank-{int(rank)}.json")

    @property
    def hparams(self) -> str:
        return join(self.path, HPARAMS)

    @property
    def outputs(self) -> str:
        return join(self.path, OUTPUTS)

    @property
    def metric(self) -> str:
        return join(self.path, METRIC)

    def file(self, name: str) -> str:
        """A file the function returned, copied into this directory under its base name."""
        return join(self.path, validate_name(name, "file name"))


@dataclass(frozen=True)
class ExperimentDir(RunDir):
    """`Projects/<project>/Experiments/<app_id>_<run_id>/` and what it holds."""

    @classmethod
    def of(cls, project: str, app_id: str, run_id: int) -> ExperimentDir:
        return cls(join(experiments_dir(project), experiment_id(app_id, run_id)))

    @classmethod
    def from_id(cls, project: str, exp_id: str) -> ExperimentDir:
        return cls.of(project, *parse_experiment_id(exp_id))

    @property
    def id(self) -> str:
        return posixpath.basename(self.path)

    @property
    def record(self) -> str:
        return join(self.path, RECORD)

    @property
    def environment(self) -> str:
        return join(self.path, ENVIRONMENT)

    def program(self, suffix: str) -> str:
        """'program.ipynb' or 'program.py'."""
        if suffix not in (".ipynb", ".py"):
            raise InvalidNameError(f"a versioned program is a .ipynb or .py file, not {suffix!r}")
        return join(self.path, PROGRAM_STEM + suffix)

    def resource(self, name: str) -> str:
        return join(self.path, RESOURCES, validate_name(name, "resource name"))

    def module(self, rel: str) -> str:
        """A shipped module file, by its path relative to its folder on the driver's sys.path."""
        return join(self.path, MODULES, *(validate_name(part, "module path") for part in rel.split("/")))

    @property
    def logs(self) -> str:
        return join(self.path, LOGS)

    def worker_log(self, rank: int) -> str:
        return join(self.path, LOGS, f"worker_{int(rank)}.log")

    @property
    def summary(self) -> str:
        return join(self.path, SUMMARY)

    def trial(self, params: Mapping[str, Any]) -> RunDir:
        return RunDir(join(self.path, trial_name(params)))


@dataclass(frozen=True)
class ModelDir:
    """`Projects/<project>/Models/<name>/<version>/`: the model's files, its record and its marker."""

    path: str

    @classmethod
    def of(cls, project: str, name: str, version: int) -> ModelDir:
        return cls(model_dir(project, name, version))

    @property
    def record(self) -> str:
        return join(self.path, MODEL_RECORD)

    @property
    def legacy_record(self) -> str:
        """The record of a version registered before it moved to a dot-file (XGBoost's model.json took its name)."""
        return join(self.path, LEGACY_MODEL_RECORD)

    @property
    def done(self) -> str:
        """Written last: a version folder without it is incomplete and not listed."""
        return join(self.path, MODEL_DONE)

    def file(self, rel: str) -> str:
        """A model file, `rel` '/'-separated inside the version folder."""
        parts = [validate_name(part, "model file name") for part in rel.split("/") if part]
        return join(self.path, *parts)


# --- model servings ---------------------------------------------------------------------------------
SERVING = "Serving"
LOGS_DATASET = "Logs"
SERVING_DEFINITION = "serving.json"
SERVING_STATE = "server.json"


@dataclass(frozen=True)
class ServingDir:
    """`Projects/<project>/Serving/<name>/` (definition and server state) and the serving's log in the
    project's Logs dataset.

    >>> s = ServingDir.of("demo", "mnist")
    >>> s.definition
    'Projects/demo/Serving/mnist/serving.json'
    >>> s.state
    'Projects/demo/Serving/mnist/server.json'
    >>> s.log
    'Projects/demo/Logs/Serving/mnist/mnist.log'
    >>> s.inference_log
    'Projects/demo/Logs/Serving/mnist/inference'
    """

    path: str
    log_dir: str

    @classmethod
    def of(cls, project: str, name: str) -> ServingDir:
        name = validate_name(name, "serving name")
        return cls(join(servings_dir(project), name), join(project_dir(project), LOGS_DATASET, SERVING, name))

    @property
    def name(self) -> str:
        return posixpath.basename(self.path)

    @property
    def definition(self) -> str:
        return join(self.path, SERVING_DEFINITION)

    @property
    def state(self) -> str:
        """Written by the running server: its pids, port, state and restarts."""
        return join(self.path, SERVING_STATE)

    @property
    def log(self) -> str:
        return join(self.log_dir, f"{self.name}.log")

    @property
    def inference_log(self) -> str:
        """The inference log's Parquet files (beside the server's log, so it outlives the serving)."""
        return join(self.log_dir, "inference")

    @property
    def monitor_report(self) -> str:
        """The last skew and drift report of `hopsml.serving.monitor`."""
        return join(self.path, "monitor.json")

    @property
    def canary_report(self) -> str:
        """The last decision on the serving's canary (promoted, rolled back, waiting) and why."""
        return join(self.path, "canary.json")


def servings_dir(project: str) -> str:
    """`Serving/`: one folder per serving of the project."""
    return join(project_dir(project), SERVING)


# --- a dataset's folder (Datasets/<name>/), as the data jobs write it --------------------------------------

DATASET_MANIFEST = "dataset.json"
DATASET_SUCCESS = "_SUCCESS"
DATASET_LABELS = "labels.json"
DATASET_TRANSFORM = "transform.json"
DATASET_STATS_JSON = "stats.json"
DATASET_STATS_HTML = "stats.html"
DATASET_REJECTED = "_rejected"
DATASET_PARTS = "_parts"
DATASET_PARQUET = "parquet"
DATASET_TFRECORD = "tfrecord"
DATASET_STAGING = ".staging-"      # in the hidden name of a job's staging folder: .<name>.staging-<id>
DATASET_HEARTBEAT = ".heartbeat"   # suffix of the staging folder's heartbeat file beside it


@dataclass(frozen=True)
class DatasetDir:
    """The files of one dataset folder, relative to the root."""

    path: str

    @classmethod
    def of(cls, project: str, name: str) -> DatasetDir:
        return cls(dataset_dir(project, name))

    @property
    def name(self) -> str:
        return posixpath.basename(self.path)

    def file(self, name: str) -> str:
        return join(self.path, name)

    @property
    def manifest(self) -> str:
        return self.file(DATASET_MANIFEST)

    @property
    def success(self) -> str:
        return self.file(DATASET_SUCCESS)

    @property
    def labels(self) -> str:
        return self.file(DATASET_LABELS)

    @property
    def transform(self) -> str:
        return self.file(DATASET_TRANSFORM)

    @property
    def stats_json(self) -> str:
        return self.file(DATASET_STATS_JSON)

    @property
    def stats_html(self) -> str:
        return self.file(DATASET_STATS_HTML)

    @property
    def rejected(self) -> str:
        return self.file(DATASET_REJECTED)

    @property
    def parts(self) -> str:
        return self.file(DATASET_PARTS)

    def parquet(self, split: str) -> str:
        return join(self.path, DATASET_PARQUET, validate_name(split, "split name"))

    def tfrecord(self, split: str) -> str:
        return join(self.path, DATASET_TFRECORD, validate_name(split, "split name"))


# --- the feature store ------------------------------------------------------------------------------------
FEATURE_STORE = "FeatureStore"
FEATURE_VIEWS = "views"
TRAINING_DATASETS = "Training_Datasets"
GROUP_RECORD = "_group.json"          # beside the group's Delta table: names starting with _ are not table files
GROUP_STATISTICS = "_statistics"      # <commit>.json: the statistics of the group after that commit
GROUP_VALIDATION = "_validation"      # <time ns>.json: each validation report of a batch against the suite
GROUP_AFTER_COMMIT = "_after_commit"  # <time ns>.json: a step after a commit that failed (the commit stands)
GROUP_ONLINE_OWED = "_online_owed.json"  # an insert's online write not yet done: written before its offline commit
VIEW_RECORD = "view.json"
VIEW_LOG = "log"                      # beside view.json: the feature log's Delta table, and buffer/ before it
TRAINING_DATASET_RECORD = "training_dataset.json"
VIEW_TAGS = "tags.json"               # beside view.json: the view's tags and its training datasets' (add_tag)
TRANSFORMATION_FUNCTIONS = "_transformation_functions"   # in the feature store: <name>_<version>.json, saved udfs


def feature_store_dir(project: str) -> str:
    """The project's feature store: its groups' tables, and its views under views/.

    >>> feature_store_dir("demo")
    'Projects/demo/FeatureStore'
    """
    return join(project_dir(project), FEATURE_STORE)


def feature_group_dir(project: str, name: str, version: int) -> str:
    """The Delta table of a feature group version.

    >>> feature_group_dir("demo", "transactions", 1)
    'Projects/demo/FeatureStore/transactions_1'
    """
    return join(feature_store_dir(project), f"{validate_name(name, 'feature group name')}_{validate_version(version)}")


def feature_views_dir(project: str) -> str:
    return join(feature_store_dir(project), FEATURE_VIEWS)


def feature_view_dir(project: str, name: str, version: int) -> str:
    """A feature view version's definition.

    >>> feature_view_dir("demo", "fraud", 2)
    'Projects/demo/FeatureStore/views/fraud_2'
    """
    return join(feature_views_dir(project), f"{validate_name(name, 'feature view name')}_{validate_version(version)}")


def training_datasets_dir(project: str, view: str, view_version: int) -> str:
    """The training dataset versions of a feature view version, one folder each.

    >>> training_datasets_dir("demo", "fraud", 2)
    'Projects/demo/Training_Datasets/fraud_2'
    """
    return join(project_dir(project), TRAINING_DATASETS,
                f"{validate_name(view, 'feature view name')}_{validate_version(view_version)}")


# --- named jobs and their executions ---------------------------------------------------------------------
JOBS = "Jobs"
JOB_RECORD = "job.json"
JOB_EXECUTIONS = "executions"
EXECUTION_RECORD = "execution.json"
EXECUTION_STDOUT = "stdout.log"
EXECUTION_STDERR = "stderr.log"
EXECUTION_NOTES = "produced.jsonl"       # one line per object the execution produced (execution_notes.py)
EXECUTION_HEARTBEAT = ".heartbeat"       # rewritten by the execution's runner while it runs
EXECUTION_PROGRAM_STEM = "program"       # the app as it ran: program.py or program.ipynb
EXECUTION_NOTEBOOK = "executed.ipynb"    # a notebook job's notebook with its outputs


def jobs_dir(project: str) -> str:
    """`Jobs/`: one folder per named job of the project.

    >>> jobs_dir("demo")
    'Projects/demo/Jobs'
    """
    return join(project_dir(project), JOBS)


def validate_execution_id(execution_id: object) -> int:
    """An execution id: a whole number from 1 up (also given as text, as on the command line).

    >>> validate_execution_id("2")
    2
    """
    try:
        return validate_version(execution_id)
    except InvalidNameError:
        raise InvalidNameError(f"invalid execution id {execution_id!r}: executions are numbered 1, 2, 3, ... "
                               "as 'hopsml jobs show NAME' lists them") from None


@dataclass(frozen=True)
class JobDir:
    """`Projects/<project>/Jobs/<name>/`: the job's definition and its executions.

    >>> job = JobDir.of("demo", "nightly")
    >>> job.record
    'Projects/demo/Jobs/nightly/job.json'
    >>> job.execution(3).record
    'Projects/demo/Jobs/nightly/executions/3/execution.json'
    >>> job.execution(3).stdout
    'Projects/demo/Jobs/nightly/executions/3/stdout.log'
    """

    path: str

    @classmethod
    def of(cls, project: str, name: str) -> JobDir:
        return cls(join(jobs_dir(project), validate_name(name, "job name")))

    @property
    def name(self) -> str:
        return posixpath.basename(self.path)

    @property
    def record(self) -> str:
        return join(self.path, JOB_RECORD)

    @property
    def secrets(self) -> str:
        """The job's secret Spark settings, apart from job.json and readable by its owner only."""
        return join(self.path, "secrets.json")

    @property
    def executions(self) -> str:
        return join(self.path, JOB_EXECUTIONS)

    def execution(self, execution_id: int) -> ExecutionDir:
        return ExecutionDir(join(self.path, JOB_EXECUTIONS, str(validate_execution_id(execution_id))))


@dataclass(frozen=True)
class ExecutionDir:
    """One execution of a job: its record, its two logs, what it produced, the program as it ran."""

    path: str

    @property
    def id(self) -> int:
        return int(posixpath.basename(self.path))

    @property
    def record(self) -> str:
        return join(self.path, EXECUTION_RECORD)

    @property
    def stdout(self) -> str:
        return join(self.path, EXECUTION_STDOUT)

    @property
    def stderr(self) -> str:
        return join(self.path, EXECUTION_STDERR)

    @property
    def notes(self) -> str:
        return join(self.path, EXECUTION_NOTES)

    @property
    def heartbeat(self) -> str:
        return join(self.path, EXECUTION_HEARTBEAT)

    @property
    def notebook(self) -> str:
        return join(self.path, EXECUTION_NOTEBOOK)

    def program(self, suffix: str) -> str:
        """'program.py' or 'program.ipynb'.

        >>> ExecutionDir("Projects/demo/Jobs/j/executions/1").program(".ipynb")
        'Projects/demo/Jobs/j/executions/1/program.ipynb'
        """
        if suffix not in (".ipynb", ".py"):
            raise InvalidNameError(f"a job's program is a .ipynb or .py file, not {suffix!r}")
        return join(self.path, EXECUTION_PROGRAM_STEM + suffix)
