"""Listing a source tree as Spark's binaryFile source would (glob, hidden files skipped; on a local disk no link
followed and each file once), and dealing the paths into partitions."""

from __future__ import annotations

import fnmatch
import os
import posixpath
import re
import stat
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from hopsml import fs
from hopsml.data import dataset as ds
from hopsml.data.images.options import DEFAULT_GLOB, HARD_LINK, LINK_BROKEN, LINK_INSIDE, LINK_OUTSIDE
from hopsml.redact import redact_uri

if TYPE_CHECKING:
    pass


def source_uri(src: str) -> str:
    """A path or URI Spark reads: local paths become absolute."""
    if "://" in src or src.startswith("file:"):
        return src
    return posixpath.abspath(posixpath.expanduser(src))


def source_base(src: str) -> str:
    """The source folder as a path without scheme, the prefix that :func:`relative_key` strips."""
    uri = source_uri(src)
    return urlsplit(uri).path if ":" in uri.split("/", 1)[0] else uri


def source_filesystem(src: str) -> tuple[Any, str, str]:
    """The filesystem of a source tree, the tree's path on it, and the prefix that spells a path
    on it as a URI without options: 'file:' locally, 's3://', 'hdfs://host:port'."""
    return fs.source_tree(source_uri(src))


def _expand_braces(pattern: str) -> list[str]:
    """Hadoop glob alternatives: 'a.{png,jpg}' -> ['a.png', 'a.jpg'] (nested braces too)."""
    match = re.search(r"\{([^{}]*)\}", pattern)
    if not match:
        return [pattern]
    head, tail = pattern[:match.start()], pattern[match.end():]
    return [out for alt in match.group(1).split(",") for out in _expand_braces(head + alt + tail)]


@dataclass
class ImageListing:
    """The files an image job reads, as (path, size), and what it skipped, as reason -> count:
    symbolic links (never followed), hard links to a listed file, files of other extensions
    ('extension .tif'). Hidden files and folders (names starting with '.' or '_') are skipped
    silently, as Spark does."""

    files: list[tuple[str, int]] = field(default_factory=list)
    skipped: dict[str, int] = field(default_factory=dict)
    links: list[str] = field(default_factory=list)   # the symlinks not followed, for the log


def _extension_reason(name: str) -> str:
    ext = posixpath.splitext(name)[1].lower()
    return f"extension {ext}" if ext else "no extension"


def _matches(name: str, patterns: list[str]) -> bool:
    return any(fnmatch.fnmatchcase(name, pattern) for pattern in patterns)


def _scan_local(base: str, patterns: list[str], src: str) -> ImageListing:
    """Walk a local tree without following any symbolic link, listing each real file once."""
    listing, skipped, seen = ImageListing(), Counter[str](), set()
    root_real = os.path.realpath(base)

    def skip_link(path: str) -> None:
        target = os.path.realpath(path)
        if not os.path.exists(target):
            skipped[LINK_BROKEN] += 1
        elif os.path.commonpath([target, root_real]) == root_real:
            skipped[LINK_INSIDE] += 1
        else:
            skipped[LINK_OUTSIDE] += 1
        listing.links.append(path)

    def failed(error: OSError) -> None:
        raise ds.DatasetError(f"cannot list {redact_uri(src)!r}: {error}; give a readable folder of label folders")

    for dirpath, dirnames, filenames in os.walk(base, onerror=failed, followlinks=False):
        kept = []
        for name in sorted(dirnames):
            if name.startswith((".", "_")):   # Spark skips hidden folders too
                continue
            if os.path.islink(os.path.join(dirpath, name)):
                skip_link(os.path.join(dirpath, name))
            else:
                kept.append(name)
        dirnames[:] = kept
        for name in sorted(filenames):
            path = os.path.join(dirpath, name)
            if name.startswith((".", "_")):
                continue
            if os.path.islink(path):
                skip_link(path)
                continue
            if not _matches(name, patterns):
                skipped[_extension_reason(name)] += 1
                continue
            info = os.lstat(path)
            if not stat.S_ISREG(info.st_mode):
                continue
            if info.st_nlink > 1:
                if (info.st_dev, info.st_ino) in seen:
                    skipped[HARD_LINK] += 1
                    continue
                seen.add((info.st_dev, info.st_ino))
            listing.files.append(("file:" + path, int(info.st_size)))
    listing.files.sort()
    listing.skipped = dict(sorted(skipped.items()))
    return listing


def scan_images(src: str, glob: str = DEFAULT_GLOB) -> ImageListing:
    """The files under ``src`` that Spark's binaryFile source would read (and the empty ones it
    would skip), with paths spelled as Spark spells them (``file:/...`` locally), and what was
    skipped. On a local disk no symbolic link is followed, so a link loop or a link out of the
    tree adds nothing, and a file with several names is listed once."""
    try:
        filesystem, base, prefix = source_filesystem(src)
    except (OSError, ValueError) as exc:
        raise ds.DatasetError(f"cannot open {redact_uri(src)!r}: {exc}") from exc
    patterns = _expand_braces(glob)
    if fs.is_local(filesystem):
        if not os.path.isdir(base):
            raise ds.DatasetError(f"cannot list {redact_uri(src)!r}: no such folder; give a folder of "
                                  "label folders")
        return _scan_local(base, patterns, src)
    try:
        infos = fs.walk_tree(filesystem, base)
    except (OSError, ValueError) as exc:
        raise ds.DatasetError(f"cannot list {redact_uri(src)!r}: {exc}; give a folder of label folders") from exc
    listing, skipped = ImageListing(), Counter[str]()
    for info in infos:
        if not info.is_file:
            continue
        parts = posixpath.relpath(info.path, base).split("/")
        if any(part.startswith((".", "_")) for part in parts):  # Spark skips hidden files too
            continue
        if _matches(parts[-1], patterns):
            listing.files.append((prefix + info.path, int(info.size or 0)))
        else:
            skipped[_extension_reason(parts[-1])] += 1
    listing.files.sort()
    listing.skipped = dict(sorted(skipped.items()))
    return listing


def list_images(src: str, glob: str = DEFAULT_GLOB) -> list[tuple[str, int]]:
    """(path, size) of the files an image job reads under ``src``; see :func:`scan_images`."""
    return scan_images(src, glob).files


def deal(paths: list[str], count: int) -> list[list[str]]:
    """Deal ``paths`` round-robin into ``count`` lists: with the paths sorted, every list gets a
    share of every label folder, so no rank trains on a few classes only.

    >>> deal(["a/1", "a/2", "a/3", "b/1", "b/2"], 2)
    [['a/1', 'a/3', 'b/2'], ['a/2', 'b/1']]
    """
    return [paths[i::count] for i in range(count)]
