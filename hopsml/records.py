"""The one guarded reader of hopsml's JSON records (experiment.json, dataset.json, model.json, serving.json,
server.json, a feature group's or view's record, a job's record): a record that is too large, does not parse,
is nested too deep or has the wrong types raises `BrokenRecordError` with the reason, so a listing can show it
as BROKEN and go on with the others; and the one check of a path a record names (a log file), which must
stay inside the folders hopsml writes to.

A record kind states what it needs as a `Shape`:

>>> shape = Shape("job.json", required=("name",), types={"name": (str,), "args": (list,)})
>>> parse_record(b'{"name": "etl", "args": []}', shape)
{'name': 'etl', 'args': []}
>>> parse_record(b'{"name": 3}', shape)
Traceback (most recent call last):
...
hopsml.records.BrokenRecordError: job.json field 'name' is a number, not a string
>>> parse_record(b"[" * 500 + b"]" * 500, shape)
Traceback (most recent call last):
...
hopsml.records.BrokenRecordError: job.json is nested deeper than 64 levels
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from hopsml.errors import HopsmlError, StorageError
from hopsml.fs import Storage

__all__ = ["BROKEN", "BrokenRecordError", "MAX_DEPTH", "MAX_RECORD_BYTES", "Shape", "inside", "parse_record",
           "read_or_broken", "read_record"]

T = TypeVar("T")
BROKEN = "BROKEN"                 # the state a listing shows for a record it cannot read
MAX_RECORD_BYTES = 16 << 20       # no record hopsml writes comes near this; a larger file is not one of them
MAX_DEPTH = 64                    # levels of nesting; hopsml's own records use fewer than 10

_JSON_NAMES = {dict: "object", list: "list", str: "string", int: "number", float: "number", bool: "boolean",
               type(None): "null"}


class BrokenRecordError(HopsmlError, ValueError):
    """A record exists but cannot be read as one; `reason` says why in a few words (what a listing shows)."""

    def __init__(self, message: str, reason: str | None = None) -> None:
        super().__init__(message)
        self.reason = reason or message


def _json_name(value: object) -> str:
    return _JSON_NAMES.get(type(value), type(value).__name__)


@dataclass(frozen=True)
class Shape:
    """What one kind of record must hold at its top level: an object with the `required` keys, and for each key
    in `types` (when present and not null) a value of one of those Python types. `name` is the file's name, for
    the messages."""

    name: str
    required: tuple[str, ...] = ()
    types: Mapping[str, tuple[type, ...]] = field(default_factory=dict)

    def check(self, data: object) -> dict[str, Any]:
        """`data` when it has this shape, else BrokenRecordError saying what is wrong."""
        if not isinstance(data, dict):
            raise BrokenRecordError(f"{self.name} holds a JSON {_json_name(data)}, not an object")
        missing = [key for key in self.required if key not in data]
        if missing:
            raise BrokenRecordError(f"{self.name} lacks {', '.join(map(repr, missing))}")
        for key, types in self.types.items():
            value = data.get(key)
            if value is None:
                continue
            if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
                wanted = " or ".join(dict.fromkeys(_JSON_NAMES.get(t, t.__name__) for t in types))
                raise BrokenRecordError(f"{self.name} field {key!r} is a {_json_name(value)}, not a {wanted}")
        return data


def _depth_exceeds(value: object, limit: int) -> bool:
    """True when `value` nests lists and objects more than `limit` levels deep (walked without recursion)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (dict, list)):
            if depth > limit:
                return True
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))
    return False


def parse_record(raw: bytes, shape: Shape, *, max_depth: int = MAX_DEPTH) -> dict[str, Any]:
    """The record in `raw`, checked against `shape`; BrokenRecordError with the reason otherwise."""
    if not raw.strip():
        raise BrokenRecordError(f"{shape.name} is empty")
    try:
        data = json.loads(raw)
    except RecursionError:
        raise BrokenRecordError(f"{shape.name} is nested deeper than {max_depth} levels") from None
    except ValueError as exc:  # also UnicodeDecodeError
        raise BrokenRecordError(f"{shape.name} is not valid JSON ({exc}); it was probably cut short") from None
    if _depth_exceeds(data, max_depth):
        raise BrokenRecordError(f"{shape.name} is nested deeper than {max_depth} levels")
    return shape.check(data)


def read_record(storage: Storage, rel: str, shape: Shape, *, max_bytes: int = MAX_RECORD_BYTES,
                max_depth: int = MAX_DEPTH) -> dict[str, Any]:
    """The record at `rel`, read and checked; BrokenRecordError naming the file, the reason and what to do.

    A missing file is a StorageError as from `Storage.read_bytes` (a listing decides whether that is broken)."""
    if not storage.contains(rel):
        raise _broken(storage, rel, f"{shape.name} is a link that leads out of the root")
    info = storage.info(rel)
    if not info.exists:
        raise StorageError(f"{storage.uri(rel)} does not exist")
    if info.size is not None and info.size > max_bytes:
        raise _broken(storage, rel, f"{shape.name} is {info.size} bytes, more than a record may hold ({max_bytes})")
    try:
        raw = storage.read_bytes(rel)
    except StorageError as exc:
        raise _broken(storage, rel, f"{shape.name} cannot be read: {exc}") from exc
    if len(raw) > max_bytes:   # grew since it was looked at
        raise _broken(storage, rel, f"{shape.name} is more than {max_bytes} bytes, more than a record may hold")
    try:
        return parse_record(raw, shape, max_depth=max_depth)
    except BrokenRecordError as exc:
        raise _broken(storage, rel, exc.reason) from None


def read_or_broken(read: Callable[[], T], file_name: str) -> T | BrokenRecordError:
    """What `read()` gives, or why it could not (a storage failure said as a BrokenRecordError too): what a
    listing keeps for each record, to show it or show it as BROKEN."""
    try:
        return read()
    except BrokenRecordError as exc:
        return exc
    except StorageError as exc:
        reason = f"{file_name} cannot be read: {exc}"
        return BrokenRecordError(reason, reason=reason)


def _broken(storage: Storage, rel: str, reason: str) -> BrokenRecordError:
    return BrokenRecordError(f"{reason}. The record is {storage.uri(rel)}: repair it by hand, or remove it "
                             "(and its folder) if it is of no use", reason=reason)


def inside(path: str, folders: list[str | None]) -> str | None:
    """The real path of the local file `path` when it lies inside one of the local `folders` (links resolved:
    a record names a file, it cannot lead out of them), else None. A relative `path` is taken in the first
    folder.

    >>> inside("/srv/root/Logs/a.log", ["/srv/root"]), inside("/etc/passwd", ["/srv/root", "/srv/logs"])
    ('/srv/root/Logs/a.log', None)
    >>> inside("/srv/root/../../etc/passwd", ["/srv/root"])
    """
    bases = [os.path.realpath(os.path.expanduser(f)) for f in folders if f]
    if not isinstance(path, str) or not path or "\x00" in path or not bases:
        return None
    real = os.path.realpath(os.path.join(bases[0], os.path.expanduser(path)))
    for base in bases:
        if real == base or real.startswith(base.rstrip(os.sep) + os.sep):
            return real
    return None
