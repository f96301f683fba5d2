"""Storage on pyarrow.fs: one root URI (local path, file://, hdfs://, s3://), paths relative to it.

Record files are written aside and renamed into place, so a reader never sees half a file.
A `Storage` pickles as its URI and rebuilds its filesystem where it lands (an executor).
"""

from __future__ import annotations

import json
import os
import posixpath
import shutil
import uuid
from contextlib import contextmanager
from typing import IO, Any, Iterator
from urllib.parse import urlsplit

import pyarrow.fs as pafs

from hopsml.errors import StorageError

_CHUNK = 8 << 20
_OBJECT_STORES = frozenset({"s3", "gcs"})   # pyarrow FileSystem.type_name of stores without folders


def _split_root(root: str) -> tuple[pafs.FileSystem, str, bool]:
    """(filesystem, base path inside it, is_local) for a root URI or local path."""
    if "://" not in root:
        return pafs.LocalFileSystem(), os.path.abspath(os.path.expanduser(root)), True
    try:
        filesystem, base = pafs.FileSystem.from_uri(root)
    except (ValueError, OSError) as exc:  # pyarrow's ArrowInvalid is a ValueError
        raise StorageError(f"cannot open root {root!r}: {exc}. Use a local path, file:///path, "
                           "hdfs://namenode:8020/path (needs Hadoop's libhdfs) or s3://bucket/path") from exc
    return filesystem, base.rstrip("/") or "/", isinstance(filesystem, pafs.LocalFileSystem)


class Storage:
    """All reads and writes under one root; paths are '/'-separated and relative to the root."""

    def __init__(self, root: str) -> None:
        self.root = root
        self._fs: pafs.FileSystem | None = None
        self._base = ""
        self.is_local = "://" not in root or root.startswith("file://")

    def __reduce__(self):  # travel as the URI; the filesystem is rebuilt on the other side
        return (Storage, (self.root,))

    def __repr__(self) -> str:
        return f"Storage({self.root!r})"

    @property
    def fs(self) -> pafs.FileSystem:
        if self._fs is None:
            self._fs, self._base, self.is_local = _split_root(self.root)
        return self._fs

    def path(self, rel: str = "") -> str:
        """The path inside the filesystem for a root-relative path."""
        self.fs  # noqa: B018  (resolves the base)
        rel = rel.strip("/")
        return posixpath.join(self._base, rel) if rel else self._base

    def uri(self, rel: str = "") -> str:
        """What to show a user: a local path for local roots, else the URI (without query options).

        >>> Storage("s3://bucket/root?region=eu-west-1").uri("Projects/p")
        's3://bucket/root/Projects/p'
        >>> Storage("hdfs://nn:8020/user/me").uri("x")
        'hdfs://nn:8020/user/me/x'
        """
        if self.is_local:
            return self.path(rel)
        parts = urlsplit(self.root)
        path = posixpath.join(parts.path, rel.strip("/")) if rel.strip("/") else parts.path
        return f"{parts.scheme}://{parts.netloc}{path}".rstrip("/")

    def local_path(self, rel: str = "") -> str | None:
        """The local path of a root-relative path, or None when the root is remote."""
        return self.path(rel) if self.is_local else None

    # --- queries -------------------------------------------------------------------------------
    def info(self, rel: str) -> pafs.FileInfo:
        try:
            return self.fs.get_file_info(self.path(rel))
        except OSError as exc:
            raise StorageError(f"cannot reach {self.uri(rel)}: {exc}") from exc

    def exists(self, rel: str) -> bool:
        return self.info(rel).type != pafs.FileType.NotFound

    def isdir(self, rel: str) -> bool:
        return self.info(rel).type == pafs.FileType.Directory

    def ls(self, rel: str = "", recursive: bool = False) -> list[str]:
        """Root-relative paths below `rel`, sorted; empty when `rel` does not exist."""
        if not self.isdir(rel):
            return []
        selector = pafs.FileSelector(self.path(rel), recursive=recursive, allow_not_found=True)
        base = self.path()
        try:
            infos = self.fs.get_file_info(selector)
        except OSError as exc:
            raise StorageError(f"cannot list {self.uri(rel)}: {exc}") from exc
        return sorted(posixpath.relpath(info.path, base) for info in infos)

    # --- reads ---------------------------------------------------------------------------------
    def read_bytes(self, rel: str) -> bytes:
        try:
            with self.fs.open_input_stream(self.path(rel)) as stream:
                return stream.read()
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
            raise StorageError(f"cannot create {self.uri(rel)}: {exc}. Check that the root "
                               f"{self.root!r} exists and is writable, or set HOPSML_ROOT") from exc

    @contextmanager
    def _atomic(self, rel: str) -> Iterator[IO[bytes]]:
        final = self.path(rel)
        parent, name = posixpath.split(final)
        tmp = posixpath.join(parent, f".{name}.tmp-{uuid.uuid4().hex}")
        self.makedirs(posixpath.dirname(rel))
        try:
            with self.fs.open_output_stream(tmp) as stream:
                yield stream
            self._replace(tmp, final)
        except BaseException:
            try:
                self.fs.delete_file(tmp)
            except OSError:
                pass
            raise

    def _replace(self, src: str, dst: str) -> None:
        try:
            self.fs.move(src, dst)  # rename(2) on local disks: atomic, replaces dst
        except OSError:
            # HDFS refuses to rename onto an existing file: remove it, then rename.
            self.fs.delete_file(dst)
            self.fs.move(src, dst)

    def write_bytes(self, rel: str, data: bytes) -> None:
        """Write a whole file atomically (aside, then renamed into place)."""
        try:
            with self._atomic(rel) as stream:
                stream.write(data)
        except StorageError:
            raise
        except OSError as exc:
            raise StorageError(f"cannot write {self.uri(rel)}: {exc}") from exc

    def write_text(self, rel: str, text: str) -> None:
        self.write_bytes(rel, text.encode("utf-8"))

    def write_json(self, rel: str, obj: Any) -> None:
        self.write_bytes(rel, (json.dumps(obj, indent=2, sort_keys=False, default=str) + "\n").encode())

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
        with self.fs.open_input_stream(self.path(rel)) as src, open(local, "wb") as dst:
            shutil.copyfileobj(src, dst, _CHUNK)
        return local

    def move_dir(self, src: str, dst: str) -> None:
        """Move the folder ``src`` to ``dst`` (which must not exist): one rename where the store has
        folders (local disks, HDFS); object stores (S3, GCS) have only keys, so there every file is
        copied on the server and the source deleted, which is not atomic: write a marker file last."""
        src_path, dst_path = self.path(src), self.path(dst)
        if self.fs.type_name not in _OBJECT_STORES:
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
