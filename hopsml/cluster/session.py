"""The SparkSession hopsml runs on: the active one (notebook, spark-submit), an embedded local one, or
one on the cluster master the settings name.

Starting the embedded default needs care that the builder alone cannot give: the workers must run
this very Python (PYSPARK_PYTHON is read when the JVM starts, not from the builder's conf), the
console must stay quiet, and Spark's own logs go to a file instead of the user's screen. None of that
is done for a cluster master: its executors run on other hosts, with their own Python and Spark conf.

Two lines that every start printed and no user can act on are dropped, and only they: the JVM's
"WARNING: Using incubator modules: jdk.incubator.vector" (hopsml starts the JVM with its stderr on a
pipe and forwards every other byte to the process's stderr), and PySpark's FutureWarning about pandas
3 (raised while the session starts, and on the workers' first pandas conversion).

Whatever the session, a project root on a local folder is refused with a cluster master unless it is
marked shared (setting shared_root): each executor would write its part of a run to its own disk. And on a
cluster master whose Spark channels are neither authenticated nor encrypted, hopsml warns once per
application: its own connections are authenticated, but the run's secret reaches the executors through Spark.
"""

from __future__ import annotations

import atexit
import functools
import importlib.resources
import logging
import os
import shlex
import sys
import threading
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hopsml import config
from hopsml.cluster import private_conf, shipping
from hopsml.cluster.handle import SparkHandle
from hopsml.errors import SettingsError
from hopsml.fs import Storage
from hopsml.redact import is_secret, redact_bytes, redact_uri, secret_parts

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)
_lock = threading.Lock()
_shipped: shipping.PackedEnvironment | None = None  # what the session hopsml started gave its executors

_QUIET_DEFAULTS = {
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    # Barrier stages without enough slots fail in seconds instead of retrying for ~10 minutes.
    "spark.scheduler.barrier.maxConcurrentTasksCheck.interval": "1s",
    "spark.scheduler.barrier.maxConcurrentTasksCheck.maxFailures": "3",
    # A notebook's driver lives for days: Spark keeps 1,000 finished jobs, stages and SQL executions for its UI
    # and 100 classes of generated code, which grow the heap by hundreds of MiB that look like a leak. The UI
    # still shows the last ones; tests/spark/test_data_tables_memory.py holds the heap flat with these.
    "spark.ui.retainedJobs": "50",
    "spark.ui.retainedStages": "50",
    "spark.ui.retainedTasks": "10000",
    "spark.sql.ui.retainedExecutions": "20",
    "spark.sql.codegen.cache.maxEntries": "20",
}
# On a cluster the session starts before its executors have registered; searches and barrier stages size
# themselves by the slots there are when they start, so wait (Spark's 30 s at most) for all that were asked for.
_CLUSTER_DEFAULTS = {"spark.scheduler.minRegisteredResourcesRatio": "1.0"}


# Printed by every JVM that Spark 4 starts (its launcher adds --add-modules=jdk.incubator.vector).
JVM_INCUBATOR_WARNING = b"WARNING: Using incubator modules: jdk.incubator.vector"
# PySpark's FutureWarning under pandas 3: the start of its message (a warnings filter matches the start).
PANDAS_3_WARNING = "PySpark does not yet fully support pandas"


def conf_dir() -> str:
    """The folder with hopsml's spark-defaults.conf and log4j2.properties (shipped in the package)."""
    try:
        return str(importlib.resources.files("hopsml.conf"))
    except ModuleNotFoundError:  # imported from a source checkout: conf/ lies beside the package
        return str(Path(__file__).resolve().parents[2] / "conf")


def is_local_master(master: str) -> bool:
    """True for masters whose executors share the driver's host and disk (local, local[N], local-cluster[...])."""
    return master == "local" or master.startswith(("local[", "local-cluster["))


