"""Settings, read in one place: argument > HOPSML_* environment variable > conf/hopsml.toml > default.

Every value remembers where it came from, so an error can say "num_workers='x' (from environment
variable HOPSML_NUM_WORKERS) ...".
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import tomllib

from hopsml.errors import SettingsError
from hopsml.redact import redact_conf, redact_uri

ENV_PREFIX = "HOPSML_"
CONF_ENV = "HOPSML_CONF"
DEFAULT_CONF_FILE = Path("conf") / "hopsml.toml"


def _default_master() -> str:
    # Barrier stages need one slot per rank: never fewer than 4 slots, more on bigger machines.
    return f"local[{max(4, os.cpu_count() or 1)}]"


def _parse_int(value: object) -> int:
    if isinstance(value, bool):
        raise ValueError("a boolean is not a number")
    number = int(str(value).strip()) if not isinstance(value, int) else value
    if number < 1:
        raise ValueError("must be at least 1")
    return number


def _parse_count(value: object) -> int:
    if isinstance(value, bool):
        raise ValueError("a boolean is not a number")
    number = int(str(value).strip()) if not isinstance(value, int) else value
    if number < 0:
        raise ValueError("must be 0 or more")
    return number


def _parse_seconds(value: object) -> float:
    if isinstance(value, bool):
        raise ValueError("a boolean is not a number of seconds")
    number = float(str(value).strip()) if not isinstance(value, (int, float)) else float(value)
    if not number > 0 or number == float("inf"):
        raise ValueError("must be a positive number of seconds")
    return number


def _parse_name(value: object) -> str:
    from hopsml.layout import validate_name  # layout is pure; local import keeps the layering flat

    return validate_name(str(value), what="project name")


def _parse_str(value: object) -> str:
    text = str(value).strip()
    if not text:
        raise ValueError("must not be empty")
    return text


def _parse_bool(value: object) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off", ""):
        return False
    raise ValueError("must be true or false")


def _parse_interface(value: object) -> str:
    """An interface name (eth0, ib0), an IP address, or '' for the address Spark knows the host by."""
    text = str(value).strip()
    if any(c.isspace() or c in "/:" for c in text) and not is_ip_address(text):
        raise ValueError("must be a network interface name such as eth0 or an IP address")
    return text


def _parse_remote(value: object) -> str:
    """A Spark Connect URL (sc://host:port/;params), local[N] for a Connect server in this process, or ''."""
    text = str(value).strip()
    if text and not text.startswith(("sc://", "local")):
        raise ValueError("must be a Spark Connect URL such as sc://host:15002 (or local[4] for one started in this "
                         "process), or empty for a classic session")
    return text


def _parse_online_store(value: object) -> str:
    """Where online-enabled feature groups keep their newest rows: '' (SQLite in the project), sqlite:///path, or
    mysql://user:password@host:port/database (MySQL, MariaDB or RonDB)."""
    text = str(value).strip()
    if text and not text.startswith(("sqlite://", "mysql://", "mariadb://")):
        raise ValueError("must be empty (SQLite in the project), sqlite:///path/to/file.db or "
                         "mysql://user:password@host:3306/database")
    return text


def is_ip_address(text: str) -> bool:
    """Whether the network_interface setting names an IP address rather than an interface."""
    import ipaddress

    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def _parse_port_range(value: object) -> tuple[int, int] | None:
    """'40000-40100' (or a [low, high] pair) -> (40000, 40100); '' -> None (the kernel picks)."""
    if value is None:
        return None
    if isinstance(value, (list, tuple)):
        if len(value) != 2:
            raise ValueError("must be a pair [low, high]")
        low, high = value
    else:
        text = str(value).strip()
        if not text:
            return None
        low, sep, high = text.partition("-")
        if not sep:
            raise ValueError("must be written low-high, e.g. 40000-40100")
    try:
        low, high = int(str(low).strip()), int(str(high).strip())
    except ValueError:
        raise ValueError("must be written low-high with whole numbers, e.g. 40000-40100") from None
    if not 1 <= low <= high <= 65535:
        raise ValueError("needs 1 <= low <= high <= 65535")
    return low, high


def _parse_choice(*choices: str) -> Callable[[Any], str]:
    """A parser that accepts one of `choices` (any case, spaces stripped); empty is the first."""

    def parse(value: object) -> str:
        text = str(value).strip().lower() or choices[0]
        if text not in choices:
            raise ValueError(f"must be one of {', '.join(choices)}")
        return text

    return parse


def _parse_text(value: object) -> str:
    return str(value).strip()


def _parse_spark_conf(value: object) -> dict[str, str]:
    """A mapping, JSON object text, or 'k=v,k=v' text."""
    if isinstance(value, Mapping):
        return {str(k): str(v) for k, v in value.items()}
    text = str(value).strip()
    if not text:
        return {}
    if text.startswith("{"):
        parsed = json.loads(text)
        if not isinstance(parsed, dict):
            raise ValueError("must be a JSON object")
        return {str(k): str(v) for k, v in parsed.items()}
    pairs = {}
    items = text.split(",")
    for number, item in enumerate(items, 1):
        key, sep, val = item.partition("=")
        if not sep or not key.strip():
            # the item is not echoed: it may be the tail of a secret value that contained a comma
            raise ValueError(f"item {number} of {len(items)} is not key=value; write key=value pairs separated "
                             "by commas, or a JSON object for values that contain commas")
        pairs[key.strip()] = val.strip()
    return pairs


@dataclass(frozen=True)
class _Field:
    parse: Callable[[Any], Any]
    default: Callable[[], Any]
    help: str
    shown_default: str | None = None   # the default as the docs write it, where it depends on the machine


_FIELDS: dict[str, _Field] = {
    "project": _Field(_parse_name, lambda: "demo", "project name under <root>/Projects/"),
    "root": _Field(_parse_str, lambda: "~/hopsml", "root URI of all state (path, file://, hdfs://, s3://)"),
    "master": _Field(_parse_str, _default_master, "Spark master when hopsml starts the session (used only when "
                     "no SparkSession is running)", "local[N], N = max(4, cores)"),
    "remote": _Field(_parse_remote, lambda: os.environ.get("SPARK_REMOTE", ""), "Spark Connect server to run on "
                     "(sc://host:15002, or local[N] for one in this process) when no SparkSession is running, "
                     "instead of starting Spark on the master",
                     "$SPARK_REMOTE, else empty"),
    "num_workers": _Field(_parse_int, lambda: 2, "default number of ranks for experiment.allreduce"),
    "small_table_rows": _Field(_parse_count, lambda: 50_000, "rows up to which prepare_table prepares a table "
                               "(one plain local CSV file) in the driver without Spark, into the same files, "
                               "statistics and fingerprints; 0: always Spark"),
    "log_dir": _Field(_parse_str, lambda: "~/.hopsml/logs", "folder for Spark's own logs (the console stays quiet)",
                      "logs/ in a local root, else ~/.hopsml/logs"),
    "spark_conf": _Field(_parse_spark_conf, dict, "extra Spark settings for a session hopsml starts: k=v,k=v or a "
                         "JSON object in the environment, the [spark] table in the file"),
    "sync_interval_s": _Field(_parse_seconds, lambda: 5.0, "seconds between copies of a running task's "
                              "files (logs, metrics, checkpoints) to an HDFS or S3 root; the driver's value goes to "
                              "the tasks"),
    "heartbeat_s": _Field(_parse_seconds, lambda: 10.0, "seconds between heartbeats of a running experiment"),
    "lost_after_s": _Field(_parse_seconds, lambda: 120.0, "seconds without a heartbeat after which a RUNNING "
                           "experiment or a data job's staging folder counts as LOST"),
    "late_rank_s": _Field(_parse_seconds, lambda: 180.0, "seconds the other ranks of a distributed run may "
                          "take to return once one rank has returned, before the run fails naming them"),
    "shared_root": _Field(_parse_bool, lambda: False, "mark a local or file:// root as a folder every Spark "
                          "executor sees at the same path (an NFS or other shared mount), so it may be used "
                          "with a cluster master"),
    "check_versions": _Field(_parse_bool, lambda: True, "whether every task of a run first compares its Python, "
                             "hopsml, numpy, pyarrow and the function's frameworks with the driver's, failing the run "
                             "at once on a difference (naming the executor and both versions)"),
    "ship_environment": _Field(_parse_bool, lambda: True, "whether a session hopsml starts on a cluster master "
                               "gives its executors this Python environment, packed into the project once per set "
                               "of packages (unless spark.archives, spark.pyspark.python or PYSPARK_PYTHON is set)"),
    "network_interface": _Field(_parse_interface, lambda: "", "network interface (eth0, ib0) or IP address that "
                                "the ranks and the driver channel listen on (also exported as GLOO_SOCKET_IFNAME and "
                                "NCCL_SOCKET_IFNAME); empty: the address Spark knows each executor and the driver by"),
    "collective_timeout_s": _Field(_parse_seconds, lambda: 300.0, "seconds a collective waits for its peers "
                                   "before it fails naming the rank it waited on (experiment.allreduce(timeout_s=...) "
                                   "overrides it for one run)"),
    "collective_shm": _Field(_parse_bool, lambda: True, "whether ranks on the same host exchange data through "
                             "shared memory (false keeps every pair on TCP)"),
    "collective_host_id": _Field(_parse_text, lambda: "", "replaces the host identity that decides which ranks share "
                                 "memory; empty: the host's own (tests set it to fake several hosts)"),
    "gpu_collective": _Field(_parse_choice("auto", "nccl", "host"), lambda: "auto", "how cupy arrays are reduced: "
                             "auto (NCCL where every rank has its own GPU, else through host memory), nccl or host"),
    "user": _Field(_parse_text, lambda: "", "the user name recorded in experiments and models; empty: the login "
                   "name"),
    "online_store": _Field(_parse_online_store, lambda: "", "where online-enabled feature groups keep their newest "
                           "row per key for feature vectors: empty (SQLite in the project's feature store, no server), "
                           "sqlite:///path.db, or mysql://user:password@host:3306/database (MySQL, MariaDB or RonDB, "
                           "which several serving hosts share)", "empty: SQLite in the project"),
    "online_batch_rows": _Field(_parse_int, lambda: 20_000, "rows a streamed write into the online store holds at "
                                "once, per Spark task or on the driver: a Spark insert's newest rows per key and "
                                "`hopsml fs sync`'s rebuilt table are written a piece of this many rows at a time"),
    "port_range": _Field(_parse_port_range, lambda: None, "ports (low-high, e.g. 40000-40100) the ranks' "
                         "listeners, their framework ports and the driver channel take, for firewalls (each rank takes "
                         "2-3, the driver 1 per running experiment); empty: any free port"),
    "serving_max_connections": _Field(_parse_int, lambda: 1000, "open connections a serving instance keeps; one "
                                      "more closes the oldest idle one (else the oldest unfinished request), or is "
                                      "refused with 503"),
    "serving_max_headers": _Field(_parse_int, lambda: 100, "headers a request to a serving may have (more: 431)"),
    "serving_max_header_bytes": _Field(_parse_int, lambda: 8192, "bytes of one request header line, name and value "
                                       "(more: 431)"),
    "serving_max_url_bytes": _Field(_parse_int, lambda: 8192, "bytes of a request's URL (more: 414)"),
    "serving_max_head_bytes": _Field(_parse_int, lambda: 65536, "bytes of a request's whole head, request line and "
                                     "headers (more: 431)"),
    "serving_request_timeout_s": _Field(_parse_seconds, lambda: 30.0, "seconds a serving waits for a whole request, "
                                        "head and body, from its first byte (a slow or stalled client gets 408 and "
                                        "is closed; bytes that trickle in do not extend it)"),
    "serving_log_max_bytes": _Field(_parse_int, lambda: 10 << 20, "bytes of a serving's own log before it is "
                                    "rotated (<name>.log.1, .2, ...)"),
    "serving_log_backups": _Field(_parse_int, lambda: 3, "rotated files of a serving's own log that are kept"),
    "inference_log_max_bytes": _Field(_parse_int, lambda: 1 << 30, "bytes of one serving's inference log; the "
                                      "oldest files are dropped (and counted) beyond it"),
    "inference_log_max_age_s": _Field(_parse_seconds, lambda: 7 * 86400.0, "seconds an inference log file is kept; "
                                      "older ones are dropped (and counted)"),
    "inference_log_max_record_bytes": _Field(_parse_int, lambda: 1 << 20, "bytes of a request or an answer kept "
                                             "in one inference log record (a longer one keeps its first bytes and "
                                             "its size); a rejected request (4xx) keeps 1 KiB at most"),
}


@dataclass(frozen=True)
class _RunFields:
    """The settings a run carries to its ranks: the fields of `RunSettings`, and of `Settings` too."""

    sync_interval_s: float
    heartbeat_s: float
    lost_after_s: float
    late_rank_s: float
    network_interface: str
    port_range: tuple[int, int] | None
    collective_timeout_s: float
    collective_shm: bool
    collective_host_id: str
    gpu_collective: str
    user: str  # in a RunSettings resolved: the login name where the setting is empty


@dataclass(frozen=True, repr=False)
class Settings(_RunFields):
    """Resolved settings; `sources` says where each value came from. The repr shows no credentials."""

    project: str
    root: str
    master: str
    remote: str
    num_workers: int
    small_table_rows: int
    log_dir: str
    spark_conf: dict[str, str]
    shared_root: bool
    check_versions: bool
    ship_environment: bool
    online_store: str
    online_batch_rows: int
    serving_max_connections: int
    serving_max_headers: int
    serving_max_header_bytes: int
    serving_max_url_bytes: int
    serving_max_head_bytes: int
    serving_request_timeout_s: float
    serving_log_max_bytes: int
    serving_log_backups: int
    inference_log_max_bytes: int
    inference_log_max_age_s: float
    inference_log_max_record_bytes: int
    sources: dict[str, str] = field(default_factory=dict, compare=False, repr=False)

    def source(self, name: str) -> str:
        return self.sources.get(name, "default")

    def __repr__(self) -> str:
        """The dataclass repr without credentials: none in the root URI (user:password@, secret options), and
        the values of Spark settings whose names say they are secret hidden."""
        shown = {f.name: getattr(self, f.name) for f in fields(self) if f.repr}
        shown["root"] = redact_uri(self.root)
        shown["online_store"] = redact_uri(self.online_store)
        shown["spark_conf"] = redact_conf(self.spark_conf)
        return f"Settings({', '.join(f'{name}={value!r}' for name, value in shown.items())})"


def _default_text(name: str) -> str:
    """A setting's default as the settings page writes it.

    >>> _default_text("heartbeat_s"), _default_text("port_range"), _default_text("collective_shm")
    ('10', 'empty', 'true')
    """
    spec = _FIELDS[name]
    if spec.shown_default is not None:
        return spec.shown_default
    value = spec.default()
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value) if value not in (None, "", {}) else "empty"


