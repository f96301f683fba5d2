"""Which environment a run used, and what changed since the run before it: a result that moved between
two runs of the same code often moved because a package did."""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from typing import Any

from hopsml import layout
from hopsml.errors import StorageError
from hopsml.fs import Storage
from hopsml.tracking import record as records

log = logging.getLogger(__name__)

# `- name==1.2` (pip's section) or `- name=1.2=build` (conda's), as conda.yml lists them.
_PACKAGE = re.compile(r"^\s*-\s+([A-Za-z0-9_.\-]+)\s*(?:==|=)\s*([^=\s]+)")


@dataclass(frozen=True)
class EnvironmentChange:
    """The packages of a run's conda.yml against those of the project's run before it."""

    previous: str                                   # the earlier run's id
    added: dict[str, str] = field(default_factory=dict)
    removed: dict[str, str] = field(default_factory=dict)
    changed: dict[str, tuple[str, str]] = field(default_factory=dict)   # name -> (before, now)

    def __bool__(self) -> bool:
        return bool(self.added or self.removed or self.changed)

    def lines(self) -> list[str]:
        """One line per package, changed first: `numpy 1.26.4 -> 2.1.0`, `+ optuna 4.0`, `- scipy 1.13`."""
        return ([f"{name} {old} -> {new}" for name, (old, new) in sorted(self.changed.items())]
                + [f"+ {name} {version}" for name, version in sorted(self.added.items())]
                + [f"- {name} {version}" for name, version in sorted(self.removed.items())])


def packages(conda_yml: str) -> dict[str, str]:
    """Package name (lower case, `_` as `-`) -> version, from conda's environment file or hopsml's pip
    form of it; the Python line counts as the package `python`."""
    found: dict[str, str] = {}
    for line in conda_yml.splitlines():
        match = _PACKAGE.match(line)
        if match:
            found[match.group(1).lower().replace("_", "-")] = match.group(2)
    return found


def differences(before: dict[str, str], now: dict[str, str], previous: str) -> EnvironmentChange:
    return EnvironmentChange(
        previous=previous,
        added={n: v for n, v in now.items() if n not in before},
        removed={n: v for n, v in before.items() if n not in now},
        changed={n: (before[n], v) for n, v in now.items() if n in before and before[n] != v})


def _environment_text(storage: Storage, project: str, rec: records.ExperimentRecord) -> str | None:
    if not rec.environment:
        return None
    path = layout.ExperimentDir.from_id(project, rec.id).environment
    try:
        return storage.read_text(path) if storage.exists(path) else None
    except StorageError as exc:
        log.warning("the environment of %s cannot be read: %s", rec.id, exc)
        return None


def _fingerprint(rec: records.ExperimentRecord) -> str | None:
    env = rec.python_environment
    return env.get("fingerprint") if isinstance(env, dict) else None


def since_previous(storage: Storage, project: str, rec: records.ExperimentRecord) -> EnvironmentChange | None:
    """The packages that differ from the project's latest run that started before `rec` and recorded an
    environment; None when there is no such run or either environment cannot be read. Two runs with the
    same fingerprint differ in nothing, which saves reading their files."""
    mine = _environment_text(storage, project, rec)
    if mine is None or not rec.start:
        return None
    for earlier in records.list_records(storage, project):     # newest first
        if earlier.id == rec.id or not earlier.start or earlier.start >= rec.start or not earlier.environment:
            continue
        if _fingerprint(rec) is not None and _fingerprint(rec) == _fingerprint(earlier):
            return EnvironmentChange(previous=earlier.id)
        theirs = _environment_text(storage, project, earlier)
        return None if theirs is None else differences(packages(theirs), packages(mine), earlier.id)
    return None


def described(storage: Storage, project: str, rec: records.ExperimentRecord) -> dict[str, Any]:
    """What the CLI and the web view show of a run's environment: its fingerprint, the archive its
    executors unpacked (None: they ran their own Python), and the change since the run before."""
    env = rec.python_environment if isinstance(rec.python_environment, dict) else {}
    return {"fingerprint": env.get("fingerprint"), "archive": env.get("archive"),
            "change": since_previous(storage, project, rec)}
