"""A real MariaDB server for tests, in a process of its own with a data folder of its own (Debian's
mariadb-server, which .ci/run installs; tests skip, saying so, where it is missing)."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

USER, PASSWORD, DATABASE = "hopsml", "s3cret-Online", "online"


@contextlib.contextmanager
def mariadb_server(folder: Path) -> Iterator[str]:
    """Start a server; yields its mysql:// URL (user, password, database made for the test)."""
    pymysql = pytest.importorskip("pymysql")
    server = shutil.which("mariadbd") or ("/usr/sbin/mariadbd" if os.path.exists("/usr/sbin/mariadbd") else None)
    installer = shutil.which("mariadb-install-db")
    if server is None or installer is None:
        pytest.skip("MariaDB is not installed (apt-get install mariadb-server)")
    as_root = ["--user=root"] if os.geteuid() == 0 else []
    data = folder / "data"
    subprocess.run([installer, "--no-defaults", f"--datadir={data}", "--auth-root-authentication-method=normal",
                    "--skip-test-db", *as_root], check=True, capture_output=True, timeout=180)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    log = open(folder / "server.log", "wb")
    process = subprocess.Popen([server, "--no-defaults", f"--datadir={data}", f"--socket={folder / 'sock'}",
                                f"--port={port}", "--bind-address=127.0.0.1", "--skip-name-resolve",
                                f"--pid-file={folder / 'pid'}", "--innodb-buffer-pool-size=32M", *as_root],
                               stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                root = pymysql.connect(host="127.0.0.1", port=port, user="root", password="", connect_timeout=2)
                break
            except pymysql.err.OperationalError:
                if process.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"MariaDB did not start: {(folder / 'server.log').read_text(errors='replace')[-2000:]}")
                time.sleep(0.3)
        with root.cursor() as cursor:
            cursor.execute(f"CREATE DATABASE {DATABASE}")
            cursor.execute(f"CREATE USER '{USER}'@'%' IDENTIFIED BY '{PASSWORD}'")
            cursor.execute(f"GRANT ALL ON {DATABASE}.* TO '{USER}'@'%'")
        root.commit()
        root.close()
        yield f"mysql://{USER}:{PASSWORD}@127.0.0.1:{port}/{DATABASE}"
    finally:
        process.terminate()
        try:
            process.wait(60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)
        log.close()
