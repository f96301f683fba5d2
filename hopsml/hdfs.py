"""File helpers for notebooks, with the names and semantics of hops' `hdfs` module.

Every function takes a path in any of the forms a Hopsworks notebook uses, and maps it onto the
project under the configured root (a local folder, HDFS or S3):

- project-relative: ``"Resources/data.csv"`` (also ``"Projects/<p>/..."``, relative to the root),
- absolute inside the root: ``project_path() + "Resources/data.csv"``, a local path for a local root,
  or the root's URI form (``file:///...``, ``s3://bucket/prefix/...``, ``hdfs://nn:8020/...``),
- the Hopsworks namespace: ``"/Projects/<p>/..."`` and ``"hdfs:///Projects/<p>/..."`` (any namenode),
  which map onto the root's ``Projects`` folder.

Anything else (a local path outside the root, another bucket) raises `InvalidPathError`; a missing
path raises `PathNotFoundError` (an IOError, as hops raised) and an existing target that would be
replaced raises `PathExistsError` unless ``overwrite=True``.
"""

from __future__ import annotations

import datetime
import fnmatch
import functools
import getpass
import logging
import os
import posixpath
import re
import shutil
import stat as _stat
import sys
from contextlib import ExitStack
from dataclasses import dataclass
from typing import IO, Any
from urllib.parse import urlsplit

from hopsml import config, hdfs_file, layout, skeleton
from hopsml.errors import HopsmlError, ResourceNotFoundError, StorageError
from hopsml.fs import Entry, FileSystem, Storage
from hopsml.redact import redact_uri
from hopsml.tracking import run_context

_log = logging.getLogger(__name__)

_HOPS_NAMESPACE_SCHEMES = ("hdfs", "hopsfs")
_WILDCARDS = frozenset("*?[")


class PathNotFoundError(ResourceNotFoundError):
    """A path given to an hdfs helper does not exist (an IOError, like hops raised)."""


class PathExistsError(HopsmlError, FileExistsError):
    """The target of a copy or move exists and overwriting was not asked for."""


class InvalidPathError(HopsmlError, ValueError):
    """A path that does not lie under the hopsml root, or that no hdfs helper can read."""


# --- where paths go --------------------------------------------------------------------------------
@functools.lru_cache(maxsize=8)
def _storage_for(root: str) -> Storage:
    return Storage(root)


def _context(project: str | None = None) -> tuple[Storage, str]:
    """The root and project folder: inside a run (a Spark task) the run's own, else the settings'."""
    run = run_context.current_or_none()
    if run is not None and run.run_dir.project is not None:
        return run.storage, layout.project_dir(project or run.run_dir.project)
    settings = config.load(project=project)
    storage = _storage_for(settings.root)
    skeleton.ensure(storage, settings.project)  # a notebook may read Logs/README.md first thing
    return storage, layout.project_dir(settings.project)


def _text(path: object) -> str:
    if isinstance(path, bytes):
        path = path.decode("utf-8")
    path = os.fspath(path) if isinstance(path, os.PathLike) else path
    if not isinstance(path, str):
        raise InvalidPathError(f"a path must be a string, got {type(path).__name__} {path!r}")
    return path.strip()


def _inside(path: str, base: str) -> str | None:
    """`path` relative to `base` ('' for base itself), or None when it lies elsewhere."""
    base = base.rstrip("/")
    if not base:
        return path.lstrip("/")
    if path == base:
        return ""
    if path.startswith(base + "/"):
        return path[len(base) + 1:]
    return None


def _hops_namespace(path: str) -> str | None:
    """'/Projects/p/x' -> 'Projects/p/x': the Hopsworks namespace maps onto the root's Projects folder."""
    return path.lstrip("/") if _inside(path, "/" + layout.PROJECTS) is not None else None


def _from_absolute(path: str, storage: Storage) -> str | None:
    """A '/'-rooted path: inside a local root, or in the Hopsworks namespace."""
    path = posixpath.normpath(path)
    if storage.is_local:
        base = storage.path()
        rel = _inside(path, base)
        if rel is None:
            rel = _inside(os.path.realpath(path), os.path.realpath(base))
        if rel is not None:
            return rel
    return _hops_namespace(path)


