"""The user's own modules travel with a run: the files beside a notebook or script (and those `hdfs.add_module`
put on `sys.path`) that the training function imports, which an executor on another host does not have.

On the driver, `collect(fn)` finds them: the modules the function imports in its body or refers to, and the
modules those import in turn, wherever the file is not part of an installed package or the standard library.
Their source goes with the run's tasks (a few kB; the experiment keeps a copy), and `install` writes it into a
folder of the executor's Python worker that goes first on its `sys.path`, before the run's code is loaded. So
an import inside the function, a class the function's arguments are instances of, and a module edited since
the last run all resolve to the driver's current files, on every host; child processes of a rank get the
folder through PYTHONPATH like the rest of the worker's path. Spark's `addPyFile` was the other way: it ships
a path once per session and refuses to ship it again, so an edited module would keep its first version.
"""

from __future__ import annotations

import ast
import atexit
import hashlib
import importlib.util
import os
import shutil
import sys
import tempfile
import types
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from hopsml import orphans
from hopsml.errors import HopsmlError
from hopsml.tracking.versioning import installed_file

PREFIX = "hopsml-modules-"  # $TMPDIR/hopsml-modules-<worker pid>-<random>: swept once the worker is gone
MAX_BYTES = 16 << 20        # more than this is not a helper module: say so rather than ship it with every task

_folder: str | None = None
_installed: dict[str, str] = {}  # file -> digest of what this worker has written


def _imports_of_code(code: types.CodeType) -> Iterator[str]:
    import dis

    for instruction in dis.get_instructions(code):
        if instruction.opname == "IMPORT_NAME":
            yield str(instruction.argval)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _imports_of_code(const)


def _names_used_by(fn: Any) -> set[str]:
    """Modules `fn` imports in its body, is defined in, or refers to through its globals and closure."""
    names = {getattr(fn, "__module__", None) or ""}
    code = getattr(fn, "__code__", None)
    if code is None:
        return names - {""}
    names.update(_imports_of_code(code))
    values = [getattr(fn, "__globals__", {}).get(n) for n in code.co_names]
    values += [cell.cell_contents for cell in fn.__closure__ or () if cell.cell_contents is not None]
    for value in values:
        if isinstance(value, types.ModuleType):
            names.add(value.__name__)
        elif isinstance(getattr(value, "__module__", None), str):
            names.add(value.__module__)
    return names - {"", "__main__"}


def _imports_of_file(path: str) -> set[str]:
    try:
        with open(path, "rb") as f:
            tree = ast.parse(f.read(), filename=path)
    except (OSError, SyntaxError, ValueError):
        return set()
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module)
    return found


def _local_root(name: str) -> tuple[str, str] | None:
    """(folder on sys.path, top-level file or package folder) of a module that is the user's own, else None."""
    top = name.split(".")[0]
    if top in sys.builtin_module_names or top in sys.stdlib_module_names or top == "hopsml":
        return None
    module = sys.modules.get(top)
    try:
        spec = module.__spec__ if module is not None else importlib.util.find_spec(top)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.origin or not spec.has_location or installed_file(spec.origin):
        return None
    if spec.submodule_search_locations:  # a package: the whole folder goes
        folder = os.path.dirname(spec.origin)
        return os.path.dirname(folder), folder
    if not spec.origin.endswith(".py"):  # a compiled extension of the user's is not portable: leave it
        return None
    return os.path.dirname(spec.origin), spec.origin


def _files_of(base: str, root: str) -> Iterator[tuple[str, str]]:
    if os.path.isfile(root):
        yield os.path.relpath(root, base), root
        return
    for folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if d != "__pycache__" and not d.startswith(".")]
        for name in sorted(files):
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                yield os.path.relpath(path, base), path


def collect(fn: object) -> dict[str, bytes]:
    """The user's own module files `fn` needs, relative path -> source (its imports' imports included)."""
    files: dict[str, bytes] = {}
    seen: set[str] = set()
    pending = list(_names_used_by(fn))
    while pending:
        found = _local_root(pending.pop())
        if found is None or found[1] in seen:
            continue
        seen.add(found[1])
        for rel, path in _files_of(*found):
            with open(path, "rb") as f:
                files[rel] = f.read()
            pending.extend(_imports_of_file(path))
    size = sum(map(len, files.values()))
    if size > MAX_BYTES:
        biggest = sorted(files, key=lambda rel: -len(files[rel]))[:3]
        raise HopsmlError(f"the function's own modules come to {size >> 20} MiB ({', '.join(biggest)} are the "
                          f"largest), more than the {MAX_BYTES >> 20} MiB shipped with every task: install the "
                          "package on the executors (or in the shipped environment) instead")
    return files


def _worker_folder() -> str:
    global _folder
    if _folder is None:
        orphans.sweep(PREFIX, "a Python worker")
        _folder = tempfile.mkdtemp(prefix=f"{PREFIX}{os.getpid()}-")
        atexit.register(shutil.rmtree, _folder, True)
    return _folder


def _top_level_names(rels: Iterable[str]) -> set[str]:
    return {rel.split(os.sep)[0].removesuffix(".py") for rel in rels}


def install(files: Mapping[str, bytes]) -> None:
    """In the executor's worker: write the files into its folder, first on sys.path, and forget a module whose
    file changed since this worker imported it, so that the run imports the driver's current source."""
    if not files:
        return
    folder = _worker_folder()
    changed = []
    for rel, data in files.items():
        digest = hashlib.sha256(data).hexdigest()
        if _installed.get(rel) == digest:
            continue
        path = os.path.join(folder, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(data)
        _installed[rel] = digest
        changed.append(rel)
    if folder in sys.path:
        sys.path.remove(folder)
    sys.path.insert(0, folder)
    if changed:  # a package is imported again whole: its modules hold each other (`from pkg import mod`)
        sys.path_importer_cache.pop(folder, None)
        tops = _top_level_names(changed)
        for name in [n for n in sys.modules if n.split(".")[0] in tops]:
            del sys.modules[name]
