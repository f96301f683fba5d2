"""What an experiment was run with: the program (notebook or script), the environment, the git
revision and the versions of the stack, so a result can be reproduced later."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import inspect
import json
import logging
import os
import platform
import shutil
import subprocess
import sys
import sysconfig
from typing import Any

import hopsml
from hopsml import installed

log = logging.getLogger(__name__)

_NOTEBOOK_VARIABLES = ("__vsc_ipynb_file__", "__session__")


def _ipython_namespace() -> dict[str, Any]:
    shell = sys.modules.get("IPython")
    if shell is None:
        return {}
    try:
        ip = shell.get_ipython()
    except AttributeError:
        return {}
    return getattr(ip, "user_ns", {}) or {}


def installed_file(path: str) -> bool:
    """True for files of installed packages or the standard library (`python -m pytest`), not user code."""
    path = os.path.realpath(path)
    roots = {os.path.realpath(p) for key in ("stdlib", "purelib", "platlib")
             if (p := sysconfig.get_paths().get(key))}
    return any(path.startswith(root + os.sep) for root in roots)


def find_program(fn: Any = None) -> str | None:
    """The file that is running: the notebook of this kernel, the `__main__` script, or else the
    source file that defines `fn` (e.g. when a console script calls a library function)."""
    candidates = [os.environ.get("JPY_SESSION_NAME")]
    namespace = _ipython_namespace()
    candidates += [namespace.get(name) for name in _NOTEBOOK_VARIABLES]
    for candidate in candidates:
        if isinstance(candidate, str) and candidate.endswith(".ipynb") and os.path.isfile(candidate):
            return os.path.abspath(candidate)
    if namespace:
        return None  # an interactive kernel whose notebook file is unknown
    main_file = getattr(sys.modules.get("__main__"), "__file__", None)
    if main_file and main_file.endswith(".py") and os.path.isfile(main_file) and not installed_file(main_file):
        return os.path.abspath(main_file)
    try:
        source = inspect.getsourcefile(fn) if fn is not None else None
    except TypeError:
        source = None
    return os.path.abspath(source) if source and source.endswith(".py") and os.path.isfile(source) else None


KERNEL_HISTORY = "<the kernel's executed cells>"  # the record's program when the notebook file is unknown


def kernel_notebook() -> str | None:
    """This kernel's executed cells as a notebook (JSON), for a kernel whose notebook file is unknown
    (run by nbclient, papermill or a remote front end): what ran is versioned even without the file.
    The cells are as the kernel ran them, so a magic appears as IPython's own translation of it."""
    history = _ipython_namespace().get("In")
    if not isinstance(history, list):
        return None
    cells = [{"cell_type": "code", "id": f"cell-{number}", "execution_count": number, "metadata": {},
              "outputs": [], "source": source}
             for number, source in enumerate(history) if isinstance(source, str) and source.strip()]
    if not cells:
        return None
    language = {"name": "python", "version": platform.python_version()}
    return json.dumps({"cells": cells, "metadata": {"language_info": language, "hopsml": {"from": "kernel history"}},
                       "nbformat": 4, "nbformat_minor": 5}, indent=1)


def _pip_environment() -> str:
    """The installed packages in conda's environment-file format (for `conda env create -f`)."""
    packages = sorted({name.lower(): version for name, version in installed.distributions()}.items())
    name = os.path.basename(sys.prefix) or "hopsml"
    lines = [f"name: {name}", "channels:", "  - defaults", "dependencies:",
             f"  - python={platform.python_version()}", "  - pip", "  - pip:"]
    lines += [f"    - {pkg}=={version}" for pkg, version in packages]
    return "\n".join(lines) + "\n"


# `conda env export` by environment, with the mtimes of the folders whose entries change when a package is installed
# or removed (conda-meta/ for conda's, sys.path for pip's): the export took seconds of every launch
_conda_exports: dict[str, tuple[tuple[tuple[str, int], ...], str]] = {}


def environment_yaml() -> str:
    """`conda env export` of the active conda environment (again only once a package changed), else the pip
    packages in that format."""
    conda = os.environ.get("CONDA_EXE") or shutil.which("conda")
    if conda and (prefix := os.environ.get("CONDA_PREFIX")):
        stamp = installed.folder_stamp([os.path.join(prefix, "conda-meta"), *sys.path])
        cached = _conda_exports.get(prefix)
        if cached is not None and cached[0] == stamp:
            return cached[1]
        try:
            done = subprocess.run([conda, "env", "export", "-p", prefix],
                                  capture_output=True, text=True, timeout=120, check=True)
            _conda_exports[prefix] = (stamp, done.stdout)
            return done.stdout
        except (OSError, subprocess.SubprocessError) as exc:
            log.warning("conda env export failed (%s); recording pip packages instead", exc)
    return _pip_environment()


def git_info(path: str | None) -> dict[str, Any] | None:
    """Revision, branch and dirty flag of the git checkout holding `path`, if any."""
    folder = os.path.dirname(path) if path and os.path.isfile(path) else (path or os.getcwd())

    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", folder, *args], capture_output=True, text=True,
                              timeout=10, check=True).stdout.strip()

    try:
        revision = git("rev-parse", "HEAD")
    except (OSError, subprocess.SubprocessError):
        return None
    try:
        branch = git("rev-parse", "--abbrev-ref", "HEAD")
        dirty = bool(git("status", "--porcelain", "--untracked-files=no"))
    except (OSError, subprocess.SubprocessError):
        branch, dirty = None, None
    return {"revision": revision, "branch": branch, "dirty": dirty}


def _version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def _cuda_version() -> str | None:
    if "cupy" not in sys.modules and importlib.util.find_spec("cupy") is None:
        return None
    try:
        import cupy

        version = cupy.cuda.runtime.runtimeGetVersion()
        return f"{version // 1000}.{version % 1000 // 10}"
    except Exception:  # noqa: BLE001 - cupy without a driver raises many kinds of errors
        return None


def stack_versions(spark_version: str | None = None) -> dict[str, str | None]:
    """Versions of everything that changes results."""
    return {
        "python": platform.python_version(),
        "hopsml": _version(hopsml.DISTRIBUTION),
        "spark": spark_version or _version("pyspark"),
        "pyarrow": _version("pyarrow"),
        "numpy": _version("numpy"),
        "petastorm": _version("petastorm"),
        "cupy": _version("cupy-cuda12x") or _version("cupy"),
        "cuda": _cuda_version(),
    }