def check_root(settings: config.Settings, master: str) -> None:
    """Refuse a local-folder root with a cluster master before any Spark job: each executor would
    write its logs, checkpoints and shards to its own disk, where the driver never finds them."""
    if is_local_master(master) or settings.shared_root or not Storage(settings.root).is_local:
        return
    raise SettingsError(
        f"the project root {redact_uri(settings.root)!r} (from {settings.source('root')}) is a local folder, but "
        f"Spark runs on the cluster master {master!r}: every executor would write to its own disk. Use an "
        "hdfs://namenode:8020/path or s3://bucket/path root (HOPSML_ROOT), or, when the folder is a mount every "
        "Spark host sees at the same path (NFS), mark it with shared_root = true (HOPSML_SHARED_ROOT=true)")


# Spark's own protection, each (setting that turns it on, what stays unprotected while it is off)
_SPARK_PROTECTION = (
    ("spark.authenticate", "any host can talk to the driver's and executors' RPC"),
    ("spark.network.crypto.enabled", "task closures (with the run's secret), task results, broadcast variables "
                                     "and shuffle blocks cross the network in clear text"),
    ("spark.io.encryption.enabled", "shuffle and spill files on the executors' disks are not encrypted"),
)


def _enabled(conf: Any, key: str) -> bool:
    value = conf.get(key) if isinstance(conf, Mapping) else conf.get(key, None)
    return str(value).strip().lower() == "true"


def spark_security_warning(conf: object, master: str) -> str | None:
    """The warning for a session on a cluster master whose Spark channels are unprotected, else None.

    `conf` is a SparkConf or a mapping of Spark settings. Spark 4's TLS for RPC (spark.ssl.rpc.enabled) counts
    as network encryption.
    """
    if is_local_master(master):
        return None
    off = [(key, harm) for key, harm in _SPARK_PROTECTION if not _enabled(conf, key)
           and not (key == "spark.network.crypto.enabled" and _enabled(conf, "spark.ssl.rpc.enabled"))]
    if not off:
        return None
    return (f"Spark's own channels are not protected on cluster master {master!r} "
            f"({', '.join(f'{key} is off' for key, _ in off)}): {'; '.join(harm for _, harm in off)}. hopsml's "
            "connections between ranks and to the driver are authenticated, but the run's secret reaches the "
            "executors inside Spark's task closures, so anyone who can read Spark's traffic can forge them too. "
            f"Set {', '.join(f'{key}=true' for key, _ in off)} (spark-submit --conf, spark-defaults.conf, or the "
            "[spark] table of hopsml.toml; spark.authenticate also needs spark.authenticate.secret outside YARN "
            "and Kubernetes)")


def check_spark_security(spark: object) -> None:
    """Warn (once per Spark application) when an experiment or data job starts on an unprotected cluster
    (`spark`: a session, a SparkContext or a SparkHandle)."""
    handle = SparkHandle.of(spark)
    if is_local_master(handle.master):   # before reading the conf: every local run would pay its py4j calls
        return
    message = spark_security_warning(handle.conf(), handle.master)
    if message is not None:
        _warn_once(handle.app_id, message)


@functools.cache
def _warn_once(application_id: str, message: str) -> None:
    log.warning("%s", message)


def check_session(settings: config.Settings, spark: SparkSession) -> None:
    """The checks every job makes on the session it runs on: the root (`check_root`) and Spark's own
    protection (`check_spark_security`)."""
    handle = SparkHandle.of(spark)
    check_root(settings, handle.cluster)
    check_spark_security(handle)


def _prepare_environment(settings: config.Settings, master: str | None = None) -> None:
    """Environment the JVM and its Python workers must see before the JVM starts (`master`: the settings').

    The executors' Python, Spark conf folder and worker daemon are set only for a local master: a
    cluster's executors run elsewhere, with their own Python (spark.pyspark.python) and conf.
    """
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    master = master or settings.master
    if not is_local_master(master):
        return
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    if master.startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("SPARK_CONF_DIR", conf_dir())
    # Workers: petastorm 0.13 calls pyarrow APIs deprecated since pyarrow 2, and PySpark warns about
    # pandas 3 on a worker's first pandas conversion; neither says anything a user can act on, and every
    # worker would print them.
    os.environ.setdefault("PYTHONWARNINGS", f"ignore::FutureWarning:petastorm.fs_utils,"
                                            f"ignore:{PANDAS_3_WARNING}:FutureWarning")
    log_dir = os.path.abspath(os.path.expanduser(settings.log_dir))
    os.makedirs(log_dir, exist_ok=True)
    os.environ.setdefault("HOPSML_LOG_DIR", log_dir)
    os.environ.setdefault("HOPSML_LOG_TAG", f"driver-{os.getpid()}")