def _same_scheme(a: str, b: str) -> bool:
    """hopsfs:// is HopsFS's name for hdfs://."""
    return a == b or {a, b} <= set(_HOPS_NAMESPACE_SCHEMES)


def _from_uri(text: str, storage: Storage) -> str | None:
    parts = urlsplit(text)
    scheme, netloc, path = parts.scheme.lower(), parts.netloc, posixpath.normpath(parts.path or "/")
    if scheme == "file":
        return _from_absolute(path, storage) if storage.is_local else None
    root = None if storage.is_local else urlsplit(storage.root)
    if root is not None and _same_scheme(scheme, root.scheme.lower()):
        # 'hdfs:///x' names the default namenode, which for an hdfs:// root is the root's own
        same_place = netloc == root.netloc or (not netloc and scheme in _HOPS_NAMESPACE_SCHEMES)
        rel = _inside(path, root.path or "/") if same_place else None
        if rel is not None:
            return rel
    if scheme in _HOPS_NAMESPACE_SCHEMES:
        return _hops_namespace(path)
    return None


def _resolve(path: object, project: str | None = None) -> tuple[Storage, str]:
    """(storage, root-relative path) for any path form the module accepts."""
    storage, project_dir = _context(project)
    return storage, _root_relative(path, storage, project_dir)


def root_relative(path: object, storage: Storage, project: str) -> str:
    """The root-relative path that any path form hdfs accepts names, for `storage`'s root and `project`: a
    project-relative path, 'Projects/<p>/...', '/Projects/<p>/...', hdfs:// (or hopsfs://, s3://, file://) URIs
    of the root, and what `project_path()`/`abs_path()` return under any root. The one resolver every entry
    point that takes a project path shares (serving, models, prepare); InvalidPathError for a path outside
    the root."""
    return _root_relative(path, storage, layout.project_dir(project))


def _root_relative(path: object, storage: Storage, project_dir: str) -> str:
    text = _text(path)
    if "://" in text or text.lower().startswith(("file:", "hdfs:", "hopsfs:")):
        rel = _from_uri(text, storage)
    elif text.startswith("/"):
        rel = _from_absolute(text, storage)
    elif _inside(posixpath.normpath(text or "."), layout.PROJECTS) is not None:
        rel = text  # 'Projects/<p>/...': relative to the root, as hopsml's own paths are
    else:
        rel = layout.join(project_dir, text) if text else project_dir
    if rel is not None:
        rel = posixpath.normpath(rel or ".")
        rel = "" if rel == "." else rel
    if rel is None or rel == ".." or rel.startswith("../"):
        raise InvalidPathError(
            f"{redact_uri(text)!r} is not under the hopsml root {storage.uri()}. Give a path relative to the project "
            f"({storage.uri(project_dir)}), an absolute path inside the root, or /Projects/<project>/...; "
            "copy local files in with hdfs.copy_to_hdfs(local_path, folder)")
    return rel


def _require(storage: Storage, rel: str, original: object) -> Entry:
    info = storage.info(rel)
    if not info.exists:
        given, where = _text(original), storage.uri(rel)
        looked = "" if given.rstrip("/") == where else f" (looked for {where})"
        raise PathNotFoundError(f"{given!r} does not exist{looked}; check the path with hdfs.ls() on its folder")
    return info


# --- the project ----------------------------------------------------------------------------------
def log(string: object) -> None:
    """Write a timestamped line to the run's log (output.log), as hops 1.x's hdfs.log did.

    Inside a run the line goes where the function's output goes (its output.log, and the notebook);
    outside one it goes to this module's logger.
    """
    line = f"{datetime.datetime.now().isoformat()}: {string}"
    if run_context.current_or_none() is None:
        _log.info("%s", line)
        return
    sys.stdout.write(line + "\n")  # captured into the run's output.log by the task

def project_name() -> str:
    """The current project's name: the run's inside a run, else the setting (env HOPSML_PROJECT)."""
    run = run_context.current_or_none()
    if run is not None and run.run_dir.project is not None:
        return run.run_dir.project
    return config.load().project


def project_user() -> str:
    """The project user, '<project>__<user>' as Hopsworks names it (HADOOP_USER_NAME wins if set)."""
    user = os.environ.get("HOPSML_USER") or getpass.getuser()
    return os.environ.get("HADOOP_USER_NAME") or f"{project_name()}__{user}"


