"""What a running serving records about itself in the project (`Serving/<name>/server.json`): the
supervisor's and instances' processes, the port, the state, the restarts. Any later process (a new
kernel, the CLI) reads it to show the status or to stop the server; the status shown is checked against
the processes, so a killed server reads as Failed, not Running.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from hopsml import layout
from hopsml.clock import utc_now as now
from hopsml.errors import StorageError
from hopsml.fs import Storage
from hopsml.processes import Proc
from hopsml.records import BrokenRecordError, Shape, read_record

STARTING = "Starting"
RUNNING = "Running"
STOPPING = "Stopping"
STOPPED = "Stopped"
FAILED = "Failed"




@dataclass
class Restart:
    """One restart of a crashed instance."""

    instance: int
    time: str
    reason: str


@dataclass
class ScaleStep:
    """One scaling step of an autoscaled serving: from how many instances to how many, why, and how long the new
    instances took to answer (the cold start, when it was from zero)."""

    time: str
    before: int
    after: int
    reason: str
    ready_s: float | None = None


@dataclass
class ServerState:
    """The server's own record; `state` is what the supervisor last knew."""

    state: str = STOPPED
    reason: str | None = None
    host: str = ""
    port: int = 0
    supervisor: dict[str, int] | None = None
    instances: list[dict[str, int] | None] = field(default_factory=list)
    available: int = 0
    restarts: list[Restart] = field(default_factory=list)
    failing: list[Restart] = field(default_factory=list)   # instances given up on (crashing), with why
    started: str | None = None
    updated: str | None = None
    log: str = ""
    wanted: int = 0                                        # the instances the autoscaler asks for now
    scaling: list[ScaleStep] = field(default_factory=list)   # the last steps, newest last
    # reloads of the definition done in place (None: a supervisor that cannot reload), and why the last failed
    reloads: int | None = None
    reload_error: str | None = None

    @property
    def supervisor_proc(self) -> Proc | None:
        return Proc.from_dict(self.supervisor) if self.supervisor else None

    def instance_procs(self) -> list[Proc]:
        return [Proc.from_dict(i) for i in self.instances if i]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ServerState:
        names = set(cls.__dataclass_fields__)
        out = cls(**{k: v for k, v in data.items() if k in names})
        out.restarts = [Restart(**r) if isinstance(r, dict) else r for r in out.restarts]
        out.failing = [Restart(**r) if isinstance(r, dict) else r for r in out.failing]
        out.scaling = [ScaleStep(**r) if isinstance(r, dict) else r for r in out.scaling]
        return out


# What server.json must hold: the types its readers rely on (a process is an object, the log a path).
STATE_SHAPE = Shape(layout.SERVING_STATE, types={
    "state": (str,), "reason": (str,), "host": (str,), "port": (int,), "supervisor": (dict,), "instances": (list,),
    "available": (int,), "restarts": (list,), "started": (str,), "updated": (str,), "log": (str,)})


def read(storage: Storage, project: str, name: str) -> ServerState:
    """The recorded state; Stopped when none was ever written. A torn or unreadable file reads as
    Starting (the supervisor is writing it), and the liveness check decides."""
    rel = layout.ServingDir.of(project, name).state
    if not storage.exists(rel):
        return ServerState()
    try:
        return ServerState.from_dict(_checked(read_record(storage, rel, STATE_SHAPE)))
    except BrokenRecordError as exc:
        return ServerState(state=STARTING, reason=f"server.json cannot be read: {exc.reason}")
    except (StorageError, ValueError, TypeError) as exc:
        return ServerState(state=STARTING, reason=f"server.json cannot be read: {exc}")


def _is_proc(value: object) -> bool:
    return (isinstance(value, dict) and all(isinstance(value.get(k), int) and not isinstance(value.get(k), bool)
                                            for k in ("pid", "started")))


def _checked(data: dict[str, Any]) -> dict[str, Any]:
    """`data` when its processes and restarts have the shape `ServerState` reads, else BrokenRecordError."""
    procs = ([data["supervisor"]] if data.get("supervisor") else []) + [i for i in data.get("instances") or [] if i]
    if not all(_is_proc(p) for p in procs):
        raise BrokenRecordError(f"{layout.SERVING_STATE} names a process without a whole-number pid and start time")
    restarts = data.get("restarts") or []
    if not all(isinstance(r, dict) and set(r) == {"instance", "time", "reason"} for r in restarts):
        raise BrokenRecordError(f"{layout.SERVING_STATE} has a restart that is not {{instance, time, reason}}")
    return data


def write(storage: Storage, project: str, name: str, state: ServerState) -> None:
    state.updated = now()
    storage.write_json(layout.ServingDir.of(project, name).state, state.to_dict())
