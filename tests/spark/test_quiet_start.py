"""A Spark start through hopsml prints neither the JVM's incubator-module warning nor PySpark's pandas-3
FutureWarning, in the driver or its workers, and forwards everything else the JVM writes to stderr.

The driver is a subprocess with its own Spark, which shows every warning as a notebook does."""

import os
import subprocess
import sys
import threading

from hopsml.cluster import session
from hopsml.cluster.session import JVM_INCUBATOR_WARNING, PANDAS_3_WARNING, _StderrFilter

DRIVER = r'''
import sys, threading, warnings
warnings.simplefilter("default")  # as a notebook: every warning shown once per place
import pandas as pd
from pyspark import SparkContext
from hopsml import config
from hopsml.cluster import session

spark = session.get_or_create(config.load(environ={}, master="local[2]", log_dir=sys.argv[1]))
print(spark.range(3).toPandas().shape)
print(spark.createDataFrame(pd.DataFrame({"a": [1, 2]})).mapInPandas(lambda it: it, "a long").count())
spark._jvm.java.lang.System.err.println("the JVM still speaks")
spark.stop()
gateway = SparkContext._gateway
gateway.proc.stdin.close()  # the JVM ends when its stdin closes; then the stderr reader ends too
gateway.proc.wait()
for thread in threading.enumerate():
    if thread.name == "hopsml-spark-stderr":
        thread.join()
'''


def test_a_spark_start_prints_neither_warning_and_forwards_the_rest(tmp_path):
    script = tmp_path / "driver.py"
    script.write_text(DRIVER)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONWARNINGS", "PYSPARK_GATEWAY_PORT")}
    done = subprocess.run([sys.executable, str(script), str(tmp_path / "logs")], env=env, cwd=tmp_path,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["(3,", "1)", "2"]
    assert "the JVM still speaks" in done.stderr
    assert JVM_INCUBATOR_WARNING.decode() not in done.stderr
    assert PANDAS_3_WARNING not in done.stderr and "FutureWarning" not in done.stderr


def _filtered(chunks):
    read_fd, write_fd = os.pipe()
    out = []
    reader = threading.Thread(target=lambda: out.append(os.fdopen(read_fd, "rb").read()))
    reader.start()
    dropper = _StderrFilter((JVM_INCUBATOR_WARNING,), out_fd=write_fd)
    for chunk in chunks:
        dropper.feed(chunk)
    dropper.close()
    os.close(write_fd)
    reader.join()
    return out[0]


def test_the_stderr_filter_drops_exactly_the_incubator_line_however_it_is_cut():
    line = JVM_INCUBATOR_WARNING + b"\n"
    text = b"before\n" + line + b"progress 50%\rprogress 100%\r" + b"WARNING: other\n" + line + b"tail"
    expected = b"before\nprogress 50%\rprogress 100%\rWARNING: other\ntail"
    assert _filtered([text]) == expected
    assert _filtered([text[i:i + 1] for i in range(len(text))]) == expected  # byte by byte
    assert _filtered([b"WARNING: Using incub"]) == b"WARNING: Using incub"  # a prefix at the end is kept


def test_the_filter_is_installed_for_the_pandas_warning_only():
    import warnings

    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        session.quiet_pandas_warning()
        warnings.warn(PANDAS_3_WARNING + " >= 3.0.0.", FutureWarning, stacklevel=1)
        warnings.warn("another future", FutureWarning, stacklevel=1)
    assert [str(w.message) for w in seen] == ["another future"]