def describe() -> list[tuple[str, str, str, str]]:
    """Every setting as (name, environment variable, default, what it does): the one table that
    `hopsml settings` prints and the docs' settings page is built from, so neither can drift."""
    return [(name, ENV_PREFIX + name.upper(), _default_text(name), spec.help) for name, spec in _FIELDS.items()]


def settings_markdown() -> str:
    """The settings table in Markdown, for the docs."""
    rows = ["| setting | environment variable | default | what it does |", "|---|---|---|---|"]
    rows += [f"| `{name}` | `{env}` | `{default}` | {text.replace('<', '&lt;').replace('|', '&#124;')} |"
             for name, env, default, text in describe()]
    return "\n".join(rows)


def _shown(name: str, raw: object) -> str:
    """A setting's raw value as an error message may show it: without credentials."""
    if name == "spark_conf":
        return repr(redact_conf(raw)) if isinstance(raw, Mapping) else "<not shown: it may hold secrets>"
    return repr(redact_uri(raw)) if isinstance(raw, str) else repr(raw)


def _conf_file(environ: Mapping[str, str]) -> Path | None:
    if CONF_ENV in environ:
        path = Path(environ[CONF_ENV]).expanduser()
        if not path.is_file():
            raise SettingsError(f"{CONF_ENV}={environ[CONF_ENV]!r} does not name a file; "
                                "point it at a hopsml.toml or unset it")
        return path
    return DEFAULT_CONF_FILE if DEFAULT_CONF_FILE.is_file() else None


