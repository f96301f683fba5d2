"""What a named job is: its app (a script or a notebook), default arguments, Spark settings and type, as
`Jobs/<name>/job.json` holds them. Plain data with its checks, so that the job's face (`job.py`), the launch
(`launch.py`) and hopsworks' job API all read one definition."""

from __future__ import annotations

import getpass
import os
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from hopsml import layout
from hopsml.clock import utc_now as now
from hopsml.errors import JobError
from hopsml.fs import Storage

FORMAT = 1
PYSPARK = "PYSPARK"   # run under spark-submit (a notebook: its kernel's Spark gets the job's settings)
PYTHON = "PYTHON"     # run by this Python alone, no JVM (hopsworks' Python jobs)
JOB_TYPES = (PYSPARK, PYTHON)
KINDS = {".py": "python", ".ipynb": "notebook"}




def parse_args(args: str | Sequence[str] | None, what: str = "args") -> list[str] | None:
    """A job's arguments as a list: a string is split as a shell would (shlex), a list is kept.

    >>> parse_args("--lr 0.1 --name 'my run'")
    ['--lr', '0.1', '--name', 'my run']
    >>> parse_args(None) is None
    True
    """
    if args is None:
        return None
    if isinstance(args, str):
        try:
            return shlex.split(args)
        except ValueError as exc:
            raise JobError(f"{what} {args!r} cannot be split into words ({exc}): close the quotes, or pass "
                           "a list of strings") from None
    if isinstance(args, (bytes, Mapping)) or not all(isinstance(word, (str, int, float)) for word in args):
        raise JobError(f"{what} must be a string or a list of strings, not {args!r}")
    return [str(word) for word in args]


def _conf_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def parse_spark_conf(conf: Mapping[str, Any] | Sequence[str] | None) -> dict[str, str]:
    """Spark settings as text: a mapping, or 'k=v' words as the command line gives them.

    >>> parse_spark_conf(["spark.executor.memory=2g", "spark.dynamicAllocation.enabled=true"])
    {'spark.executor.memory': '2g', 'spark.dynamicAllocation.enabled': 'true'}
    >>> parse_spark_conf({"spark.executor.cores": 2, "spark.eventLog.enabled": False})
    {'spark.executor.cores': '2', 'spark.eventLog.enabled': 'false'}
    """
    if conf is None:
        return {}
    if isinstance(conf, Mapping):
        pairs = [(str(key), _conf_value(value)) for key, value in conf.items()]
    elif isinstance(conf, str):
        raise JobError(f"spark_conf {conf!r}: give a mapping or a list of 'key=value' words")
    else:
        pairs = []
        for word in conf:
            key, sep, value = str(word).partition("=")
            if not sep:
                raise JobError(f"Spark setting {word!r} is not key=value: write it as spark.executor.memory=2g")
            pairs.append((key.strip(), value))
    out = {}
    for key, value in pairs:
        if not key or any(c.isspace() for c in key) or "=" in key:
            raise JobError(f"Spark setting name {key!r} is not a setting name (no spaces, no '='); "
                           "use names like spark.executor.memory")
        out[key] = value
    return out


def job_kind(app_path: str) -> str:
    """'python' for a .py app, 'notebook' for a .ipynb one."""
    suffix = os.path.splitext(app_path)[1].lower()
    if suffix not in KINDS:
        raise JobError(f"app {app_path!r}: a job runs a Python script (.py) or a notebook (.ipynb), not a "
                       f"{suffix or 'file without a suffix'}")
    return KINDS[suffix]


def resolve_app(storage: Storage, project: str, app_path: str) -> tuple[str, bool]:
    """Where the app lies: (an absolute local path, False), or (a path inside the project such as
    'Resources/app.py', True) as hopsworks' appPath names one. A missing app fails here, naming both places."""
    if not isinstance(app_path, str) or not app_path.strip():
        raise JobError("a job needs an app: the path of a .py script or an .ipynb notebook")
    local = os.path.abspath(os.path.expanduser(app_path))
    if os.path.isfile(local):
        return local, False
    inside = _project_relative(project, app_path)
    if inside is not None and storage.info(layout.join(layout.project_dir(project), inside)).is_file:
        return inside, True
    places = f"{local}" + (f" nor {storage.uri(layout.join(layout.project_dir(project), inside))}" if inside else "")
    raise JobError(f"the job's app {app_path!r} does not exist: not at {places}; give the path of an existing "
                   ".py or .ipynb file (local, or inside the project such as Resources/app.py)")


def _project_relative(project: str, app_path: str) -> str | None:
    """'Resources/app.py' for 'Resources/app.py', '/Projects/<project>/Resources/app.py' or
    'hopsfs:///Projects/<project>/Resources/app.py'; None for a path that cannot be inside the project."""
    path = app_path.split("://", 1)[1] if "://" in app_path else app_path
    prefix = f"/{layout.PROJECTS}/{project}/"
    if path.startswith(prefix):
        path = path[len(prefix):]
    elif path.startswith("/"):
        return None
    parts = [part for part in path.split("/") if part not in ("", ".")]
    if not parts or any(part == ".." for part in parts):
        return None
    return "/".join(parts)


@dataclass
class JobDefinition:
    """One job as `job.json` records it."""

    name: str
    app_path: str
    kind: str
    job_type: str = PYSPARK
    app_in_project: bool = False
    default_args: list[str] = field(default_factory=list)
    spark_conf: dict[str, str] = field(default_factory=dict)
    description: str = ""
    created: str = field(default_factory=now)
    creator: str = field(default_factory=getpass.getuser)
    config: dict[str, Any] = field(default_factory=dict)   # hopsworks' settings hopsml keeps but does not use
    secret_keys: list[str] = field(default_factory=list)   # the settings whose values are kept in secrets.json
    format: int = FORMAT

    def __post_init__(self) -> None:
        layout.validate_name(self.name, "job name")
        if self.job_type not in JOB_TYPES:
            raise JobError(f"job {self.name!r}: job type {self.job_type!r} is not one hopsml runs; use "
                           f"{' or '.join(JOB_TYPES)} (SPARK jobs of a jar, DOCKER and FLINK jobs are not supported)")
        if self.kind not in KINDS.values():
            raise JobError(f"job {self.name!r}: kind {self.kind!r} is neither 'python' nor 'notebook'")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: object, where: str) -> JobDefinition:
        """The definition read from `where` (job.json), or JobError saying what is wrong with the file."""
        if not isinstance(data, dict):
            raise JobError(f"{where} is not a job definition (a JSON object); recreate the job with "
                           "'hopsml jobs create NAME APP --overwrite'")
        known = {name: data[name] for name in cls.__dataclass_fields__ if name in data}
        try:
            return cls(**known)
        except TypeError as exc:
            raise JobError(f"{where} is not a complete job definition ({exc}); recreate the job with "
                           "'hopsml jobs create NAME APP --overwrite'") from None