JAVA_HINT = ("Spark needs Java 17 or newer. Install it (Debian/Ubuntu: sudo apt-get install openjdk-17-jre-headless; "
             "Fedora: sudo dnf install java-17-openjdk-headless; macOS: brew install openjdk@17; conda: conda install "
             "-c conda-forge openjdk=17) and put its bin/ on PATH or set JAVA_HOME to its folder")


def shipped() -> shipping.PackedEnvironment | None:
    """The environment the session hopsml started gave its executors, if it shipped one."""
    return _shipped


def ship_environment(settings: config.Settings, conf: dict[str, str]) -> dict[str, str]:
    """On a cluster master: the Spark settings that give every executor this environment, packed into the
    project once (`shipping`); none when the setting is off or the user chose the executors' Python."""
    chosen = {"spark.archives", "spark.pyspark.python"} & set(conf) or "PYSPARK_PYTHON" in os.environ
    if not settings.ship_environment or chosen:
        return {}
    global _shipped
    packed = _shipped = shipping.pack(Storage(settings.root), settings.project)
    ship = packed.spark_conf()
    # a session started from Python gives its executors PYSPARK_PYTHON, not spark.pyspark.python
    os.environ["PYSPARK_PYTHON"] = ship["spark.pyspark.python"]
    log.info("executors run the environment %s (%s)", packed.fingerprint, packed.uri)
    return ship


def check_java() -> None:
    """Fail with what to install when no Java can start the embedded Spark (instead of Py4J's traceback)."""
    import shutil

    java_home = os.environ.get("JAVA_HOME")
    if java_home:
        java = os.path.join(java_home, "bin", "java")
        if not os.access(java, os.X_OK):
            raise SettingsError(f"JAVA_HOME={java_home!r} holds no bin/java. {JAVA_HINT}")
        return
    if shutil.which("java") is None:
        raise SettingsError(f"no Java found: 'java' is not on PATH and JAVA_HOME is not set. {JAVA_HINT}")


def active() -> SparkSession | None:
    """The running SparkSession, if any; never starts one."""
    try:
        from pyspark.sql import SparkSession
    except ImportError:
        return None
    return SparkSession.getActiveSession()


def quiet_pandas_warning() -> None:
    """Ignore PySpark's FutureWarning about pandas 3 in this process (and only that warning).

    It is raised when pyspark.testing.utils is first imported, which a py4j converter does while the
    SparkContext starts, and again on every toPandas; it says nothing a user can act on.
    """
    warnings.filterwarnings("ignore", message=PANDAS_3_WARNING, category=FutureWarning)


class _StderrFilter:
    """Forwards a child's stderr to this process's descriptor 2, minus the lines in `dropped`.

    Bytes are forwarded as they come (a progress line ending in a carriage return is not held back);
    only a partial line that could still become a dropped one waits for its end.
    """

    def __init__(self, dropped: tuple[bytes, ...], out_fd: int = 2, known: tuple[str, ...] = ()) -> None:
        self._dropped, self._out, self._held, self._known = dropped, out_fd, b"", known

    def feed(self, data: bytes) -> None:
        text = self._held + data
        lines = text.split(b"\n")
        self._held = lines.pop()
        kept = [line + b"\n" for line in lines if line.rstrip(b"\r") not in self._dropped]
        if self._held and not any(line.startswith(self._held) for line in self._dropped):
            kept.append(self._held)
            self._held = b""
        if kept:
            self._write(b"".join(kept))

    def close(self) -> None:
        if self._held and self._held.rstrip(b"\r") not in self._dropped:
            self._write(self._held)
        self._held = b""

    def _write(self, data: bytes) -> None:
        data = redact_bytes(data, self._known)   # Spark prints some settings (a repository's URL) as it starts
        try:
            while data:
                data = data[os.write(self._out, data):]
        except OSError:  # our stderr is gone (a closed terminal): nothing left to tell
            pass

    def pump(self, fd: int) -> None:
        """Forward everything read from `fd` until its writers are gone (the JVM exited)."""
        try:
            while chunk := os.read(fd, 65536):
                self.feed(chunk)
        except OSError as error:
            log.debug("stopped reading Spark's stderr: %s", error)
        finally:
            self.close()
            os.close(fd)


