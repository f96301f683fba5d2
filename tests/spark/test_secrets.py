"""Secrets given to hopsml reach Spark but no command line, record or file: markers planted in every kind of secret
setting (by name, and by shape under an innocent name) are looked for in /proc/*/cmdline of the processes the run
made while its JVM is up, and in every file under the project root and the temporary folder afterwards."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

SECRETS = {
    "spark.hadoop.fs.s3a.secret.key": "MARKERs3asecret",
    "spark.executorEnv.AWS_SECRET_ACCESS_KEY": "MARKERawssecret",
    "spark.hadoop.fs.azure.sas.box.acct.blob.core.windows.net": "sv=2022-11-02&sr=c&sig=MARKERsassignature000",
    "spark.hopsml.test.jdbc": "jdbc:postgresql://db:5432/x?user=u&password=MARKERjdbcpassword",   # no secret name
    "spark.hopsml.test.header": "Bearer MARKERbearertoken",
    # the forms found in issue 57: inside Java options, in a URL's userinfo, an environment setting, token shapes
    "spark.driver.extraJavaOptions": "-Dhopsml.test.plain=1 -Djavax.net.ssl.trustStorePassword=MARKERtruststore",
    "spark.jars.repositories": "https://ci:MARKERrepopassword@repo.example.com/maven2",
    "spark.executorEnv.DB_PASS": "MARKERdbpass",
    "spark.hopsml.test.github": "ghp_MARKERgithub0123456789abcdefghijklmno",
    "spark.hopsml.test.slack": "xoxb-MARKERslack-0123456789",
    "spark.hopsml.test.stripe": "sk_live_MARKERstripe0123456789",
    "spark.hopsml.test.basic": "Basic MARKERbasicdXNlcjpwYXNz",
}

DRIVER = textwrap.dedent("""
    import json, os, sys
    sys.path.insert(0, sys.argv[1])
    from own_processes import processes_of_this_test
    from hopsml import experiment
    from hopsml.cluster import session

    def train():
        return {"metric": 1.0}

    experiment.launch(train, name="secrets")
    spark = session.get_or_create()
    lines = {}
    for pid in processes_of_this_test():
        try:
            lines[pid] = open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\\0", b" ").decode(errors="replace")
        except OSError:
            pass
    print(json.dumps({"cmdlines": lines, "jvm": len([c for c in lines.values() if "java" in c]),
                      "property": spark._jvm.System.getProperty("javax.net.ssl.trustStorePassword"),
                      "conf": {k: spark.sparkContext.getConf().get(k) for k in json.loads(sys.argv[2])}}))
""")


def test_secret_settings_reach_spark_but_no_command_line_record_or_file(tmp_path):
    root, temp = tmp_path / "root", tmp_path / "tmp"
    temp.mkdir()
    env = {**os.environ, "HOPSML_ROOT": str(root), "HOPSML_PROJECT": "secrets", "TMPDIR": str(temp),
           "HOPSML_SPARK_CONF": json.dumps({**SECRETS, "spark.hopsml.test.plain": "visible-setting"})}
    script = tmp_path / "driver.py"
    script.write_text(DRIVER)
    done = subprocess.run([sys.executable, str(script), str(Path(__file__).parents[1]), json.dumps(list(SECRETS))],
                          env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found["jvm"] >= 1                                         # the JVM was among the processes looked at
    java = "spark.driver.extraJavaOptions"                           # Spark puts its own options before the user's
    assert found["conf"][java].endswith(SECRETS[java])
    assert {**found["conf"], java: SECRETS[java]} == SECRETS         # Spark got every secret, over the gateway
    assert found["property"] == "MARKERtruststore"                   # and the driver JVM its secret Java option
    cmdlines = "\n".join(found["cmdlines"].values())
    assert "visible-setting" in cmdlines                             # the other settings still launch the JVM
    assert "MARKER" not in cmdlines
    printed = done.stdout.replace(json.dumps(found["conf"]), "").replace('"MARKERtruststore"', "")
    assert "MARKER" not in printed + done.stderr
    leaks = [str(p) for folder in (root, temp) for p in folder.rglob("*")
             if p.is_file() and b"MARKER" in p.read_bytes()]
    assert leaks == []
    record = next(root.glob("Projects/secrets/Experiments/*/experiment.json"))
    recorded = json.loads(record.read_text())["spark_conf"]
    assert recorded.get("spark.hopsml.test.plain") == "visible-setting"
    assert recorded.pop("spark.jars.repositories") == "https://repo.example.com/maven2"   # without its password
    assert recorded.pop("spark.hopsml.test.jdbc") == "jdbc:postgresql://db:5432/x?user=u"
    assert not set(SECRETS) & set(recorded)
