"""Secret Spark settings for a JVM about to start, kept off every command line.

spark-submit puts each `--conf k=v` on its own command line and on the JVM's, which every local user can read
(/proc/*/cmdline, ps). So the settings that are secret by hopsml's rule (hopsml.redact) go in a properties file
that only this user can read instead (`--properties-file`, with the Spark defaults it replaces copied in). Java
options are a special case: spark-submit's launcher copies `spark.driver.extraJavaOptions` word by word onto the
driver JVM's command line whatever file it came from, so the secret words of an `extraJavaOptions` setting
(`-Djavax.net.ssl.trustStorePassword=...`) go in a Java argument file beside it, and the setting names the file
(`@/.../driver.args`: the `java` launcher reads it at start). Executor options get an argument file on a local
master only (its executors start on this host); on a cluster the words travel in the properties file to the
executors' hosts, where Spark starts the executors with them.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Mapping

from hopsml.redact import JAVA_OPTIONS, split_java_options

PROPERTIES = "spark.properties"


def _escape_property(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r")


def _argfile_word(word: str) -> str:
    return '"' + word.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def _argfile_name(key: str) -> str | None:
    """The argument file a Java options setting's secret words go to; None where no file can serve."""
    if key == "spark.driver.extraJavaOptions":
        return "driver.args"
    if key == "spark.executor.extraJavaOptions":
        return "executor.args"
    return None


def write(secret: Mapping[str, str], defaults: str | None, *, local_master: bool) -> str:
    """A new private folder (mode 0700) holding `spark.properties` (the Spark defaults file `defaults`, when it
    exists, then the `secret` settings) and the argument files of secret Java options; returns the folder. The
    caller removes it (`remove`) once the JVM and, on a local master, its executors no longer need it."""
    folder = tempfile.mkdtemp(prefix="hopsml-spark-conf-")   # mode 0700
    try:
        lines = []
        for key, value in secret.items():
            name = _argfile_name(key) if JAVA_OPTIONS.search(key) else None
            if name is not None and (local_master or name == "driver.args"):
                public, hidden = split_java_options(value)
                if hidden:
                    argfile = os.path.join(folder, name)
                    _private_file(argfile, "\n".join(map(_argfile_word, hidden)) + "\n")
                    value = " ".join([*(_argfile_word(word) if any(c.isspace() for c in word) else word
                                        for word in public), "@" + argfile])
            lines.append(f"{key}={_escape_property(value)}")
        text = ""
        if defaults and os.path.isfile(defaults):
            with open(defaults, encoding="utf-8") as given:
                text = given.read() + "\n"
        _private_file(os.path.join(folder, PROPERTIES), text + "\n".join(lines) + "\n")
    except BaseException:
        remove(folder)
        raise
    return folder


def _private_file(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write(text)


def remove(folder: str | None) -> None:
    if folder:
        shutil.rmtree(folder, ignore_errors=True)