def _start_context(conf: Mapping[str, str]) -> None:
    """Start Spark's JVM as PySpark would, but with its stderr on a pipe that hopsml filters (see the module's
    docstring), through PySpark's own parameters (launch_gateway's `popen_kwargs`, SparkContext's `gateway`);
    the builder's getOrCreate then builds the session on this context. A process whose JVM is up already (an
    earlier session, stopped) starts no other."""
    from pyspark import SparkConf, SparkContext
    from pyspark.java_gateway import launch_gateway

    if SparkContext._gateway is not None:  # an earlier start in this process: its JVM serves again
        return
    spark_conf, launch_conf = SparkConf(), SparkConf()
    secret = {}
    for key, value in conf.items():
        spark_conf.set(key, value)   # the context gets every setting over the gateway
        if is_secret(key, value):
            secret[key] = value
        else:
            launch_conf.set(key, value)
    # launch_gateway puts its settings on the JVM's command line, which every local user sees: the secret ones
    # (those that act at the JVM's start too: Java options, package repositories) go in a private properties
    # file instead (private_conf.py)
    given = os.environ.get("PYSPARK_SUBMIT_ARGS")
    if secret and "--properties-file" not in (given or ""):
        spark_home_conf = os.path.join(os.environ.get("SPARK_HOME", ""), "conf")
        folder = private_conf.write(secret, os.path.join(os.environ.get("SPARK_CONF_DIR") or spark_home_conf,
                                                         "spark-defaults.conf"),
                                    local_master=str(conf.get("spark.master", "")).startswith("local"))
        atexit.register(private_conf.remove, folder)   # a local-cluster executor may start from it later
        properties = os.path.join(folder, private_conf.PROPERTIES)
        os.environ["PYSPARK_SUBMIT_ARGS"] = f"--properties-file {shlex.quote(properties)} {given or 'pyspark-shell'}"
    elif secret:
        log.warning("PYSPARK_SUBMIT_ARGS names a properties file: the secret settings %s reach Spark over its "
                    "gateway only, after the JVM started", ", ".join(sorted(secret)))
    read_fd, write_fd = os.pipe()
    # Read from the first byte on: a JVM that fails to start says why on stderr, and a full pipe
    # would stall a JVM that writes much before its gateway is up.
    known = tuple(part for key, value in secret.items() for part in secret_parts(key, value))
    threading.Thread(target=_StderrFilter((JVM_INCUBATOR_WARNING,), known=known).pump, args=(read_fd,),
                     name="hopsml-spark-stderr", daemon=True).start()
    try:
        gateway = launch_gateway(launch_conf, popen_kwargs={"stderr": write_fd})
    finally:
        os.close(write_fd)  # the JVM holds its own copy; the reader ends when the JVM does
        if given is None:
            os.environ.pop("PYSPARK_SUBMIT_ARGS", None)
        else:
            os.environ["PYSPARK_SUBMIT_ARGS"] = given
    SparkContext(conf=spark_conf, gateway=gateway)


