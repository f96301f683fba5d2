"""How long `hopsml env pack` takes and how big the archive is: a first pack, a second one (found, no work),
and venv-pack on the same environment side by side when it is installed.

    python -m venv /tmp/env && /tmp/env/bin/pip install . venv-pack     # the default environment
    python bench/env_pack.py --prefix /tmp/env                           # pack it (this Python's version)

Both leave pyspark out (each executor's Spark brings its own); venv-pack runs at its default gzip level 4,
hopsml's packer at ISA-L's level 1, and the table shows what each costs in time and bytes.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hopsml import shipping
from hopsml.fs import Storage


def _venv_pack(prefix: str, output: str) -> float | None:
    try:
        import venv_pack
    except ImportError:
        return None
    site = os.path.relpath(shipping._site_packages(prefix), prefix)
    started = time.perf_counter()
    venv_pack.pack(prefix=prefix, output=output, filters=[("exclude", f"{site}/pyspark/*"),
                                                          ("exclude", f"{site}/pyspark-*.dist-info/*")])
    return time.perf_counter() - started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prefix", default=sys.prefix, help="the venv to pack (default: this one)")
    args = parser.parse_args(argv)
    folder = tempfile.mkdtemp(prefix="hopsml-bench-pack-")
    try:
        storage = Storage(os.path.join(folder, "root"))
        first = shipping.pack(storage, "bench", prefix=args.prefix)
        second = shipping.pack(storage, "bench", prefix=args.prefix)
        rows = [("hopsml env pack, first", first.seconds, first.size),
                ("hopsml env pack, second (found)", second.seconds, second.size)]
        output = os.path.join(folder, "venv-pack.tar.gz")
        seconds = _venv_pack(args.prefix, output)
        if seconds is not None:
            rows.append(("venv-pack (gzip level 4)", seconds, os.path.getsize(output)))
        print(f"environment {args.prefix}, fingerprint {first.fingerprint}")
        print(f"{'':34} {'seconds':>9} {'MiB':>9}")
        for name, took, size in rows:
            print(f"{name:34} {took:9.2f} {size / 2**20:9.1f}")
        if seconds is not None:
            print(f"venv-pack / hopsml: {seconds / first.seconds:.2f}x the time, "
                  f"{os.path.getsize(output) / first.size:.2f}x the size")
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
