"""hopsworks' dataset API (`project.get_dataset_api()`) over the project's folder: upload, download, exists, mkdir,
remove, copy, move and list_files, with the paths hopsworks takes ('Resources/x', '/Projects/<project>/Resources/x',
or any path form hopsml.hdfs takes), on whatever root the project is on (a local folder, HDFS, S3).

    dataset_api = project.get_dataset_api()
    path = dataset_api.upload("features", "Resources", overwrite=True)   # -> 'Resources/features'
    dataset_api.download("Resources/model.json", "local/", overwrite=True)

As on hopsworks, an upload or a copy onto a path that exists is refused unless `overwrite=True`, and so is a download
onto a local file that exists; a missing path is refused by name (hopsworks answers a REST error).
"""

from __future__ import annotations

import datetime as dt
import os
import posixpath
import shutil
from dataclasses import dataclass

from hopsml import config, hdfs, layout
from hopsml.fs import Storage


class DatasetError(hdfs.PathExistsError):
    """A dataset API call refused: the path it would write exists (overwrite=True replaces it)."""


@dataclass(frozen=True)
class Inode:
    """One entry of `list_files`, under hopsworks' names."""

    name: str
    path: str              # as hopsworks gives it: /Projects/<project>/...
    size: int | None
    dir: bool
    modification_time: dt.datetime | None


class DatasetApi:
    """The project's files under hopsworks' dataset API names."""

    def __init__(self, settings: config.Settings) -> None:
        self._settings = settings
        self._storage = Storage(settings.root)

    def __repr__(self) -> str:
        return f"DatasetApi({self._settings.project!r})"

    def _rel(self, path: str) -> str:
        return hdfs.root_relative(path, self._storage, self._settings.project)

    def _absent(self, path: str) -> hdfs.PathNotFoundError:
        return hdfs.PathNotFoundError(f"{path!r} does not exist in project {self._settings.project!r} "
                                      f"({self._storage.uri(self._rel(path))})")

    def exists(self, path: str) -> bool:
        """Whether the project path `path` exists."""
        return self._storage.exists(self._rel(path))

    def mkdir(self, path: str) -> str:
        """Create the folder `path` (and its parents); returns `path`."""
        self._storage.makedirs(self._rel(path))
        return path

    def remove(self, path: str) -> None:
        """Remove the file or folder `path` (a folder with all it holds)."""
        if not self.exists(path):
            raise self._absent(path)
        rel = self._rel(path)
        if rel in ("", layout.project_dir(self._settings.project)):
            raise DatasetError(f"{path!r} is the project's own folder; remove what is in it instead")
        self._storage.delete(rel)

    def upload(self, local_path: str, upload_path: str, overwrite: bool = False, chunk_size: int = 10 * 1024 ** 2,
               simultaneous_uploads: int = 3, simultaneous_chunks: int = 3, max_chunk_retries: int = 1,
               chunk_retry_interval: int = 1) -> str:
        """Copy the local file or folder `local_path` into the folder `upload_path`; returns the path it has there
        ('<upload_path>/<name>'). The chunk and retry arguments are hopsworks' upload protocol's, unused here."""
        local = os.path.abspath(os.path.expanduser(local_path))
        if not os.path.exists(local):
            raise hdfs.PathNotFoundError(f"cannot upload {local_path!r}: no such local file or folder")
        destination = upload_path.rstrip("/") + "/" + os.path.basename(local.rstrip(os.sep))
        rel = self._rel(destination)
        if self._storage.exists(rel):
            if not overwrite:
                raise DatasetError(f"{destination} already exists, set overwrite=True to overwrite it")
            self._storage.delete(rel)
        self._storage.makedirs(rel if os.path.isdir(local) else posixpath.dirname(rel))
        self._storage.upload(local, rel)
        return destination

    def download(self, path: str, local_path: str | None = None, overwrite: bool = False,
                 chunk_size: int = 1024 ** 2) -> str:
        """Copy the file or folder `path` to `local_path` (default: the working folder; into it when it is a
        folder); returns the local path."""
        if not self.exists(path):
            raise self._absent(path)
        target = os.path.abspath(os.path.expanduser(local_path or os.getcwd()))
        if os.path.isdir(target):
            target = os.path.join(target, posixpath.basename(path.rstrip("/")))
        if os.path.exists(target):
            if not overwrite:
                raise DatasetError(f"{target} already exists, set overwrite=True to overwrite it")
            if os.path.isdir(target):
                shutil.rmtree(target)
            else:
                os.remove(target)
        return self._storage.download(self._rel(path), target)

    def copy(self, source_path: str, destination_path: str, overwrite: bool = False) -> None:
        """Copy the file or folder `source_path` to `destination_path`."""
        self._onto(source_path, destination_path, overwrite)
        self._storage.copy_tree(self._rel(source_path), self._rel(destination_path))

    def move(self, source_path: str, destination_path: str, overwrite: bool = False) -> None:
        """Move the file or folder `source_path` to `destination_path`."""
        self._onto(source_path, destination_path, overwrite)
        self._storage.move(self._rel(source_path), self._rel(destination_path))

    def _onto(self, source_path: str, destination_path: str, overwrite: bool) -> None:
        if not self.exists(source_path):
            raise self._absent(source_path)
        if self.exists(destination_path):
            if not overwrite:
                raise DatasetError(f"{destination_path} already exists, set overwrite=True to overwrite it")
            self._storage.delete(self._rel(destination_path))

    def list_files(self, path: str, offset: int, limit: int) -> tuple[int, list[Inode]]:
        """(how many entries the folder `path` has, `limit` of them from `offset` on, by name)."""
        if not self.exists(path):
            raise self._absent(path)
        entries = sorted(self._storage.walk(self._rel(path), recursive=False), key=lambda e: e.name)
        chosen = entries[int(offset):int(offset) + int(limit)]
        rel = self._rel(path)
        return len(entries), [Inode(e.name, "/" + posixpath.join(rel, e.name), None if e.is_dir else e.size,
                                    e.is_dir, e.mtime) for e in chosen]
