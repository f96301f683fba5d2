"""Where a data job reads from: a local path as it is given, else any path form `hdfs` reads in the project
(a project-relative path, /Projects/<p>/..., hdfs:///..., what hdfs.project_path() and abs_path() return), as
the root's own URI, so a hops notebook's `prepare_table("Resources/iris.csv", ...)` reads the project's file."""

from __future__ import annotations

import os
from urllib.parse import urlsplit, urlunsplit

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
    if "://" in src:   # a URI names its place (and carries its options); only the Hopsworks namespace does not
        if not src.lower().startswith(("hdfs:///", "hopsfs:///")):
            return src
    elif os.path.exists(os.path.expanduser(src.removeprefix("file:"))):
        return src
    storage = Storage(settings.root)
    try:
        rel = hdfs.root_relative(src, storage, settings.project)
    except hdfs.InvalidPathError:
        return src
    if not rel or not storage.exists(rel):
        return src
    local = storage.local_path(rel)
    if local is not None:
        return local
    root = urlsplit(settings.root)   # the root's own URI, its endpoint and credentials options kept
    return urlunsplit((root.scheme, root.netloc, root.path.rstrip("/") + "/" + rel, root.query, root.fragment))
