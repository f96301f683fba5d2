"""Storage on pyarrow.fs: one root URI (local path, file://, hdfs://, s3://), paths relative to it.

Record files are written aside and then put in place the way the store allows without ever
deleting the old version first: one rename on local disks, the old version renamed aside on HDFS
(whose rename refuses an existing target), a server-side copy on S3. A reader never sees half a
file, and when putting it in place fails the error says where the new content was kept.
A `Storage` pickles as its URI and rebuilds its filesystem where it lands (an executor); what it
shows or records (`uri()`, its repr, error messages) carries no credentials.
On a local root a listing follows a symbolic link only when it stays inside the root, and lists
each real folder once: a link out of the root shows nothing, and a link loop ends.
"""

from __future__ import annotations

import errno
import json
import logging
import math
import os
import posixpath
import shutil
import stat as _stat
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from enum import Enum
from typing import IO, Any, TypeAlias
from urllib.parse import urlsplit

import pyarrow.fs as pafs

from hopsml.errors import NameTooLongError, StorageError
from hopsml.redact import redact_uri

log = logging.getLogger(__name__)

FileSystem: TypeAlias = pafs.FileSystem   # the filesystem a root is on (`Storage.fs`), for hops' hdfs.get_fs()

_CHUNK = 8 << 20
_OBJECT_STORES = frozenset({"s3", "gcs", "gs"})   # stores without folders or rename (by type name)
MAX_NAME_BYTES = 255   # longest file or folder name local filesystems and HDFS accept


class Kind(Enum):
    """What a path is."""

    FILE = "file"
    DIRECTORY = "directory"
    MISSING = "missing"


_KINDS = {pafs.FileType.NotFound: Kind.MISSING, pafs.FileType.Directory: Kind.DIRECTORY}


@dataclass(frozen=True)
class Entry:
    """What the storage knows of one path: the path inside the filesystem (`Storage.relative` makes it
    root-relative), what it is, its size (files) and its modification time. Storage's own type, so that no
    caller depends on the filesystem library below it."""

    path: str
    kind: Kind
    size: int | None = None
    mtime_ns: int | None = None

    @classmethod
    def of(cls, info: pafs.FileInfo) -> Entry:
        kind = _KINDS.get(info.type, Kind.FILE)
        mtime_ns = info.mtime_ns if kind is not Kind.MISSING else None
        return cls(info.path, kind, info.size if kind is Kind.FILE else None, mtime_ns)

    @property
    def exists(self) -> bool:
        return self.kind is not Kind.MISSING

    @property
    def is_file(self) -> bool:
        return self.kind is Kind.FILE

    @property
    def is_dir(self) -> bool:
        return self.kind is Kind.DIRECTORY

    @property
    def name(self) -> str:
        return posixpath.basename(self.path.rstrip("/"))

    @property
    def mtime(self) -> datetime | None:
        """The modification time (UTC), when the store tells it."""
        return datetime.fromtimestamp(self.mtime_ns / 1e9, timezone.utc) if self.mtime_ns is not None else None


def source_tree(uri: str) -> tuple[FileSystem, str, str]:
    """A tree outside the root (a folder of images to prepare): its filesystem, its path on it, and the prefix
    that spells a path on it as a URI without options ('file:' locally, 's3://', 'hdfs://host:port').

    >>> source_tree("/data/images")[1:]
    ('/data/images', 'file:')
    """
    if "://" not in uri:
        return pafs.LocalFileSystem(), uri, "file:"
    filesystem, base = pafs.FileSystem.from_uri(uri)
    parts = urlsplit(uri)
    host = parts.netloc.rsplit("@", 1)[-1]   # no user:password@ in the paths a dataset records
    authority = "" if base.lstrip("/").startswith(host) else host  # s3: bucket/key
    return filesystem, base.rstrip("/") or "/", f"{parts.scheme}://{authority}"


def is_local(filesystem: FileSystem) -> bool:
    """Whether `filesystem` is this machine's disk."""
    return isinstance(filesystem, pafs.LocalFileSystem)


def walk_tree(filesystem: FileSystem, base: str) -> list[Entry]:
    """Everything below `base` on `filesystem`, as the store lists it (for remote trees: a local one is walked
    without following links by its reader)."""
    return [Entry.of(info) for info in filesystem.get_file_info(pafs.FileSelector(base, recursive=True))]