def _without_namenode(uri: str) -> str:
    parts = urlsplit(uri)
    return f"{parts.scheme}://{parts.path}" if parts.scheme in _HOPS_NAMESPACE_SCHEMES else uri


def project_path(project: str | None = None, exclude_nn_addr: bool = False) -> str:
    """The project folder, ending with '/': a local path for local roots, else its URI.

    `exclude_nn_addr` drops the namenode's host:port from an hdfs:// URI ('hdfs:///...'), as hops did.
    """
    storage, project_dir = _context(project)
    path = storage.uri(project_dir) + "/"
    return _without_namenode(path) if exclude_nn_addr else path


def abs_path(hdfs_path: str, project: str | None = None) -> str:
    """The full path of `hdfs_path`: a local path for local roots, else the URI (it need not exist)."""
    storage, rel = _resolve(hdfs_path, project)
    return storage.uri(rel)


def get_plain_path(abs_path: str) -> str:
    """The path inside `get_fs()` for any accepted path form (hops: the URI without scheme and namenode)."""
    storage, rel = _resolve(abs_path)
    return storage.path(rel)


def get_fs() -> FileSystem:
    """The root's pyarrow filesystem; address files in it with `get_plain_path(path)`."""
    storage, _ = _context()
    return storage.fs


def get() -> FileSystem:
    """hops' handle on the filesystem (pydoop's there): here the root's pyarrow filesystem, as `get_fs()`."""
    return get_fs()


def close() -> None:
    """hops closed its pydoop handle here; pyarrow's filesystem holds nothing that needs closing."""


def capacity() -> int:
    """The raw capacity, in bytes, of the filesystem under a local root (hops: the HDFS cluster's)."""
    storage, _ = _context()
    local = storage.local_path()
    if local is None:
        raise StorageError(f"capacity() is known only for a local root; {storage.uri()} reports none through "
                           "pyarrow (on HDFS: hdfs dfs -df)")
    os.makedirs(local, exist_ok=True)
    return shutil.disk_usage(local).total


# --- queries --------------------------------------------------------------------------------------
def exists(hdfs_path: str, project: str | None = None) -> bool:
    """True when the file or folder exists; raises InvalidPathError for a path outside the root."""
    storage, rel = _resolve(hdfs_path, project)
    return storage.exists(rel)


def isdir(hdfs_path: str, project: str | None = None) -> bool:
    """True when the path is a folder (False when it is a file or missing)."""
    storage, rel = _resolve(hdfs_path, project)
    return storage.isdir(rel)


def isfile(hdfs_path: str, project: str | None = None) -> bool:
    """True when the path is a file (False when it is a folder or missing)."""
    storage, rel = _resolve(hdfs_path, project)
    return storage.info(rel).is_file


@dataclass(frozen=True)
class StatResult:
    """What `stat()` gives: the os.stat fields hops users read, plus pydoop's name and kind."""

    name: str
    kind: str           # 'file' or 'directory'
    st_size: int
    st_mtime: float
    st_atime: float
    st_ctime: float
    st_mode: int
    st_uid: int
    st_gid: int
    st_nlink: int = 1

    @property
    def size(self) -> int:
        return self.st_size

    @property
    def last_mod(self) -> float:
        return self.st_mtime


def _stat_of(storage: Storage, info: Entry) -> StatResult:
    rel = _inside(info.path, storage.path()) or ""
    is_dir = info.is_dir
    kind = "directory" if is_dir else "file"
    local = storage.local_path(rel)
    if local is not None:
        st = os.stat(local)
        return StatResult(local, kind, st.st_size, st.st_mtime, st.st_atime, st.st_ctime, st.st_mode,
                          st.st_uid, st.st_gid, st.st_nlink)
    mtime = info.mtime.timestamp() if info.mtime is not None else 0.0
    mode = (_stat.S_IFDIR | 0o755) if is_dir else (_stat.S_IFREG | 0o644)
    size = info.size if info.size is not None and not is_dir else 0
    return StatResult(storage.uri(rel), kind, size, mtime, mtime, mtime, mode, 0, 0)


def stat(hdfs_path: str, project: str | None = None) -> StatResult:
    """os.stat() for a project path: st_size, st_mtime, st_mode, ..., plus name and kind."""
    storage, rel = _resolve(hdfs_path, project)
    return _stat_of(storage, _require(storage, rel, hdfs_path))


