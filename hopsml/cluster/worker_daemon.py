"""The Python worker daemon of the Spark sessions hopsml starts: PySpark's own, minus a per-task cost.

PySpark's worker calls ``importlib.invalidate_caches()`` before every task. On Python 3.10 and
3.11 that makes every zip importer on ``sys.path`` read its archive's whole directory again
(CPython gh-103200, made lazy in 3.12), and Spark puts pyspark.zip, py4j's zip and the
spark-core jar (over 5,000 entries) on the workers' path: about 0.1 s of CPU per task on a
2-core machine, as much as decoding 40 photos. Here an archive's directory is read again only
when the archive file changed, which is all that invalidation has to catch.

It is opt-in: it replaces a method of CPython's zipimport, and on the default stack it earns nothing
(`python bench/worker_daemon.py`, PySpark 4.1, Python 3.11, 2 cores: an empty 2-task job 93.4 ms with
PySpark's daemon, 90.1 ms with this one, 1.04x, within the noise). Set ``spark.python.daemon.module`` to
``hopsml.cluster.worker_daemon`` (in ``spark_conf`` or spark-defaults.conf) to use it, where PySpark 3.5
pays the re-read on every task; the workers fork from the daemon and inherit the change.
PySpark 3.5 invalidates before every task; PySpark 4 only when a worker's ``sys.path`` grows,
which is the first task of each worker process, so there the change saves one re-read per
worker instead of one per task. The daemon itself is PySpark's own ``manager()`` on every
version (it reads the worker module from ``sys.argv`` in 3.5 and 4.x alike); on Python 3.12+
nothing is changed.
"""

from __future__ import annotations

import os
import sys
import zipimport

_eager_invalidate = zipimport.zipimporter.invalidate_caches


def _signature(path: str) -> tuple[int, int] | None:
    try:
        stat = os.stat(path)
    except OSError:
        return None
    return stat.st_mtime_ns, stat.st_size


def invalidate_if_changed(self: zipimport.zipimporter) -> None:
    """Re-read the archive's directory only when the archive changed since the last read."""
    signature = _signature(self.archive)
    if signature is not None and getattr(self, "_hopsml_signature", None) == signature:
        return
    _eager_invalidate(self)
    setattr(self, "_hopsml_signature", signature)  # noqa: B010 - an attribute zipimporter does not declare


def install() -> bool:
    """Make zip importers invalidate lazily where Python re-reads eagerly; True if it did."""
    if sys.version_info[:2] not in ((3, 10), (3, 11)):
        return False
    zipimport.zipimporter.invalidate_caches = invalidate_if_changed  # type: ignore[method-assign]
    return True


if __name__ == "__main__":
    install()
    from pyspark.daemon import manager

    manager()