def get_or_create(settings: config.Settings | None = None, app_name: str = "hopsml") -> SparkSession:
    """Reuse the active session, else start the embedded default described by the settings."""
    from pyspark.sql import SparkSession

    quiet_pandas_warning()
    with _lock:
        session = SparkSession.getActiveSession()
        settings = settings or config.load()
        if session is not None:
            check_session(settings, session)
            _release_barrier_timer_at_exit()
            return session
        if settings.remote:
            return _connect(settings, app_name)
        if launched_by_spark_submit():
            # The JVM is up with spark-submit's master and conf: build on them, change nothing else.
            builder = SparkSession.builder.appName(app_name)
            conf = settings.spark_conf
        else:
            check_root(settings, settings.master)  # before a JVM starts for nothing
            check_java()
            _prepare_environment(settings)
            builder = SparkSession.builder.master(settings.master).appName(app_name)
            conf = {**_QUIET_DEFAULTS, **settings.spark_conf}
            if not is_local_master(settings.master):
                conf = {k: v for k, v in conf.items() if k != "spark.python.daemon.module"}
                conf = {**_CLUSTER_DEFAULTS, **ship_environment(settings, conf), **conf}
        for key, value in conf.items():
            builder = builder.config(key, value)
        try:
            if not launched_by_spark_submit():
                _start_context({"spark.master": settings.master, "spark.app.name": app_name, **conf})
            session = builder.getOrCreate()
        except Exception as exc:
            if "JAVA_GATEWAY_EXITED" in str(exc) or "Java gateway process exited" in str(exc):
                raise SettingsError(f"Spark's JVM did not start ({exc}). {JAVA_HINT}") from exc
            raise
        check_session(settings, session)  # spark-submit's master, known only now
        _release_barrier_timer_at_exit()
        log.info("started Spark %s (%s), Spark logs in %s", session.version, SparkHandle(session).master,
                 os.environ.get("HOPSML_LOG_DIR", "Spark's log4j configuration"))
        return session


def _connect(settings: config.Settings, app_name: str) -> SparkSession:
    """A Spark Connect session on the settings' server (`remote`): sc://host:port, or local[N] for one that
    PySpark starts in this process (a classic JVM serving Connect, given the embedded default's environment)."""
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.remote(settings.remote).appName(app_name)
    if settings.remote.startswith("local"):
        # PySpark's own server, with its own Spark settings: the spark_conf setting is not given to it (the
        # client would set each again at run time, and warn about every static one)
        check_java()
        _prepare_environment(settings, settings.remote)
    try:
        session = builder.getOrCreate()
    except ImportError as exc:
        raise SettingsError(f"Spark Connect ({settings.remote}, from {settings.source('remote')}) needs its "
                            f"client's packages: pip install 'pyspark[connect]' ({exc})") from exc
    check_session(settings, session)
    log.info("connected to Spark %s at %s (%s)", session.version, redact_uri(settings.remote),
             SparkHandle(session).master)
    return session


def launched_by_spark_submit() -> bool:
    """True in a Python program that spark-submit (or pyspark's shell) started: its JVM already runs."""
    return "PYSPARK_GATEWAY_PORT" in os.environ


@functools.cache
def _release_barrier_timer_at_exit() -> None:
    """Let a spark-submit JVM exit once this Python program ends (registered once per process).

    Spark 3.5 keeps a non-daemon `java.util.Timer` ("Barrier task timer for barrier() calls.") in
    the BarrierTaskContext object; in local mode the executors live in the driver's JVM, so after
    the first barrier stage spark-submit waits for that thread forever (SPARK-49479). Cancelling it
    when the interpreter exits is safe: no barrier call can come after that.
    """
    atexit.register(cancel_barrier_timer)


def cancel_barrier_timer() -> bool:
    """Stop the lingering barrier timer thread of a local-mode JVM; True when one was stopped."""
    from pyspark import SparkContext

    gateway = SparkContext._gateway
    if gateway is None:
        return False
    try:
        jvm = gateway.jvm
        module_class = jvm.java.lang.Class.forName("org.apache.spark.BarrierTaskContext$")
        module = module_class.getField("MODULE$").get(None)
        for field in module_class.getDeclaredFields():
            if field.getType().getName() == "java.util.Timer":
                field.setAccessible(True)
                field.get(module).cancel()
                return True
    except Exception as error:  # noqa: BLE001 - a JVM already gone or a Spark without this field
        log.debug("could not stop Spark's barrier timer: %s", error)
    return False