def _read_conf_file(path: Path) -> dict[str, Any]:
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise SettingsError(f"cannot read settings file {path}: {exc}") from exc
    values = dict(data)
    if "spark" in values:  # the [spark] table is the spark_conf setting
        values["spark_conf"] = values.pop("spark")
    unknown = sorted(set(values) - set(_FIELDS))
    if unknown:
        raise SettingsError(f"unknown setting(s) {', '.join(unknown)} in {path}; "
                            f"known: {', '.join(sorted(_FIELDS))} and a [spark] table")
    return values


def _resolve(name: str, override: object, environ: Mapping[str, str], from_file: Mapping[str, Any],
             conf_path: Path | None) -> tuple[Any, str]:
    """One setting's value and where it came from."""
    spec, env_name = _FIELDS[name], ENV_PREFIX + name.upper()
    if override is not None:
        raw, source = override, "argument"
    elif env_name in environ:
        raw, source = environ[env_name], f"environment variable {env_name}"
    elif name in from_file:
        raw, source = from_file[name], f"settings file {conf_path}"
    else:
        raw, source = spec.default(), "default"
    try:
        return spec.parse(raw), source
    except (ValueError, TypeError) as exc:
        raise SettingsError(f"setting {name}={_shown(name, raw)} (from {source}) is invalid: {exc}. "
                            f"It is the {spec.help}.") from exc


