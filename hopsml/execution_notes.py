"""What a job's execution produced, noted where it is produced: an experiment started, a dataset committed, a
feature group commit, a model version, a serving. The execution's runner gives the job's process the variable
HOPSML_EXECUTION_NOTES, the path of a local JSON-lines file in the execution's folder; `note` appends one line
there, and does nothing in a process that no execution started. The runner reads the file into the execution's
record (`produced`). Here, at the bottom of the layers, so that every room can note what it makes without
importing the jobs; a plain local append (one write of one line, which O_APPEND keeps whole) because the
file is the execution's own scratch file on this host, not a file of the project root.
"""

from __future__ import annotations

import json
import logging
import os
import time
from typing import Any

log = logging.getLogger(__name__)

ENV = "HOPSML_EXECUTION_NOTES"


def note(kind: str, **fields: object) -> None:
    """Note that this process produced an object of `kind` ("experiment", "dataset", "featuregroup", "model",
    "serving") with its `fields` (an id or name, a version, ...); nothing outside a job's execution. Never
    fails the caller: a note that cannot be written is logged."""
    path = os.environ.get(ENV)
    if not path:
        return
    line = json.dumps({"kind": kind, **fields, "time": time.time()}, default=str, sort_keys=False) + "\n"
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line.encode("utf-8"))
        finally:
            os.close(fd)
    except OSError as exc:
        log.warning("could not note the %s this execution produced in %s: %s", kind, path, exc)


def read(path: str) -> list[dict[str, Any]]:
    """The notes in the file at local `path` (see `parse`); none when there is no file."""
    try:
        with open(path, encoding="utf-8") as handle:
            return parse(handle.read())
    except FileNotFoundError:
        return []


def parse(text: str) -> list[dict[str, Any]]:
    """The notes in a notes file's `text`, in order, each (kind and fields) once: a feature group committed
    twice is two entries, since its commits differ. A line cut off by a killed writer is skipped.

    >>> parse('{"kind": "model", "name": "m", "version": 1, "time": 1}\\n{"kind": "mod')
    [{'kind': 'model', 'name': 'm', 'version': 1, 'time': 1}]
    """
    found: list[dict[str, Any]] = []
    seen: set[str] = set()
    for line in text.splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if not isinstance(entry, dict) or "kind" not in entry:
            continue
        key = json.dumps({k: v for k, v in entry.items() if k != "time"}, sort_keys=True, default=str)
        if key not in seen:
            seen.add(key)
            found.append(entry)
    return found
