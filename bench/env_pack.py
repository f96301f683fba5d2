"""How long `hopsml env pack` takes and how big the archive is: a first pack, a second one (found, no work),
and side by side venv-pack on the same environment when it is installed, and a PEX file built from it with
`--pex`.

    python -m venv /tmp/env && /tmp/env/bin/pip install . venv-pack     # the default environment
    python -m venv /tmp/pex && /tmp/pex/bin/pip install pex             # only for --pex
    python bench/env_pack.py --prefix /tmp/env --pex /tmp/pex/bin/pex    # pack it (this Python's version)

All leave pyspark out (each executor's Spark brings its own); venv-pack runs at its default gzip level 4,
hopsml's packer at ISA-L's level 1, pex at its defaults from the venv's installed distributions (a PEX root
of its own, so it starts as cold as the others), and the table shows what each costs in time and bytes.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hopsml.cluster import shipping
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


def _pex(pex: str, prefix: str, output: str, pex_root: str) -> float:
    """`pex --venv-repository`: every distribution the venv holds, resolved from it (no index), pyspark left out."""
    left_out = {"pip", "setuptools", "pyspark", "py4j", "venv-pack"}
    names = sorted({d.metadata["Name"] for d in importlib.metadata.distributions(path=[shipping._site_packages(prefix)])
                    if d.metadata["Name"] and d.metadata["Name"].lower() not in left_out})
    started = time.perf_counter()
    subprocess.run([pex, "--venv-repository", prefix, *names, "--exclude", "pyspark", "--exclude", "py4j",
                    "--pex-root", pex_root, "-o", output], check=True, capture_output=True)
    return time.perf_counter() - started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prefix", default=sys.prefix, help="the venv to pack (default: this one)")
    parser.add_argument("--pex", help="a pex executable: also build a PEX file of the venv")
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
        if args.pex:
            pex_file = os.path.join(folder, "environment.pex")
            pex_seconds = _pex(args.pex, args.prefix, pex_file, os.path.join(folder, "pex-root"))
            rows.append(("pex --venv-repository", pex_seconds, os.path.getsize(pex_file)))
        print(f"environment {args.prefix}, fingerprint {first.fingerprint}")
        print(f"{'':34} {'seconds':>9} {'MiB':>9}")
        for name, took, size in rows:
            print(f"{name:34} {took:9.2f} {size / 2**20:9.1f}")
        if seconds is not None:
            print(f"venv-pack / hopsml: {seconds / first.seconds:.2f}x the time, "
                  f"{os.path.getsize(output) / first.size:.2f}x the size")
        if args.pex:
            print(f"pex / hopsml: {pex_seconds / first.seconds:.2f}x the time, "
                  f"{os.path.getsize(pex_file) / first.size:.2f}x the size")
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
