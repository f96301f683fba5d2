"""A full disk is one sentence naming the file, its folder, the space free there and what the write needed, not
a traceback: the root is put on a 1 MiB tmpfs in a private mount namespace (root and util-linux's unshare
needed; skipped, saying so, elsewhere), filled, and written to by the library and by the CLI (`jobs create`)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap

import pytest

SCRIPT = textwrap.dedent("""
    set -e
    mount -t tmpfs -o size=1m tmpfs "$DISK"
    mkdir -p "$DISK/root/Projects/p"
    head -c 2000000 /dev/zero > "$DISK/filler" || true   # the disk is full
    "$PYTHON" - <<'PY'
    import os
    from hopsml.errors import StorageError
    from hopsml.fs import Storage
    try:
        Storage(os.environ["DISK"] + "/root").write_bytes("Projects/p/big.bin", b"x" * 200_000)
    except StorageError as exc:
        print("LIBRARY:", exc)
    PY
    echo "print('hi')" > "$APP"
    "$PYTHON" -m hopsml.cli --root "$DISK/root" --project p jobs create nightly "$APP" 2>&1 || echo "EXIT: $?"
""")


def test_a_full_disk_is_one_sentence_with_the_file_the_folder_and_the_space(tmp_path):
    if os.geteuid() != 0 or shutil.which("unshare") is None or shutil.which("mount") is None:
        pytest.skip("needs root and unshare(1) to mount a small tmpfs in a private mount namespace")
    disk = tmp_path / "disk"
    disk.mkdir()
    env = {**os.environ, "DISK": str(disk), "PYTHON": sys.executable, "APP": str(tmp_path / "app.py")}
    done = subprocess.run(["unshare", "-m", "--propagation", "private", "bash", "-c", SCRIPT], env=env,
                          capture_output=True, text=True, timeout=300)
    if "mount:" in done.stderr and "permission denied" in done.stderr.lower():
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    line = next((text for text in done.stdout.splitlines() if text.startswith("LIBRARY:")), None)
    assert line is not None, done.stdout + done.stderr
    assert f"no space left on the disk of {disk}/root/Projects/p (" in line
    assert "free there) to write big.bin; the write needed 200000 bytes" in line and "HOPSML_ROOT" in line
    cli = done.stdout.split(line, 1)[1].strip().splitlines()          # the CLI's output: one line, exit 1
    assert cli[-1] == "EXIT: 1" and len(cli) == 2, cli
    assert cli[0].startswith("hopsml: error: no space left on the disk of ") and "to write job.json" in cli[0]
