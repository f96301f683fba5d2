"""Pack the driver's Python environment once, so a cluster's executors run what the notebook runs.

Spark's own way (PySpark's "Python Package Management"): an archive of the environment in `spark.archives`,
unpacked by every executor as `./environment`, and `spark.pyspark.python` pointing into it. The archive lies
in the project, `Resources/environments/<fingerprint>.tar.gz` on the root's storage (local, HDFS, S3), keyed by
a fingerprint of the installed distributions and the Python version: a second pack of the same environment
finds it and costs nothing. A manifest beside it, written last, says the archive is whole.

A venv is packed here, a tar of its folder through ISA-L's gzip: it holds the packages, not Python itself,
so every executor needs the venv's base Python at the same path (its pyvenv.cfg `home`), as with venv-pack.
A conda environment goes through conda-pack (`pip install conda-pack`), which takes Python along. pyspark is
left out of the archive: the executors' Spark puts its own on their path.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import logging
import os
import platform
import sys
import sysconfig
import tarfile
import tempfile
import time
from dataclasses import dataclass
from typing import Any, BinaryIO

from hopsml import installed, layout
from hopsml.clock import utc_now
from hopsml.errors import HopsmlError
from hopsml.fs import Storage

log = logging.getLogger(__name__)

ALIAS = "environment"  # the folder each executor unpacks the archive into
_SKIPPED_DIRS = {"__pycache__"}
_SKIPPED_PACKAGES = ("pyspark",)  # Spark puts its own on the executors' path
_SKIPPED_BIN = ("activate", "activate.csh", "activate.fish", "Activate.ps1")


class PackError(HopsmlError):
    """The environment cannot be packed as it is; the message says what to change."""


@dataclass(frozen=True)
class PackedEnvironment:
    """One packed environment in the project: where it lies, and what Spark needs to use it."""

    fingerprint: str
    uri: str
    size: int
    reused: bool
    seconds: float

    def spark_conf(self) -> dict[str, str]:
        """The settings that make every executor unpack the archive and run its Python."""
        return {"spark.archives": f"{self.uri}#{ALIAS}", "spark.pyspark.python": f"./{ALIAS}/bin/python"}

    def submit_args(self) -> list[str]:
        """The same as spark-submit words (the driver keeps its own Python)."""
        words = ["--archives", f"{self.uri}#{ALIAS}"]
        for key, value in {**self.spark_conf(), "spark.pyspark.driver.python": sys.executable}.items():
            if key != "spark.archives":
                words += ["--conf", f"{key}={value}"]
        return words


def _kind(prefix: str) -> str:
    if os.path.isdir(os.path.join(prefix, "conda-meta")):
        return "conda"
    if os.path.isfile(os.path.join(prefix, "pyvenv.cfg")):
        return "venv"
    raise PackError(f"{prefix} is neither a venv nor a conda environment, and a system Python cannot be packed: "
                    "create a venv (python -m venv) or a conda environment, install your packages there, and run "
                    "from it")


def base_python(prefix: str) -> str | None:
    """The folder of the Python a venv runs on (its pyvenv.cfg's `home`): a venv's archive does not carry
    Python, so each executor needs it at that path; None for a conda environment, which carries its own."""
    if _kind(prefix) != "venv":
        return None
    with open(os.path.join(prefix, "pyvenv.cfg"), encoding="utf-8") as cfg:
        for line in cfg:
            key, _, value = line.partition("=")
            if key.strip() == "home":
                return value.strip()
    return None


def _site_packages(prefix: str) -> str:
    return sysconfig.get_paths(vars={"base": prefix, "platbase": prefix})["purelib"]


def _distributions(prefix: str) -> list[importlib.metadata.Distribution]:
    return list(importlib.metadata.distributions(path=[_site_packages(prefix)]))


def describe(prefix: str | None = None, packed: PackedEnvironment | None = None) -> dict[str, Any] | None:
    """What a run records of the environment it ran in: its fingerprint, and the archive its executors
    unpacked when one was shipped; None for a Python that is neither a venv nor a conda environment."""
    try:
        return {"fingerprint": fingerprint(prefix or sys.prefix), "archive": packed.uri if packed else None}
    except PackError:
        return None


def fingerprint(prefix: str) -> str:
    """What identifies the environment: its Python, platform and every installed distribution's version."""
    names = sorted(f"{name}=={version}".lower() for name, version in installed.distributions([_site_packages(prefix)]))
    text = "\n".join([sys.version, platform.platform(terse=True), platform.machine(), _kind(prefix), *names])
    return hashlib.sha256(text.encode()).hexdigest()[:20]


def _editable(prefix: str) -> list[str]:
    """The distributions installed in editable mode (pip install -e): their code is outside the prefix."""
    found = []
    for dist in _distributions(prefix):
        try:
            direct = json.loads(dist.read_text("direct_url.json") or "{}")
        except ValueError:
            continue
        if direct.get("dir_info", {}).get("editable"):
            found.append(f"{dist.metadata['Name']} (from {direct.get('url', '?')})")
    return sorted(found)


def _keep(prefix: str, site: str) -> Any:
    """The archive's filter: no caches, no activate scripts, no pyspark (its code and its dist-info)."""
    scripts = {os.path.join(prefix, "bin", name) for name in _SKIPPED_BIN}

    def skipped(path: str) -> bool:
        if os.path.basename(path) in _SKIPPED_DIRS or path in scripts:
            return True
        if os.path.dirname(path) != site:
            return False
        name = os.path.basename(path)
        return any(name == p or name.startswith(p + "-") and name.endswith(".dist-info") for p in _SKIPPED_PACKAGES)

    def keep(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
        return None if skipped(os.path.join(prefix, info.name)) else info

    return keep


def _pack_venv(prefix: str, output: str) -> None:
    from isal import igzip

    keep = _keep(prefix, _site_packages(prefix))
    with igzip.open(output, "wb", compresslevel=1) as raw, tarfile.open(fileobj=raw, mode="w") as tar:
        for name in sorted(os.listdir(prefix)):  # at the archive's top, as Spark unpacks it into ./environment
            tar.add(os.path.join(prefix, name), arcname=name, filter=keep)


def _pack_conda(prefix: str, output: str) -> None:
    try:
        import conda_pack
    except ImportError as exc:
        raise PackError("packing a conda environment needs conda-pack: pip install conda-pack (or conda install "
                        "-c conda-forge conda-pack), then pack again") from exc
    try:
        conda_pack.pack(prefix=prefix, output=output, force=True, compress_level=1,
                        filters=[("exclude", f"{os.path.relpath(_site_packages(prefix), prefix)}/pyspark/*")])
    except conda_pack.CondaPackError as exc:   # e.g. files of conda's packages that pip overwrote: it names them
        raise PackError(f"conda-pack cannot pack the conda environment at {prefix}: {exc}. Reinstall the packages "
                        "it names with one tool (conda install, or pip install --force-reinstall), then pack "
                        "again") from exc


def _sha256(stream: BinaryIO) -> str:
    digest = hashlib.sha256()
    with stream:
        while chunk := stream.read(1 << 22):
            digest.update(chunk)
    return digest.hexdigest()


def _fault(storage: Storage, archive: str, recorded: dict[str, Any]) -> str | None:
    """What is wrong with a stored archive against its manifest (cut off, or other bytes), None when it is
    whole: the executors would unpack a damaged one half-way. Manifests written before the checksum was
    recorded vouch by size alone."""
    if recorded.get("size") != storage.info(archive).size:
        return "is not the size its manifest says"
    if "sha256" in recorded and _sha256(storage.open_input(archive)) != recorded["sha256"]:
        return "does not hold the bytes its manifest's sha256 says"
    return None


def pack(storage: Storage, project: str, prefix: str | None = None, force: bool = False) -> PackedEnvironment:
    """The project's archive of the environment at `prefix` (this one's by default): found when one of the
    same fingerprint is whole, else packed and stored (a missing or cut-off archive is packed again)."""
    started = time.monotonic()
    prefix = prefix or sys.prefix
    kind = _kind(prefix)
    print_ = fingerprint(prefix)
    archive, manifest = layout.environment_archive(project, print_), layout.environment_manifest(project, print_)
    if not force and storage.exists(manifest) and storage.exists(archive):
        recorded = storage.read_json(manifest)
        fault = _fault(storage, archive, recorded)
        if fault is None:
            return PackedEnvironment(print_, storage.uri(archive), recorded["size"], True,
                                     time.monotonic() - started)
        log.warning("the environment archive %s %s: packing it again", storage.uri(archive), fault)
    editable = _editable(prefix)
    if editable:
        raise PackError(f"the environment at {prefix} has packages installed in editable mode, whose code is not in "
                        f"the environment: {', '.join(editable)}. Install them normally (pip install <folder>, without "
                        "-e) and pack again")
    log.warning("packing the %s at %s for the executors (once for this set of packages)", kind, prefix)
    with tempfile.TemporaryDirectory(prefix="hopsml-pack-") as folder:
        local = os.path.join(folder, f"{print_}.tar.gz")
        (_pack_conda if kind == "conda" else _pack_venv)(prefix, local)
        size, digest = os.path.getsize(local), _sha256(open(local, "rb"))
        storage.delete(manifest)  # an old manifest must not vouch for the archive while it is replaced
        storage.upload(local, archive)
    storage.write_json(manifest, {"fingerprint": print_, "size": size, "sha256": digest, "kind": kind,
                                  "python": sys.version.split()[0],
                                  "prefix": prefix, "packages": len(_distributions(prefix)),
                                  "created": utc_now()})
    return PackedEnvironment(print_, storage.uri(archive), size, False, time.monotonic() - started)