def _children(storage: Storage, rel: str, recursive: bool) -> list[Entry]:
    return storage.walk(rel, recursive)


def _listing(hdfs_path: str, recursive: bool, project: str | None) -> tuple[Storage, list[Entry]]:
    storage, rel = _resolve(hdfs_path, project)
    info = _require(storage, rel, hdfs_path)
    if not info.is_dir:
        return storage, [info]
    return storage, _children(storage, rel, recursive)


def _uri_of(storage: Storage, info: Entry) -> str:
    return storage.uri(_inside(info.path, storage.path()) or "")


def ls(hdfs_path: str = "", recursive: bool = False, exclude_nn_addr: bool = False,
       project: str | None = None) -> list[str]:
    """Full paths of what a folder holds (every level with `recursive`); a file lists itself.

    `exclude_nn_addr` drops the namenode's host:port from hdfs:// paths ('hdfs:///...'), as hops did.
    """
    storage, infos = _listing(hdfs_path, recursive, project)
    uris = [_uri_of(storage, info) for info in infos]
    return [_without_namenode(uri) for uri in uris] if exclude_nn_addr else uris


def lsl(hdfs_path: str = "", recursive: bool = False, project: str | None = None) -> list[dict[str, Any]]:
    """Like `ls`, with pydoop's details per entry: name, kind, size, last_mod (seconds), permissions."""
    storage, infos = _listing(hdfs_path, recursive, project)
    entries = []
    for info in infos:
        st = _stat_of(storage, info)
        entries.append({"name": _uri_of(storage, info), "path": _uri_of(storage, info), "kind": st.kind,
                        "size": st.st_size, "last_mod": st.st_mtime, "permissions": _stat.S_IMODE(st.st_mode)})
    return entries


def glob(hdfs_path: str, recursive: bool = False, project: str | None = None) -> list[str]:
    """Full paths matching a shell pattern ('Resources/*.csv', 'Logs/*/events*'), sorted.

    With `recursive`, the pattern is matched against every path below the folder where its wildcards
    start, so '*' also crosses '/'. A folder before the first wildcard that does not exist raises
    PathNotFoundError, as hops did. `hdfs_path` is the pattern (hops' name for it).
    """
    pattern = hdfs_path
    storage, rel = _resolve(pattern, project)
    parts = rel.split("/") if rel else []
    first = next((i for i, part in enumerate(parts) if _WILDCARDS & set(part)), len(parts))
    base = "/".join(parts[:first])
    if first == len(parts):
        return [storage.uri(rel)] if storage.exists(rel) else []
    if not storage.isdir(base):
        raise PathNotFoundError(f"cannot glob {_text(pattern)!r}: the folder {storage.uri(base)} does not exist")
    if recursive:
        candidates = [_inside(info.path, storage.path()) or "" for info in _children(storage, base, True)]
        return [storage.uri(c) for c in candidates if fnmatch.fnmatchcase(c, rel)]
    matches = [base]
    for depth, part in enumerate(parts[first:], start=first):
        last = depth == len(parts) - 1
        found = []
        for folder in matches:
            if not _WILDCARDS & set(part):
                child = layout.join(folder, part) if folder else part
                entry = storage.info(child)
                if entry.is_dir or (last and entry.is_file):
                    found.append(child)
                continue
            for info in _children(storage, folder, False):
                if fnmatch.fnmatchcase(posixpath.basename(info.path), part) and (
                        last or info.is_dir):
                    found.append(_inside(info.path, storage.path()) or "")
        matches = found
    return sorted(storage.uri(m) for m in matches)


# --- reading and writing --------------------------------------------------------------------------
def load(hdfs_path: str, project: str | None = None) -> bytes:
    """The whole content of a file, as bytes (decode text yourself, as with hops)."""
    storage, rel = _resolve(hdfs_path, project)
    if _require(storage, rel, hdfs_path).is_dir:
        raise InvalidPathError(f"cannot load {storage.uri(rel)}: it is a folder; hdfs.ls() lists it")
    return storage.read_bytes(rel)


