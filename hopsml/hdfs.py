"""The few file helpers a notebook user needs, relative to the project (hops-compatible names).

Paths are relative to the project directory unless they start with 'Projects/'.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import IO, Iterator

from hopsml import config, layout
from hopsml.fs import Storage


def _storage() -> tuple[Storage, str]:
    settings = config.load()
    return Storage(settings.root), layout.project_dir(settings.project)


def _rel(path: str, project_dir: str) -> str:
    path = path.strip("/")
    if path.startswith(layout.PROJECTS + "/") or not path:
        return path or project_dir
    return layout.join(project_dir, path)


def project_path(project: str | None = None) -> str:
    """The project directory: a local path for local roots, else its URI."""
    settings = config.load(project=project)
    return Storage(settings.root).uri(layout.project_dir(settings.project))


def exists(path: str) -> bool:
    storage, project_dir = _storage()
    return storage.exists(_rel(path, project_dir))


def ls(path: str = "", recursive: bool = False) -> list[str]:
    """Paths below `path`, as URIs (local paths for local roots)."""
    storage, project_dir = _storage()
    return [storage.uri(p) for p in storage.ls(_rel(path, project_dir), recursive=recursive)]


@contextmanager
def open_file(path: str, mode: str = "rb") -> Iterator[IO[bytes]]:
    """A binary stream: 'rb', 'wb' (written aside, renamed on close) or 'ab'."""
    storage, project_dir = _storage()
    with storage.open(_rel(path, project_dir), mode) as stream:
        yield stream


def copy_to_hdfs(local_path: str, path: str) -> str:
    """Copy a local file or folder into the project; returns where it went."""
    storage, project_dir = _storage()
    rel = _rel(path, project_dir)
    storage.upload(local_path, rel)
    return storage.uri(rel)


def copy_to_local(path: str, local_path: str) -> str:
    """Copy a file or folder of the project to a local path; returns the local path."""
    storage, project_dir = _storage()
    return storage.download(_rel(path, project_dir), local_path)
