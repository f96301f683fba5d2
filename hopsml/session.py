"""The SparkSession hopsml runs on: the active one (notebook, spark-submit) or an embedded local one.

Starting the embedded default needs care that the builder alone cannot give: the workers must run
this very Python (PYSPARK_PYTHON is read when the JVM starts, not from the builder's conf), the
console must stay quiet, and Spark's own logs go to a file instead of the user's screen.
"""

from __future__ import annotations

import atexit
import functools
import importlib.resources
import logging
import os
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from hopsml import config

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)
_lock = threading.Lock()

_QUIET_DEFAULTS = {
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    # Barrier stages without enough slots fail in seconds instead of retrying for ~10 minutes.
    "spark.scheduler.barrier.maxConcurrentTasksCheck.interval": "1s",
    "spark.scheduler.barrier.maxConcurrentTasksCheck.maxFailures": "3",
    # PySpark's daemon, minus a zip-directory re-read that costs every task ~0.1 s on Python 3.11.
    "spark.python.daemon.module": "hopsml.worker_daemon",
}


def conf_dir() -> str:
    """The folder with hopsml's spark-defaults.conf and log4j2.properties (shipped in the package)."""
    try:
        return str(importlib.resources.files("hopsml.conf"))
    except ModuleNotFoundError:  # imported from a source checkout: conf/ lies beside the package
        return str(Path(__file__).resolve().parents[1] / "conf")


def _prepare_environment(settings: config.Settings) -> None:
    """Environment the JVM and its Python workers must see before the JVM starts."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    if settings.master.startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("SPARK_CONF_DIR", conf_dir())
    # Workers: petastorm 0.13 calls pyarrow APIs deprecated since pyarrow 2; the warning says nothing
    # a user can act on, and every worker would print it.
    os.environ.setdefault("PYTHONWARNINGS", "ignore::FutureWarning:petastorm.fs_utils")
    log_dir = os.path.abspath(os.path.expanduser(settings.log_dir))
    os.makedirs(log_dir, exist_ok=True)
    os.environ.setdefault("HOPSML_LOG_DIR", log_dir)
    os.environ.setdefault("HOPSML_LOG_TAG", f"driver-{os.getpid()}")


def active() -> "SparkSession | None":
    """The running SparkSession, if any; never starts one."""
    try:
        from pyspark.sql import SparkSession
    except ImportError:
        return None
    return SparkSession.getActiveSession()


def get_or_create(settings: config.Settings | None = None, app_name: str = "hopsml") -> "SparkSession":
    """Reuse the active session, else start the embedded default described by the settings."""
    from pyspark.sql import SparkSession

    with _lock:
        session = SparkSession.getActiveSession()
        if session is not None:
            _release_barrier_timer_at_exit()
            return session
        settings = settings or config.load()
        if launched_by_spark_submit():
            # The JVM is up with spark-submit's master and conf: build on them, change nothing else.
            builder = SparkSession.builder.appName(app_name)
            conf = settings.spark_conf
        else:
            _prepare_environment(settings)
            builder = SparkSession.builder.master(settings.master).appName(app_name)
            conf = {**_QUIET_DEFAULTS, **settings.spark_conf}
        for key, value in conf.items():
            builder = builder.config(key, value)
        session = builder.getOrCreate()
        _release_barrier_timer_at_exit()
        log.info("started Spark %s (%s), Spark logs in %s", session.version, session.sparkContext.master,
                 os.environ.get("HOPSML_LOG_DIR", "Spark's log4j configuration"))
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