@dataclass(frozen=True)
class RunSettings(_RunFields):
    """What a run reads from the settings while it runs, resolved once on the driver per verb and carried
    to every rank and trial (in the TaskSpec): an executor never reads its own environment or conf file,
    so the driver's values (an os.environ change in the notebook included) reach every rank, and nothing
    changes mid-run. Holds no credentials (no root, no Spark settings), so it may travel and be shown."""

    @classmethod
    def of(cls, settings: Settings) -> RunSettings:
        """The run's snapshot of resolved `settings`."""
        import getpass

        names = {f.name for f in fields(_RunFields)} - {"user"}
        return cls(**{name: getattr(settings, name) for name in names}, user=settings.user or getpass.getuser())

    @classmethod
    def resolve(cls, environ: Mapping[str, str] | None = None, **overrides: object) -> RunSettings:
        """Resolve every setting now (argument > HOPSML_* > hopsml.toml > default) and take the snapshot."""
        return cls.of(load(environ, **overrides))


def default(name: str) -> Any:
    """A setting's default: the one place defaults are written is the settings table above."""
    return _FIELDS[name].default()


def value(name: str, override: object = None, environ: Mapping[str, str] | None = None) -> Any:
    """One setting alone (e.g. inside a task), so a bad value of another setting cannot fail it."""
    if name not in _FIELDS:
        raise SettingsError(f"unknown setting {name}; known: {', '.join(sorted(_FIELDS))}")
    environ = os.environ if environ is None else environ
    conf_path = _conf_file(environ)
    return _resolve(name, override, environ, _read_conf_file(conf_path) if conf_path else {}, conf_path)[0]