def dump(data: str | bytes, hdfs_path: str, project: str | None = None) -> None:
    """Write `data` (text is written as UTF-8) to a file, replacing it atomically; folders are created."""
    storage, rel = _resolve(hdfs_path, project)
    if isinstance(data, str):
        data = data.encode("utf-8")
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise TypeError(f"dump writes str or bytes, got {type(data).__name__}; serialise it first "
                        "(json.dumps, pickle.dumps, ...)")
    if storage.isdir(rel):
        raise PathExistsError(f"cannot write {storage.uri(rel)}: it is a folder")
    storage.write_bytes(rel, bytes(data))


_MODES = {"r": "rb", "w": "wb", "a": "ab"}
_MODE_TEXT = re.compile(r"^[rwa][bt]?$")


def open_file(hdfs_path: str, project: str | None = None, flags: str = "r", buff_size: int = 0,
              *, mode: str | None = None, encoding: str = "utf-8") -> IO[Any]:
    """Open a project file: flags 'r', 'w' or 'a', binary by default, text with a trailing 't' ('rt').

    Works with `with` and without: then call close(), for only then does a write land (written aside,
    renamed into place). `buff_size` is accepted for hops compatibility and ignored; `mode` is a
    Python-style alias of `flags` ('rb', 'wt', ...). hops put `project` second; a mode given there
    instead, as with Python's open(path, "wb"), is taken as the mode (no project has such a name).
    """
    if project is not None and mode is None and flags == "r" and _MODE_TEXT.match(project):
        project, mode = None, project
    flags = mode if mode is not None else flags
    text = "t" in flags
    kind = flags.replace("t", "").replace("b", "")
    if kind not in _MODES or (text and "b" in flags):
        raise ValueError(f"open_file flags must be 'r', 'w' or 'a', with 'b' or 't', not {flags!r}")
    storage, rel = _resolve(hdfs_path, project)
    if kind == "r":
        if _require(storage, rel, hdfs_path).is_dir:
            raise InvalidPathError(f"cannot open {storage.uri(rel)}: it is a folder")
    elif storage.isdir(rel):
        raise PathExistsError(f"cannot open {storage.uri(rel)} for writing: it is a folder")
    stack = ExitStack()
    try:
        stream = stack.enter_context(storage.open(rel, _MODES[kind]))
    except (OSError, NotImplementedError) as exc:
        stack.close()
        if isinstance(exc, HopsmlError):
            raise
        hint = " (this store cannot append: load() the file, then dump() it whole)" if kind == "a" else ""
        raise StorageError(f"cannot open {storage.uri(rel)} with flags {flags!r}: {exc}{hint}") from exc
    return hdfs_file.wrap(hdfs_file.HdfsFile(stack, stream, storage.uri(rel), _MODES[kind]), text, encoding)


# --- changing the tree ----------------------------------------------------------------------------
def mkdir(hdfs_path: str, project: str | None = None) -> None:
    """Create a folder and its parents (nothing happens when it exists)."""
    storage, rel = _resolve(hdfs_path, project)
    if storage.info(rel).is_file:
        raise PathExistsError(f"cannot create folder {storage.uri(rel)}: a file has that name")
    storage.makedirs(rel)


def _remove(storage: Storage, rel: str) -> None:
    if not rel or rel == layout.PROJECTS:
        raise InvalidPathError(f"refusing to delete {storage.uri(rel)}: it holds every project")
    storage.delete(rel)


def rmr(hdfs_path: str, project: str | None = None) -> None:
    """Remove a file, or a folder with everything in it."""
    storage, rel = _resolve(hdfs_path, project)
    _require(storage, rel, hdfs_path)
    _remove(storage, rel)


def delete(hdfs_path: str, recursive: bool = False) -> None:
    """Remove a file or an empty folder (any folder with `recursive`)."""
    storage, rel = _resolve(hdfs_path)
    info = _require(storage, rel, hdfs_path)
    if info.is_dir and not recursive and storage.ls(rel):
        raise PathExistsError(f"cannot delete {storage.uri(rel)}: the folder is not empty; pass recursive=True")
    _remove(storage, rel)


def _target(storage: Storage, src_rel: str, dest_rel: str) -> str:
    """Where src lands: inside dest when dest is a folder, else at dest (pydoop's cp and HDFS rename)."""
    return layout.join(dest_rel, posixpath.basename(src_rel)) if storage.isdir(dest_rel) else dest_rel