def _store_kind(filesystem: pafs.FileSystem) -> str:
    """'local', 'hdfs', 's3', ... for a filesystem, also one wrapped in a PyFileSystem or fsspec."""
    kind = filesystem.type_name
    for prefix in ("py::", "fsspec+"):
        kind = kind[len(prefix):] if kind.startswith(prefix) else kind
    return kind


def _name_too_long(exc: OSError) -> bool:
    return exc.errno == errno.ENAMETOOLONG or f"[errno {errno.ENAMETOOLONG}]" in str(exc).lower()


def _json_ready(value: object) -> Any:
    """``value`` with NaN and infinities as the strings 'nan', 'inf' and '-inf' (float() reads them
    back): JSON has no such numbers, and a bare NaN makes a file other JSON readers reject."""
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, dict):
        return {key: _json_ready(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_ready(item) for item in value]
    return value


def _within(root: str, path: str) -> bool:
    """True when the real path `path` is the real folder `root` or below it."""
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def _split_root(root: str) -> tuple[pafs.FileSystem, str, bool]:
    """(filesystem, base path inside it, is_local) for a root URI or local path."""
    if "://" not in root:
        return pafs.LocalFileSystem(), os.path.abspath(os.path.expanduser(root)), True
    try:
        filesystem, base = pafs.FileSystem.from_uri(root)
    except (ValueError, OSError) as exc:  # pyarrow's ArrowInvalid is a ValueError
        shown = redact_uri(root)
        raise StorageError(f"cannot open root {shown!r}: {str(exc).replace(root, shown)}. Use a local path, "
                           "file:///path, hdfs://namenode:8020/path (needs Hadoop's libhdfs) or s3://bucket/path"
                           ) from exc
    return filesystem, base.rstrip("/") or "/", isinstance(filesystem, pafs.LocalFileSystem)


class Storage:
    """All reads and writes under one root; paths are '/'-separated and relative to the root."""

    def __init__(self, root: str) -> None:
        self.root = root
        self._fs: pafs.FileSystem | None = None
        self._base = ""
        self.is_local = "://" not in root or root.startswith("file://")

    def __reduce__(self) -> tuple[type[Storage], tuple[str]]:  # travel as the URI; the filesystem is rebuilt there
        return (Storage, (self.root,))

    def __repr__(self) -> str:
        return f"Storage({redact_uri(self.root)!r})"

    @property
    def fs(self) -> pafs.FileSystem:
        if self._fs is None:
            self._fs, self._base, self.is_local = _split_root(self.root)
        return self._fs

    def path(self, rel: str = "") -> str:
        """The path inside the filesystem for a root-relative path."""
        self.fs  # noqa: B018  (resolves the base)
        rel = rel.strip("/")
        for name in rel.split("/"):
            if len(name.encode("utf-8")) > MAX_NAME_BYTES:
                raise NameTooLongError(
                    f"name too long: {name[:40]}... is {len(name.encode('utf-8'))} bytes, and file and "
                    f"folder names may have at most {MAX_NAME_BYTES}; choose a shorter project, dataset "
                    "or file name")
        return posixpath.join(self._base, rel) if rel else self._base

    def uri(self, rel: str = "") -> str:
        """What to show or record: a local path for local roots, else the URI without query options
        and without credentials.

        >>> Storage("s3://bucket/root?region=eu-west-1").uri("Projects/p")
        's3://bucket/root/Projects/p'
        >>> Storage("hdfs://me:pw@nn:8020/user/me").uri("x")
        'hdfs://nn:8020/user/me/x'
        """
        if self.is_local or "://" not in self.root:
            return self.path(rel)
        parts = urlsplit(self.root)
        path = posixpath.join(parts.path, rel.strip("/")) if rel.strip("/") else parts.path
        return f"{parts.scheme}://{parts.netloc.rsplit('@', 1)[-1]}{path}".rstrip("/")

    def _shown(self, path: str) -> str:
        """The URI to show for a path inside the filesystem (as `path` returns them)."""
        base = self._base.rstrip("/")
        return self.uri(path[len(base):]) if path.startswith(base + "/") else path

    def _unreachable(self, action: str, rel: str, exc: OSError) -> StorageError | NameTooLongError:
        if _name_too_long(exc):
            return NameTooLongError(f"name too long: {action} {self.uri(rel)} failed because the path "
                                    f"is longer than the filesystem allows ({exc}); choose shorter names")
        return StorageError(f"{action} {self.uri(rel)}: {exc}")

    def local_path(self, rel: str = "") -> str | None:
        """The local path of a root-relative path, or None when the root is remote."""
        return self.path(rel) if self.is_local else None

    # --- queries -------------------------------------------------------------------------------
    def info(self, rel: str) -> Entry:
        try:
            return Entry.of(self.fs.get_file_info(self.path(rel)))
        except OSError as exc:
            raise self._unreachable("cannot reach", rel, exc) from exc

    def exists(self, rel: str) -> bool:
        return self.info(rel).exists

    def isdir(self, rel: str) -> bool:
        return self.info(rel).is_dir

    def relative(self, path: str) -> str:
        """The root-relative path of a path inside the filesystem (as `path` and `walk` give them).

        >>> Storage("/data/root").relative("/data/root/Projects/p")
        'Projects/p'
        """
        base = self.path().rstrip("/")
        if path.rstrip("/") == base:
            return ""
        if not path.startswith(base + "/"):
            raise StorageError(f"{path} is not inside the root {self.uri()}")
        return path[len(base) + 1:]

    def contains(self, rel: str) -> bool:
        """False when `rel` leads out of the root through a symbolic link (local roots; remote
        stores have no links), True otherwise, also when it does not exist."""
        local = self.local_path(rel)
        if local is None:
            return True
        root = os.path.realpath(self.path())
        return _within(root, os.path.realpath(local))

    def walk(self, rel: str = "", recursive: bool = True) -> list[Entry]:
        """What the folder `rel` holds (every level with `recursive`), sorted by path; empty when
        `rel` is not a folder. Paths are inside the filesystem (`relative` makes them root-relative).

        On a local root a symbolic link is followed only when it stays inside the root, a broken
        link is left out, and each real folder is listed once, so link loops end.
        """
        if self.local_path() is not None:
            return self._walk_local(rel, recursive)
        if not self.isdir(rel):
            return []
        selector = pafs.FileSelector(self.path(rel), recursive=recursive, allow_not_found=True)
        try:
            infos = self.fs.get_file_info(selector)
        except OSError as exc:
            raise StorageError(f"cannot list {self.uri(rel)}: {exc}") from exc
        return sorted((Entry.of(info) for info in infos), key=lambda entry: entry.path)

    def _walk_local(self, rel: str, recursive: bool) -> list[Entry]:
        """`walk` on a local root: real folders first, then folders reached through links, each
        real folder descended once (by its own path when it has one)."""
        root = os.path.realpath(self.path())
        start = self.path(rel)
        try:
            st = os.stat(start)
        except OSError:
            return []
        if not _stat.S_ISDIR(st.st_mode) or not _within(root, os.path.realpath(start)):
            return []
        seen: set[tuple[int, int]] = set()
        folders: list[tuple[str, tuple[int, int]]] = [(start, (st.st_dev, st.st_ino))]
        linked: list[tuple[str, tuple[int, int]]] = []
        out: list[Entry] = []
        while folders or linked:
            folder, key = folders.pop() if folders else linked.pop()
            if key in seen:
                continue
            seen.add(key)
            try:
                with os.scandir(folder) as entries:
                    found = list(entries)
            except OSError as exc:
                if folder == start:
                    raise StorageError(f"cannot list {self.uri(rel)}: {exc}") from exc
                log.warning("cannot list %s: %s", self._shown(folder), exc)
                continue
            for entry in found:
                path = posixpath.join(folder, entry.name)
                try:
                    is_link = entry.is_symlink()
                    if is_link and not _within(root, os.path.realpath(path)):
                        continue   # leads out of the root
                    st = os.stat(path)
                except OSError:
                    continue       # a broken link, or gone since the listing
                if _stat.S_ISDIR(st.st_mode):
                    out.append(Entry(path, Kind.DIRECTORY, mtime_ns=st.st_mtime_ns))
                    if recursive:
                        (linked if is_link else folders).append((path, (st.st_dev, st.st_ino)))
                elif _stat.S_ISREG(st.st_mode):
                    out.append(Entry(path, Kind.FILE, size=st.st_size, mtime_ns=st.st_mtime_ns))
        return sorted(out, key=lambda entry: entry.path)

    def ls(self, rel: str = "", recursive: bool = False) -> list[str]:
        """Root-relative paths below `rel`, sorted; empty when `rel` does not exist (see `walk`)."""
        return sorted(self.relative(info.path) for info in self.walk(rel, recursive))

    # --- reads ---------------------------------------------------------------------------------
    def read_bytes(self, rel: str) -> bytes:
        try:
            with self.fs.open_input_stream(self.path(rel), compression=None) as stream:
                return stream.read()
        except FileNotFoundError as exc:
            raise StorageError(f"{self.uri(rel)} does not exist") from exc
        except OSError as exc:
            raise StorageError(f"cannot read {self.uri(rel)}: {exc}") from exc

    def open_input(self, rel: str, *, seekable: bool = False) -> pafs.NativeFile:
        """A file to read `rel` from (use it in a with block): a stream, or a seekable file for
        Parquet and for reading a part of a file. The bytes as stored: pyarrow would otherwise inflate a
        `.gz` file on the way (a TFRecord shard that inflates itself, an archive to checksum)."""
        path = self.path(rel)
        try:
            return (self.fs.open_input_file(path) if seekable
                    else self.fs.open_input_stream(path, compression=None))
        except FileNotFoundError as exc:
            raise StorageError(f"{self.uri(rel)} does not exist") from exc
        except OSError as exc:
            raise StorageError(f"cannot read {self.uri(rel)}: {exc}") from exc

    def read_text(self, rel: str) -> str:
        return self.read_bytes(rel).decode("utf-8")

    def read_json(self, rel: str) -> Any:
        return json.loads(self.read_bytes(rel))

    @contextmanager
    def open(self, rel: str, mode: str = "rb") -> Iterator[IO[bytes]]:
        """A binary stream: 'rb', 'wb' (written aside, renamed on success) or 'ab'."""
        if mode == "rb":
            with self.fs.open_input_file(self.path(rel)) as stream:
                yield stream
        elif mode == "wb":
            with self._atomic(rel) as stream:
                yield stream
        elif mode == "ab":
            self.makedirs(posixpath.dirname(rel))
            with self.fs.open_append_stream(self.path(rel)) as stream:
                yield stream
        else:
            raise ValueError(f"mode must be 'rb', 'wb' or 'ab', not {mode!r}")

    # --- writes --------------------------------------------------------------------------------
    def makedirs(self, rel: str) -> None:
        try:
            self.fs.create_dir(self.path(rel), recursive=True)
        except OSError as exc:
            if _name_too_long(exc):
                raise self._unreachable("creating", rel, exc) from exc
            if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                raise self._write_error(rel, exc) from exc
            raise StorageError(f"cannot create {self.uri(rel)}: {exc}. Check that the root "
                               f"{self.uri()!r} exists and is writable, or set HOPSML_ROOT") from exc

    @contextmanager
    def _atomic(self, rel: str) -> Iterator[IO[bytes]]:
        final = self.path(rel)
        parent, name = posixpath.split(final)
        tmp = posixpath.join(parent, f".{name}.tmp-{uuid.uuid4().hex}")
        self.makedirs(posixpath.dirname(rel))
        try:
            with self.fs.open_output_stream(tmp) as stream:
                yield stream
        except BaseException:
            try:  # the new content is incomplete; the old file was not touched
                self.fs.delete_file(tmp)
            except OSError:
                pass
            raise
        self._replace(tmp, final)  # from here on the new content is complete: never deleted

    @contextmanager
    def aside(self, rel: str) -> Iterator[str]:
        """A local path beside `rel` (a local root) for a writer that wants a path, not a stream (Parquet's,
        TFRecord's): the file written there is put in place of `rel` by one rename when the block completes,
        and removed when it fails, so a reader never sees half a file."""
        local = self.local_path(rel)
        if local is None:
            raise StorageError(f"{self.uri(rel)} is not on a local disk: write it with open(rel, 'wb')")
        os.makedirs(os.path.dirname(local), exist_ok=True)
        tmp = os.path.join(os.path.dirname(local), f".{os.path.basename(local)}.tmp-{uuid.uuid4().hex}")
        try:
            yield tmp
            os.replace(tmp, local)
        finally:
            if os.path.exists(tmp):
                os.remove(tmp)

    def _replace(self, tmp: str, final: str) -> None:
        """Put the complete file `tmp` in place of `final`, never deleting `final` first."""
        kind = _store_kind(self.fs)
        if kind in _OBJECT_STORES:
            self._replace_by_copy(tmp, final)
        elif kind == "local":
            try:
                self.fs.move(tmp, final)  # rename(2): atomic, replaces final
            except OSError as exc:
                raise self._not_replaced(tmp, final, exc) from exc
        else:
            self._replace_aside(tmp, final)

    def _replace_by_copy(self, tmp: str, final: str) -> None:
        """Object stores: a server-side copy replaces the object at once; then drop the temporary one."""
        try:
            self.fs.copy_file(tmp, final)
        except OSError as exc:
            raise self._not_replaced(tmp, final, exc) from exc
        try:
            self.fs.delete_file(tmp)
        except OSError as exc:
            log.warning("could not remove the temporary copy %s: %s", self._shown(tmp), exc)

    def _replace_aside(self, tmp: str, final: str) -> None:
        """HDFS and stores like it, whose rename refuses an existing target: rename the old version
        aside, rename the new one in (moving the old one back if that fails), then delete the old."""
        parent, name = posixpath.split(final)
        old: str | None = posixpath.join(parent, f".{name}.old-{uuid.uuid4().hex}")
        try:
            if self.fs.get_file_info(final).type == pafs.FileType.NotFound:
                old = None
            else:
                self.fs.move(final, old)
        except OSError as exc:
            raise self._not_replaced(tmp, final, exc) from exc
        try:
            self.fs.move(tmp, final)
        except OSError as exc:
            if old is not None:
                try:
                    self.fs.move(old, final)
                except OSError as back:
                    raise StorageError(
                        f"cannot put the new version of {self._shown(final)} in place ({exc}) nor move the "
                        f"previous one back ({back}): the previous content is in {self._shown(old)} and the "
                        f"new content is kept in {self._shown(tmp)}; rename one of them to "
                        f"{self._shown(final)}") from exc
            raise self._not_replaced(tmp, final, exc) from exc
        if old is not None:
            try:
                self.fs.delete_file(old)
            except OSError as exc:
                log.warning("could not remove the previous version of %s at %s: %s",
                            self._shown(final), self._shown(old), exc)

    def _not_replaced(self, tmp: str, final: str, exc: OSError) -> StorageError:
        return StorageError(f"cannot put the new version of {self._shown(final)} in place: {exc}. The "
                            f"previous version is unchanged, and the new content is kept in "
                            f"{self._shown(tmp)}; check the store, then rename it into place or rerun")

    def write_bytes(self, rel: str, data: bytes) -> None:
        """Write a whole file atomically (aside, then renamed into place)."""
        try:
            with self._atomic(rel) as stream:
                stream.write(data)
        except StorageError:
            raise
        except OSError as exc:
            raise self._write_error(rel, exc, len(data)) from exc

    def _write_error(self, rel: str, exc: OSError, size: int | None = None) -> StorageError:
        """The error of a failed write: for a full disk (or quota) one sentence naming the file, its folder, the
        space free there and the bytes the write needed, and what to do."""
        if exc.errno not in (errno.ENOSPC, errno.EDQUOT) and "No space left on device" not in str(exc):
            return StorageError(f"cannot write {self.uri(rel)}: {exc}")
        folder = posixpath.dirname(rel)
        local = self.local_path(folder)
        free = ""
        if local is not None:
            try:
                free = f" ({_mib(shutil.disk_usage(local).free)} free there)"
            except OSError:
                pass
        needed = f"; the write needed {_mib(size)}" if size is not None else ""
        return StorageError(f"no space left on the disk of {self.uri(folder)}{free} to write "
                            f"{posixpath.basename(rel)}{needed}: free some space there, or move the root "
                            "(HOPSML_ROOT) to a disk with room")

    def write_text(self, rel: str, text: str) -> None:
        self.write_bytes(rel, text.encode("utf-8"))

    def write_json(self, rel: str, obj: object) -> None:
        """Write JSON atomically; NaN and infinities become the strings 'nan', 'inf', '-inf'."""
        text = json.dumps(_json_ready(obj), indent=2, sort_keys=False, default=str, allow_nan=False)
        self.write_bytes(rel, (text + "\n").encode())

    def overwrite_bytes(self, rel: str, data: bytes) -> None:
        """Write a small file over its old version directly, not aside: for a file rewritten every
        few seconds (a heartbeat) whose readers tolerate a torn read."""
        try:
            with self.fs.open_output_stream(self.path(rel)) as stream:
                stream.write(data)
        except OSError as exc:
            raise self._write_error(rel, exc, len(data)) from exc

    def append_text(self, rel: str, text: str) -> None:
        """Append to a file (metrics): local and HDFS append in place; S3 cannot and rewrites."""
        try:
            with self.open(rel, "ab") as stream:
                stream.write(text.encode("utf-8"))
        except (OSError, NotImplementedError):
            old = self.read_bytes(rel) if self.exists(rel) else b""
            self.write_bytes(rel, old + text.encode("utf-8"))

    def claim_dir(self, rel: str) -> bool:
        """Create a directory only if it does not exist yet; True if this call created it.

        Exclusive on local disks (mkdir(2)); on remote stores a check-then-create, which is
        enough there because application ids are unique per cluster.
        """
        self.makedirs(posixpath.dirname(rel))
        if self.is_local:
            try:
                os.mkdir(self.path(rel))
                return True
            except FileExistsError:
                return False
        if self.exists(rel):
            return False
        self.makedirs(rel)
        return True

    def upload(self, local: str, rel: str) -> None:
        """Copy a local file or folder into the root."""
        if os.path.isdir(local):
            for dirpath, _, files in os.walk(local):
                sub = os.path.relpath(dirpath, local)
                for name in files:
                    target = posixpath.join(rel, *([] if sub == "." else sub.split(os.sep)), name)
                    self.upload(os.path.join(dirpath, name), target)
            return
        if not os.path.isfile(local):
            raise StorageError(f"cannot copy {local!r}: no such local file or folder")
        with open(local, "rb") as src, self._atomic(rel) as dst:
            while chunk := src.read(_CHUNK):
                dst.write(chunk)

    def download(self, rel: str, local: str) -> str:
        """Copy a file or folder from the root to a local path; returns the local path."""
        if self.isdir(rel):
            for child in self.ls(rel, recursive=True):
                if not self.isdir(child):
                    self.download(child, os.path.join(local, *posixpath.relpath(child, rel).split("/")))
            return local
        os.makedirs(os.path.dirname(os.path.abspath(local)), exist_ok=True)
        with self.open_input(rel) as src, open(local, "wb") as dst:
            shutil.copyfileobj(src, dst, _CHUNK)
        return local

    def copy_tree(self, src: str, dst: str) -> None:
        """Copy the file `src`, or the folder `src` with all it holds (`walk`'s view of it), to `dst`;
        on the server where the store can (HDFS, S3). Existing files at `dst` are replaced."""
        info = self.info(src)
        try:
            if info.is_file:
                self.makedirs(posixpath.dirname(dst.strip("/")))
                self.fs.copy_file(self.path(src), self.path(dst))
                return
            if not info.is_dir:
                raise StorageError(f"cannot copy {self.uri(src)}: it does not exist")
            self.makedirs(dst)
            for child in self.walk(src, recursive=True):
                target = posixpath.join(dst.strip("/"), child.path[len(self.path(src)) + 1:])
                if child.is_dir:
                    self.makedirs(target)
                else:
                    self.fs.copy_file(child.path, self.path(target))
        except StorageError:
            raise
        except OSError as exc:
            raise StorageError(f"cannot copy {self.uri(src)} to {self.uri(dst)}: {exc}") from exc

    def move(self, src: str, dst: str) -> None:
        """Move the file or folder `src` to `dst` (which must not exist); folders as `move_dir`."""
        if self.isdir(src):
            self.move_dir(src, dst)
            return
        self.makedirs(posixpath.dirname(dst.strip("/")))
        try:
            self.fs.move(self.path(src), self.path(dst))
        except OSError as exc:
            raise StorageError(f"cannot move {self.uri(src)} to {self.uri(dst)}: {exc}") from exc

    def move_dir(self, src: str, dst: str) -> None:
        """Move the folder ``src`` to ``dst`` (which must not exist): one rename where the store has
        folders (local disks, HDFS); object stores (S3, GCS) have only keys, so there every file is
        copied on the server and the source deleted, which is not atomic: write a marker file last."""
        src_path, dst_path = self.path(src), self.path(dst)
        if _store_kind(self.fs) not in _OBJECT_STORES:
            parent = posixpath.dirname(dst.strip("/"))
            if parent:
                self.makedirs(parent)
            self.fs.move(src_path, dst_path)
            return
        for info in self.fs.get_file_info(pafs.FileSelector(src_path, recursive=True)):
            if info.type == pafs.FileType.File:
                self.fs.copy_file(info.path, dst_path + info.path[len(src_path):])
        self.fs.delete_dir(src_path)

    def delete(self, rel: str) -> None:
        if self.isdir(rel):
            self.fs.delete_dir(self.path(rel))
        elif self.exists(rel):
            self.fs.delete_file(self.path(rel))


def _mib(size: int | None) -> str:
    """A size as a person reads it.

    >>> _mib(512), _mib(3 << 20)
    ('512 bytes', '3.0 MiB')
    """
    if size is None:
        return "an unknown size"
    return f"{size} bytes" if size < 1 << 20 else f"{size / (1 << 20):.1f} MiB"
