"""The calls of hops' `util` module that mean something outside Hopsworks: cluster size and job name.

They read the running SparkSession when there is one (or the one given), else the settings a
session hopsml starts would get; they never start Spark themselves.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from typing import Any

from hopsml import config
from hopsml.cluster import session
from hopsml.cluster.handle import SparkHandle
from hopsml.errors import ClusterError, SettingsError
from hopsml.search import space

_LOCAL = re.compile(r"^local(?:\[(?P<threads>\*|\d+)(?:,\s*\d+)?\])?$")
_LOCAL_CLUSTER = re.compile(r"^local-cluster\[\s*(?P<workers>\d+)\s*,")


def _conf(spark: object) -> tuple[dict[str, str], str, SparkHandle | None]:
    """(Spark settings, master, handle or None) from `spark` (a SparkSession, Spark Connect session or
    SparkContext) or the running session, else from hopsml's settings."""
    spark = spark if spark is not None else session.active()
    if spark is not None:
        handle = SparkHandle.of(spark)
        return handle.conf(), handle.master, handle
    settings = config.load()
    return dict(settings.spark_conf), settings.master, None


def _int_setting(conf: Mapping[str, str], key: str) -> int | None:
    value = conf.get(key)
    if value is None or str(value).strip().lower() in ("", "infinity"):
        return None
    try:
        return int(str(value).strip())
    except ValueError:
        raise SettingsError(f"Spark setting {key}={value!r} is not a whole number; fix it in the session's "
                            "Spark settings (HOPSML_SPARK_CONF or the [spark] table of conf/hopsml.toml)") from None


def num_executors(spark: object = None) -> int:
    """How many executors the application may use, i.e. how many workers a distributed run can have.

    As hops: spark.dynamicAllocation.maxExecutors when dynamic allocation is on; else
    spark.executor.instances; in local mode the task slots (local[4] -> 4, local-cluster[2,...] -> 2);
    else the executors registered with the running session. `spark` may be a SparkSession or a
    SparkContext (older hops took one); by default the active session, else hopsml's settings.
    """
    conf, master, handle = _conf(spark)
    if conf.get("spark.dynamicAllocation.enabled", "false").strip().lower() == "true":
        most = _int_setting(conf, "spark.dynamicAllocation.maxExecutors")
        if most is not None:
            return most
    instances = _int_setting(conf, "spark.executor.instances")
    if instances is not None:
        return instances
    if match := _LOCAL_CLUSTER.match(master):
        return int(match["workers"])
    if match := _LOCAL.match(master):
        if handle is not None:
            return handle.default_parallelism
        threads = match["threads"]
        if threads is None:
            return 1
        return (os.cpu_count() or 1) if threads == "*" else int(threads)
    registered = handle.registered_executors() if handle is not None else None
    if registered:
        return registered
    raise ClusterError(f"cannot tell how many executors the Spark master {master!r} gives: set "
                       "spark.executor.instances (or spark.dynamicAllocation.maxExecutors), or ask again "
                       "once the executors have registered (Spark Connect does not list them)")


def executors_of_application(spark: object = None) -> int:
    """hops' count of executors for a distributed TensorFlow run: `num_executors()` on a cluster; in local
    mode 1, for local[N] is one executor (the driver's JVM) whatever its task slots."""
    _, master, _ = _conf(spark)
    return 1 if _LOCAL.match(master) else num_executors(spark)


def num_param_servers(spark: object = None) -> int:
    """The parameter servers asked for with spark.tensorflow.num.ps (hops' setting), 0 when unset."""
    conf, _, _ = _conf(spark)
    return _int_setting(conf, "spark.tensorflow.num.ps") or 0


def get_job_name() -> str | None:
    """The name of the job this program runs as (HOPSWORKS_JOB_NAME, as hops read it), None in a notebook."""
    return os.environ.get("HOPSWORKS_JOB_NAME") or None


def grid_params(dict_of_lists: Mapping[str, Sequence[Any]]) -> dict[str, list[Any]]:
    """Every combination of the values, as the dict of equal-length lists `experiment.launch` runs.

    >>> grid_params({"lr": [0.001, 0.0005], "dropout": [0.45, 0.7]})
    {'lr': [0.001, 0.001, 0.0005, 0.0005], 'dropout': [0.45, 0.7, 0.45, 0.7]}
    """
    combos = space.grid(dict_of_lists)
    return {name: [combo[name] for combo in combos] for name in dict_of_lists}
