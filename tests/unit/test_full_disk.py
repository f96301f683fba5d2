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
    "$PYTHON" - <<'PY'
    import os
    import pandas as pd
    from hopsml import config
    from hopsml.errors import FeatureStoreError
    from hopsml.featurestore.store import FeatureStore
    os.environ.update(HOPSML_ROOT=os.environ["DISK"] + "/root", HOPSML_PROJECT="p")
    os.remove(os.environ["DISK"] + "/filler")
    fs = FeatureStore(config.load())
    group = fs.create_feature_group("g", primary_key=["id"])
    group.insert(pd.DataFrame({"id": [1, 2], "x": ["a", "b"]}))
    with open(os.environ["DISK"] + "/filler", "wb") as filler:   # the disk is full again
        try:
            filler.write(b"0" * 2_000_000)
        except OSError:
            pass
    try:
        group.insert(pd.DataFrame({"id": range(3, 30003), "x": [os.urandom(16).hex() for _ in range(30000)]}))
    except FeatureStoreError as exc:
        print("FEATURESTORE:", exc)
    os.remove(os.environ["DISK"] + "/filler")
    print("ROWS:", sorted(fs.get_feature_group("g").read()["id"]))
    PY
    head -c 2000000 /dev/zero > "$DISK/filler" || true
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
    store_line = next((text for text in done.stdout.splitlines() if text.startswith("FEATURESTORE:")), None)
    assert store_line is not None, done.stdout + done.stderr       # an insert onto a full disk: one sentence
    assert "feature group 'g_1': no space left on the disk of" in store_line and "the table is unchanged" in store_line
    assert "ROWS: [1, 2]" in done.stdout                            # the table as it was
    cli = done.stdout.split("ROWS: [1, 2]", 1)[1].strip().splitlines()   # the CLI's output: one line, exit 1
    assert cli[-1] == "EXIT: 1" and len(cli) == 2, cli
    assert cli[0].startswith("hopsml: error: no space left on the disk of ") and "to write job.json" in cli[0]