def load(environ: Mapping[str, str] | None = None, **overrides: object) -> Settings:
    """Resolve every setting; keyword arguments that are None fall through to the next source."""
    environ = os.environ if environ is None else environ
    unknown = sorted(set(overrides) - set(_FIELDS))
    if unknown:
        raise SettingsError(f"unknown setting(s) {', '.join(unknown)}; known: {', '.join(sorted(_FIELDS))}")
    conf_path = _conf_file(environ)
    from_file = _read_conf_file(conf_path) if conf_path else {}

    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for name in _FIELDS:
        values[name], sources[name] = _resolve(name, overrides.get(name), environ, from_file, conf_path)
    if "spark_conf" in from_file and sources["spark_conf"] != f"settings file {conf_path}":
        # Spark settings merge: file values first, env/argument values on top.
        values["spark_conf"] = {**_parse_spark_conf(from_file["spark_conf"]), **values["spark_conf"]}
    if sources["log_dir"] == "default":   # the logs stay with a local root (a root per test keeps its own)
        local = _local_root(values["root"])
        if local is not None:
            values["log_dir"] = os.path.join(local, "logs")
    return Settings(**values, sources=sources)


def _local_root(root: str) -> str | None:
    """The folder of a local root (a path or file://), None for a remote one."""
    if root.startswith("file://"):
        return root[len("file://"):]
    return None if "://" in root else os.path.expanduser(root)
