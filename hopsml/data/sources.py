"""Where a data job reads from: a local path as it is given, else any path form `hdfs` reads in the project
(a project-relative path, /Projects/<p>/..., hdfs:///..., what hdfs.project_path() and abs_path() return), as
the root's own URI, so a hops notebook's `prepare_table("Resources/iris.csv", ...)` reads the project's file."""

from __future__ import annotations

import os

from hopsml import config, hdfs
from hopsml.fs import Storage


def resolve_source(src: str, settings: config.Settings) -> str:
    """`src` unchanged when it is a local path that exists or a URI outside the root; else the URI of the
    project path it names, when that exists (a path that names nothing is left for the job to refuse).

    >>> import tempfile; root = tempfile.mkdtemp()
    >>> settings = config.load(environ={}, root=root, project="p")
    >>> os.makedirs(root + "/Projects/p/Resources"); open(root + "/Projects/p/Resources/a.csv", "w").close()
    >>> resolve_source("Resources/a.csv", settings) == root + "/Projects/p/Resources/a.csv"
    True
    >>> resolve_source("hdfs:///Projects/p/Resources/a.csv", settings) == root + "/Projects/p/Resources/a.csv"
    True
    """
    if not isinstance(src, str) or not src.strip():
        return src
    if "://" not in src and os.path.exists(os.path.expanduser(src.removeprefix("file:"))):
        return src
    storage = Storage(settings.root)
    try:
        rel = hdfs.root_relative(src, storage, settings.project)
    except hdfs.InvalidPathError:
        return src
    return storage.uri(rel) if rel and storage.exists(rel) else src
