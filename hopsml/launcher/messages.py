"""What travels between a run's tasks and its driver, as typed values: the channel's messages (a line of
output, a rank failing, a rank finished, a trial's metric, the driver's stop) and the report a rank or
trial ends with.

Across a process boundary (the channel's JSON, a child's report file, a Spark task's return value) they
go as plain JSON objects (`to_wire`); the driver turns each one back into its type once, at arrival
(`decode`, `RankReport.from_wire`), and from then on reads fields, never message text. A failure's cause
is data: what failed (`cause`) and, for a collective error, the peer it blames and why (`blamed`,
`blame`), taken from CollectiveError.peer and .kind on the rank.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields, replace
from enum import Enum
from typing import Any, ClassVar

from hopsml.errors import Blame, CollectiveError, member_of


class Cause(str, Enum):
    """RankReport.cause: why a rank or trial failed (its text is what the wire and the records carry)."""

    RAISED = "raised"          # the function raised an error of its own
    COLLECTIVE = "collective"  # a collective failed: `blamed` names the peer (when known), `blame` what it did
    PROCESS = "process"        # its process died (Spark saw the task die, or the child process ended)
    STAGE = "stage"            # Spark failed the stage without naming a task

    @classmethod
    def of(cls, value: object) -> Cause | None:
        """The member named by `value`, None for None or a cause this version lacks."""
        return member_of(cls, value)


RAISED, COLLECTIVE, PROCESS, STAGE = Cause.RAISED, Cause.COLLECTIVE, Cause.PROCESS, Cause.STAGE
# RankReport.blame: what the blamed peer did (CollectiveError's kinds)
DIED, STUCK, TAMPERED = Blame.DIED, Blame.STUCK, Blame.TAMPERED


@dataclass(frozen=True)
class RankReport:
    """How a rank's (or a trial's) function ended: its result, or its error with the cause as data."""

    ok: bool
    rank: int | None = None
    trial: int | None = None
    result: dict[str, Any] = field(default_factory=dict)
    stopped: bool = False  # a trial stopped early by the search (ok, with its partial result)
    error: str = ""
    traceback: str = ""
    tail: str = ""  # the last lines of its output
    duration: float | None = None
    cause: Cause | None = None  # set when not ok
    blamed: int | None = None  # the peer a collective error blames
    blame: Blame | None = None  # what that peer did
    seeded: dict[str, int] = field(default_factory=dict)  # the generators seeded before the function ran

    @classmethod
    def failure(cls, exc: BaseException, error: str, traceback: str, tail: str) -> RankReport:
        """A failure report for `exc`, raised by the function or by a collective it called."""
        if isinstance(exc, CollectiveError):
            return cls(False, error=error, traceback=traceback, tail=tail, cause=COLLECTIVE,
                       blamed=exc.peer, blame=exc.kind)
        return cls(False, error=error, traceback=traceback, tail=tail, cause=RAISED)

    def where(self, rank: int | None, trial: int | None, duration: float | None = None) -> RankReport:
        """This report, of `rank` / `trial`."""
        return replace(self, rank=rank, trial=trial, duration=self.duration if duration is None else duration)

    def to_wire(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_wire(cls, data: dict[str, Any]) -> RankReport:
        """From its JSON form; unknown keys (a newer task's) are ignored."""
        known = {f.name for f in fields(cls)}
        values = {k: v for k, v in data.items() if k in known}
        for name in ("result", "seeded"):
            if values.get(name) is None:
                values[name] = {}
        values["cause"], values["blame"] = Cause.of(values.get("cause")), Blame.of(values.get("blame"))
        return cls(**values)


@dataclass(frozen=True)
class Output:
    """A line a rank printed."""

    KIND: ClassVar[str] = "output"
    rank: int | None
    line: str


@dataclass(frozen=True)
class Failing:
    """A rank's function failed; sent before its slow final upload, so the driver knows the cause at once."""

    KIND: ClassVar[str] = "failing"
    report: RankReport


@dataclass(frozen=True)
class Finished:
    """A rank's function ended and its files are in the run directory: its final report."""

    KIND: ClassVar[str] = "finished"
    report: RankReport


@dataclass(frozen=True)
class Metric:
    """Metrics a trial logged at a step (for early stopping)."""

    KIND: ClassVar[str] = "metric"
    trial: int | None
    step: int
    values: dict[str, Any]


@dataclass(frozen=True)
class Stop:
    """The driver tells a trial to stop early (or a slot task that no more jobs come)."""

    KIND: ClassVar[str] = "stop"


@dataclass(frozen=True)
class Ready:
    """A long-lived slot task of a search is up and takes jobs: its slot and its executor's host."""

    KIND: ClassVar[str] = "ready"
    slot: int
    host: str
    pid: int


@dataclass(frozen=True)
class Assign:
    """The driver gives a slot task its next job: a trial's number, folder and keyword arguments (packed:
    `pack_arguments`)."""

    KIND: ClassVar[str] = "assign"
    trial: int
    trial_name: str
    run_dir: str
    kwargs: dict[str, Any]


@dataclass(frozen=True)
class Clock:
    """A rank's clock ping (t0, its wall clock in ns) and the driver's answer (t1, the driver's wall clock)."""

    KIND: ClassVar[str] = "clock"
    rank: int | None
    t0: int
    t1: int | None = None


@dataclass(frozen=True)
class Timing:
    """A batch of a rank's timeline: its collective ops since the last batch as [seq, arrival (driver's clock),
    wait, move, input, compute] in ns, and a system sample."""

    KIND: ClassVar[str] = "timing"
    rank: int
    size: int
    ops: list[list[int]] = field(default_factory=list)
    system: dict[str, float] | None = None


@dataclass(frozen=True)
class Join:
    """A rank's part of the rendezvous of a barrier stage: what its peers need to reach it (`info`: its listener
    address, host, GPUs, framework ports)."""

    KIND: ClassVar[str] = "join"
    rank: int
    world_size: int
    info: dict[str, Any]


@dataclass(frozen=True)
class Peers:
    """The driver's answer once every rank has joined: each rank's `info`, in rank order."""

    KIND: ClassVar[str] = "peers"
    everyone: list[dict[str, Any]]


Message = Output | Failing | Finished | Metric | Stop | Ready | Assign | Clock | Timing | Join | Peers


_TUPLE = "__tuple__"


def pack_arguments(value: object) -> Any:
    """A trial's arguments as JSON carries them exactly: a tuple (JSON has only lists) as a tagged object.

    >>> pack_arguments({"layers": (64, 32), "acts": ["relu", ("tanh", 2)]})
    {'layers': {'__tuple__': [64, 32]}, 'acts': ['relu', {'__tuple__': ['tanh', 2]}]}
    """
    if isinstance(value, tuple):
        return {_TUPLE: [pack_arguments(v) for v in value]}
    if isinstance(value, list):
        return [pack_arguments(v) for v in value]
    if isinstance(value, dict):
        return {k: pack_arguments(v) for k, v in value.items()}
    return value


def unpack_arguments(value: object) -> Any:
    """The arguments `pack_arguments` packed, read back from JSON.

    >>> unpack_arguments({"layers": {"__tuple__": [64, 32]}, "acts": ["relu", {"__tuple__": ["tanh", 2]}]})
    {'layers': (64, 32), 'acts': ['relu', ('tanh', 2)]}
    """
    if isinstance(value, dict):
        if value.keys() == {_TUPLE} and isinstance(value[_TUPLE], list):
            return tuple(unpack_arguments(v) for v in value[_TUPLE])
        return {k: unpack_arguments(v) for k, v in value.items()}
    if isinstance(value, list):
        return [unpack_arguments(v) for v in value]
    return value


def to_wire(message: Message) -> dict[str, Any]:
    """The JSON object a message travels as: its kind and its fields (a report's inline)."""
    if isinstance(message, (Failing, Finished)):
        return {"kind": message.KIND, **message.report.to_wire()}
    return {"kind": message.KIND, **asdict(message)}


def decode(data: dict[str, Any]) -> Message | None:
    """The message a JSON object carries; None for a kind this driver does not know."""
    kind = data.get("kind")
    if kind == Output.KIND:
        return Output(data.get("rank"), str(data.get("line", "")))
    if kind == Failing.KIND:
        return Failing(RankReport.from_wire(data))
    if kind == Finished.KIND:
        return Finished(RankReport.from_wire(data))
    if kind == Metric.KIND:
        return Metric(data.get("trial"), int(data.get("step") or 0), dict(data.get("values") or {}))
    if kind == Stop.KIND:
        return Stop()
    if kind == Ready.KIND:
        return Ready(int(data.get("slot") or 0), str(data.get("host") or ""), int(data.get("pid") or 0))
    if kind == Assign.KIND:
        return Assign(int(data.get("trial") or 0), str(data.get("trial_name") or ""), str(data.get("run_dir") or ""),
                      dict(data.get("kwargs") or {}))
    if kind == Clock.KIND:
        t1 = data.get("t1")
        return Clock(data.get("rank"), int(data.get("t0") or 0), None if t1 is None else int(t1))
    if kind == Timing.KIND:
        return Timing(int(data.get("rank") or 0), int(data.get("size") or 1), list(data.get("ops") or []),
                      data.get("system"))
    if kind == Join.KIND:
        return Join(int(data.get("rank") or 0), int(data.get("world_size") or 1), dict(data.get("info") or {}))
    if kind == Peers.KIND:
        return Peers(list(data.get("everyone") or []))
    return None