def _make_room(storage: Storage, target: str, overwrite: bool) -> None:
    if storage.exists(target):
        if not overwrite:
            raise PathExistsError(f"{storage.uri(target)} already exists; pass overwrite=True to replace it")
        _remove(storage, target)


def cp(src_hdfs_path: str, dest_hdfs_path: str, overwrite: bool = False) -> None:
    """Copy a file or folder (recursively); into `dest` when it is an existing folder."""
    storage, src = _resolve(src_hdfs_path)
    _require(storage, src, src_hdfs_path)
    _, dest = _resolve(dest_hdfs_path)
    target = _target(storage, src, dest)
    if target == src or target.startswith(src + "/"):
        raise InvalidPathError(f"cannot copy {storage.uri(src)} into itself ({storage.uri(target)})")
    _make_room(storage, target, overwrite)
    storage.copy_tree(src, target)


def move(src: str, dest: str) -> None:
    """Move a file or folder; into `dest` when it is an existing folder. An existing file is not replaced."""
    storage, src_rel = _resolve(src)
    _require(storage, src_rel, src)
    _, dest_rel = _resolve(dest)
    target = _target(storage, src_rel, dest_rel)
    if target == src_rel:
        return
    if target.startswith(src_rel + "/"):
        raise InvalidPathError(f"cannot move {storage.uri(src_rel)} into itself ({storage.uri(target)})")
    _make_room(storage, target, overwrite=False)
    try:
        storage.move(src_rel, target)
    except StorageError:
        raise
    except OSError as exc:
        raise StorageError(f"cannot move {storage.uri(src_rel)} to {storage.uri(target)}: {exc}") from exc


def rename(src: str, dest: str) -> None:
    """Rename a file or folder (the same as `move`, as in HDFS)."""
    move(src, dest)


# --- between this machine and the project ---------------------------------------------------------
def copy_to_hdfs(local_path: str, relative_hdfs_path: str = "", overwrite: bool = False,
                 project: str | None = None) -> str:
    """Copy a local file or folder INTO the project folder `relative_hdfs_path`; returns where it went.

    `local_path` may be relative to the working directory. The folder is created when missing; an
    existing file or folder of the same name is replaced only with ``overwrite=True``.
    """
    local = os.path.abspath(os.path.expanduser(_text(local_path)))
    if not os.path.exists(local):
        raise PathNotFoundError(f"cannot copy {_text(local_path)!r}: no such local file or folder ({local})")
    storage, folder = _resolve(relative_hdfs_path, project)
    if storage.info(folder).is_file:
        raise PathExistsError(f"copy_to_hdfs copies into a folder, but {storage.uri(folder)} is a file; "
                              "give the folder that should hold it")
    target = layout.join(folder, os.path.basename(local.rstrip(os.sep))) if folder else os.path.basename(local)
    _make_room(storage, target, overwrite)
    _log.info("copying %s to %s", local, storage.uri(target))
    if os.path.isdir(local):  # folders arrive too, empty ones included
        for dirpath, _, _ in os.walk(local):
            sub = os.path.relpath(dirpath, local)
            storage.makedirs(target if sub == "." else layout.join(target, *sub.split(os.sep)))
    storage.upload(local, target)
    return storage.uri(target)


def _same_tree(storage: Storage, rel: str, local: str) -> bool:
    """hops' check that a folder is already localized: the same names below it."""
    remote = sorted(posixpath.relpath(info.path, storage.path(rel)) for info in _children(storage, rel, True))
    here = sorted(os.path.relpath(os.path.join(d, n), local).replace(os.sep, "/")
                  for d, dirs, files in os.walk(local) for n in dirs + files)
    return remote == here


