"""Pythons for the cluster tests' drivers and workers: venvs of their own that see this one's packages and
hopsml through a .pth file, so they are made (and packed) in a second."""

from __future__ import annotations

import site
import sys
import venv
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent.parent


def _site_packages(folder: Path) -> Path:
    return folder / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages"


def driver_venv(folder: Path) -> str:
    """A venv whose python sees this one's packages and hopsml; returns that python."""
    venv.EnvBuilder(with_pip=False).create(folder)
    (_site_packages(folder) / "driver.pth").write_text("\n".join([str(REPO), *site.getsitepackages()]) + "\n")
    return str(folder / "bin" / "python")


def worker_bin(folder: Path, numpy_version: str | None = None) -> str:
    """The bin folder of such a venv, to put first on a worker's PATH (its `python3`); with `numpy_version`
    its own site-packages, read before the .pth's, hold a numpy distribution of that version, as another
    install of numpy would."""
    driver_venv(folder)
    if numpy_version is not None:
        other = _site_packages(folder) / f"numpy-{numpy_version}.dist-info"
        other.mkdir()
        (other / "METADATA").write_text(f"Metadata-Version: 2.1\nName: numpy\nVersion: {numpy_version}\n")
    return str(folder / "bin")
