"""numpy's readers and writers on project paths, with the names of hops' `numpy_helper`.

Each takes a path in any form `hopsml.hdfs` accepts (``"Resources/x.npy"``, an absolute path inside
the root, ``hdfs:///Projects/<p>/...``) and passes every other argument to the numpy function of the
same name. Under a local root numpy reads the file itself (so ``memmap`` and ``mmap_mode`` map the
project's file); under HDFS or S3 it reads a private local copy that is removed afterwards, and a
memory map that would write back is refused, for nothing would carry the writes home.

Writers follow numpy's naming: ``save("Resources/x", a)`` writes ``Resources/x.npy``, ``savez``
``.npz``; the file is written aside and renamed into place, so a failed write leaves the old one.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from hopsml import hdfs
from hopsml.hdfs import InvalidPathError


@contextmanager
def _local_file(hdfs_filename: str) -> Iterator[str]:
    """A local path numpy can open: the file itself under a local root, else a copy removed on exit."""
    if hdfs.stat(hdfs_filename).kind == "directory":  # stat also says hops' way that a path is missing
        raise InvalidPathError(f"{hdfs_filename!r} is a folder; numpy reads files (hdfs.ls() lists it)")
    where = hdfs.abs_path(hdfs_filename)
    if "://" not in where:
        yield where
        return
    folder = tempfile.mkdtemp(prefix="hopsml-numpy-")
    try:
        yield hdfs.copy_to_local(hdfs_filename, folder, overwrite=True)
    finally:  # an open memory map or npz archive keeps the unlinked copy alive until it is closed
        shutil.rmtree(folder, ignore_errors=True)


def _read(reader: Callable[..., Any], hdfs_filename: str, args: tuple[Any, ...], kwds: dict[str, Any]) -> Any:
    with _local_file(hdfs_filename) as local:
        return reader(local, *args, **kwds)


def load(hdfs_filename: str, *args: object, **kwds: object) -> Any:
    """numpy.load: an array from .npy, an NpzFile from .npz (or a pickled object with allow_pickle)."""
    return _read(np.load, hdfs_filename, args, kwds)


def loadtxt(hdfs_filename: str, *args: object, **kwds: object) -> np.ndarray:
    """numpy.loadtxt: a text file whose rows all hold the same number of values."""
    return _read(np.loadtxt, hdfs_filename, args, kwds)


def genfromtxt(hdfs_filename: str, *args: object, **kwds: object) -> np.ndarray:
    """numpy.genfromtxt: a text file with missing values handled as `kwds` say."""
    return _read(np.genfromtxt, hdfs_filename, args, kwds)


def fromregex(hdfs_filename: str, *args: object, **kwds: object) -> np.ndarray:
    """numpy.fromregex (regexp, dtype): the groups a regular expression matches, as a structured array."""
    return _read(np.fromregex, hdfs_filename, args, kwds)


def fromfile(hdfs_filename: str, *args: object, **kwds: object) -> np.ndarray:
    """numpy.fromfile: raw binary (or text with sep=) data of a known dtype."""
    return _read(np.fromfile, hdfs_filename, args, kwds)


def memmap(hdfs_filename: str, *args: object, **kwds: object) -> np.memmap:
    """numpy.memmap of a project file: under a local root writes (mode 'r+') reach the file itself."""
    mode = kwds.get("mode", args[1] if len(args) > 1 else "r+")
    if mode not in ("r", "readonly", "c", "copyonwrite") and "://" in hdfs.abs_path(hdfs_filename):
        raise InvalidPathError(f"memmap mode {mode!r} would write to a copy of {hdfs.abs_path(hdfs_filename)}, "
                               "which is not under a local root; use mode='r' or 'c', or load(), change and save()")
    return _read(np.memmap, hdfs_filename, args, kwds)


def _write(hdfs_filename: str, suffix: str, writer: Callable[[Any], None]) -> None:
    name = hdfs_filename if str(hdfs_filename).endswith(suffix) else f"{hdfs_filename}{suffix}"
    with hdfs.open_file(name, mode="wb") as stream:
        writer(stream)


def save(hdfs_filename: str, data: ArrayLike) -> None:
    """numpy.save: one array to ``<hdfs_filename>.npy`` (the suffix is added when missing, as numpy does)."""
    _write(hdfs_filename, ".npy", lambda stream: np.save(stream, data))


def savez(hdfs_filename: str, *args: ArrayLike, **kwds: Any) -> None:
    """numpy.savez: several arrays (arr_0, ... or the keyword names) to an uncompressed ``.npz``."""
    _write(hdfs_filename, ".npz", lambda stream: np.savez(stream, *args, **kwds))


def savez_compressed(hdfs_filename: str, *args: ArrayLike, **kwds: Any) -> None:
    """numpy.savez_compressed: as savez, deflated."""
    _write(hdfs_filename, ".npz", lambda stream: np.savez_compressed(stream, *args, **kwds))


__all__ = ["fromfile", "fromregex", "genfromtxt", "load", "loadtxt", "memmap", "save", "savez",
           "savez_compressed"]