def copy_to_local(hdfs_path: str, local_path: str = "", overwrite: bool = False, project: str | None = None) -> str:
    """Copy a project file or folder INTO the local folder `local_path` (default: the working directory).

    Returns the local path of the copy. As in hops, a copy already there is kept when it looks the
    same (a file of the same size, a folder with the same names) unless ``overwrite=True``; a
    different one is replaced.
    """
    storage, rel = _resolve(hdfs_path, project)
    info = _require(storage, rel, hdfs_path)
    folder = os.path.abspath(os.path.expanduser(_text(local_path) or os.getcwd()))
    if os.path.exists(folder) and not os.path.isdir(folder):
        raise PathExistsError(f"copy_to_local copies into a folder, but {folder} is a file; give its folder")
    os.makedirs(folder, exist_ok=True)
    name = posixpath.basename(storage.path(rel).rstrip("/"))
    local = os.path.join(folder, name)
    is_dir = info.is_dir
    if os.path.lexists(local):
        if not overwrite and not is_dir and os.path.isfile(local) and os.path.getsize(local) == info.size:
            _log.info("%s is already in %s with the same size; not copied (overwrite=True copies)", name, folder)
            return local
        if not overwrite and is_dir and os.path.isdir(local) and _same_tree(storage, rel, local):
            _log.info("%s is already in %s with the same files; not copied (overwrite=True copies)", name, folder)
            return local
        if os.path.isdir(local) and not os.path.islink(local):
            shutil.rmtree(local)
        else:
            os.remove(local)
    _log.info("copying %s to %s", storage.uri(rel), local)
    try:
        if not is_dir:
            return storage.download(rel, local)
        os.makedirs(local)
        for child in _children(storage, rel, True):
            sub = child.path[len(storage.path(rel)) + 1:]
            target = os.path.join(local, *sub.split("/"))
            if child.is_dir:
                os.makedirs(target, exist_ok=True)
            else:
                storage.download(layout.join(rel, sub), target)
        return local
    except OSError as exc:
        if isinstance(exc, HopsmlError):
            raise
        raise StorageError(f"cannot copy {storage.uri(rel)} to {local}: {exc}") from exc


def add_module(hdfs_path: str, project: str | None = None) -> str:
    """Make a project .py file or package folder importable here: it is copied to a local folder of this
    process that goes on `sys.path` (as hops did); returns that copy's path."""
    storage, rel = _resolve(hdfs_path, project)
    info = _require(storage, rel, hdfs_path)
    if info.is_file and not rel.endswith(".py"):
        raise InvalidPathError(f"add_module takes a .py file or a package folder, not {storage.uri(rel)}")
    folder = _modules_folder()
    local = copy_to_local(hdfs_path, folder, overwrite=True, project=project)
    if folder not in sys.path:
        sys.path.insert(0, folder)
    return local


@functools.lru_cache(maxsize=1)
def _modules_folder() -> str:
    import atexit
    import tempfile

    folder = tempfile.mkdtemp(prefix="hopsml-modules-")
    atexit.register(shutil.rmtree, folder, True)
    return folder


# --- permissions ----------------------------------------------------------------------------------
def _local_only(action: str, storage: Storage, rel: str) -> str:
    """The local path of `rel`; pyarrow sets no permissions or owners on HDFS or S3."""
    local = storage.local_path(rel)
    if local is None:
        raise StorageError(f"{action} works on a local root only: pyarrow cannot change {storage.uri(rel)} "
                           "(on HDFS: hdfs dfs -chmod / -chown; S3 has no file permissions)")
    return local


def _mode(mode: int | str) -> int:
    if isinstance(mode, int):
        return mode
    try:
        return int(str(mode).removeprefix("0o"), 8)
    except ValueError:
        raise ValueError(f"mode must be an int or octal digits such as '755', not {mode!r}") from None


def chmod(hdfs_path: str, mode: int | str, project: str | None = None) -> None:
    """Set a file's or folder's permission bits (0o755 or '755') under a local root."""
    storage, rel = _resolve(hdfs_path, project)
    _require(storage, rel, hdfs_path)
    os.chmod(_local_only("chmod", storage, rel), _mode(mode))


def chown(hdfs_path: str, user: str | None, group: str | None, project: str | None = None) -> None:
    """Change a file's or folder's owner and group (None keeps one) under a local root."""
    storage, rel = _resolve(hdfs_path, project)
    _require(storage, rel, hdfs_path)
    local = _local_only("chown", storage, rel)
    if user and group:
        shutil.chown(local, user, group)
    elif user:
        shutil.chown(local, user=user)
    elif group:
        shutil.chown(local, group=group)
    else:
        raise ValueError("chown needs a user or a group")


def access(hdfs_path: str, mode: int, project: str | None = None) -> bool:
    """os.access for a project path (os.R_OK, W_OK, X_OK, F_OK); under HDFS or S3, whether it exists."""
    storage, rel = _resolve(hdfs_path, project)
    local = storage.local_path(rel)
    return os.access(local, mode) if local is not None else storage.exists(rel)
