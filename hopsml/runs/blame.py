"""Which rank a failed distributed run blames, and whether starting the ranks again can cure it.

The one place that decides. It reads the ranks' reports as data (RankReport.cause, .blamed, .blame,
set on the rank from CollectiveError.peer and .kind), never their message text; only Spark's own
error, which has no other form, is read for the task it names.
"""

from __future__ import annotations

import re
from typing import Any, Protocol

from hopsml.errors import ClusterError, ExperimentFailed
from hopsml.fs import Storage
from hopsml.launcher.messages import COLLECTIVE, DIED, PROCESS, STAGE, STUCK, RankReport


class RunFolder(Protocol):
    """Where a run's ranks write their logs: an experiment's folder, or a trial's."""

    def worker_log(self, rank: int) -> str: ...


class FailedRun(Protocol):
    """What the failure messages read of a run: its id, folder, storage and logdir."""

    @property
    def id(self) -> str: ...
    @property
    def dir(self) -> RunFolder: ...
    @property
    def storage(self) -> Storage: ...
    @property
    def logdir(self) -> str: ...


def worker_log_tail(run: FailedRun, rank: int, lines: int = 30) -> str:
    """The last lines of a rank's own log in the run directory."""
    path = run.dir.worker_log(rank)
    return "\n".join(run.storage.read_text(path).splitlines()[-lines:]) if run.storage.exists(path) else ""


# How Spark names the task it saw fail: a task failure ('Task 1 in stage 3.0 failed 1 times') or the
# barrier stage's abort ('barrier task ResultTask(3, 1) finished unsuccessfully'); partition = rank.
_FAILED_TASK = (re.compile(r"Task (\d+) in stage"), re.compile(r"ResultTask\(\d+, (\d+)\)"))


def crashed_rank(error: ClusterError, run: FailedRun) -> RankReport:
    """The report of the rank whose task Spark saw die (its partition id is its rank)."""
    text = str(error)
    first_line = text.splitlines()[0] if text else "no message"
    for pattern in _FAILED_TASK:
        match = pattern.search(text)
        if match is not None:
            rank = int(match.group(1))
            return RankReport(False, rank=rank, tail=worker_log_tail(run, rank), cause=PROCESS,
                              error=f"its process died ({first_line})")
    return RankReport(False, error=text, cause=STAGE)


def first_cause(report: RankReport) -> tuple[int, int]:
    """Sort key that puts the rank that caused a failure first, not a peer that lost it."""
    if report.rank is None:  # Spark failed the stage without naming a task: any named cause first
        return (2, 0)
    return (1 if report.cause == COLLECTIVE else 0, report.rank)


def retryable(failures: list[RankReport]) -> bool:
    """Whether starting the ranks again can cure these failures: a rank's process died, or a peer lost it."""
    return bool(failures) and all(f.cause in (PROCESS, COLLECTIVE) for f in failures)


def silent_peer(failures: list[RankReport]) -> tuple[int, RankReport, bool] | None:
    """The rank that peers' collective errors blame as dead or stuck, the report blaming it, and whether it died.

    With three or more ranks a waiting rank may blame another waiting one; the rank that never reported
    anything itself is the cause, so it is preferred.
    """
    if not failures or failures[0].cause != COLLECTIVE:
        return None  # a rank's own error, or Spark's, comes first: that is the cause
    reporters = {f.rank for f in failures}
    named = [(f.blamed, f, f.blame == DIED) for f in failures
             if f.cause == COLLECTIVE and f.blamed is not None and f.blame in (DIED, STUCK)]
    chosen = [n for n in named if n[0] not in reporters] or named
    if not chosen:
        return None
    peer, witness, died = chosen[0]
    return int(peer or 0), witness, died


def rank_failure(failures: list[RankReport], run: FailedRun) -> ExperimentFailed:
    """The error for a failed distributed run, about the rank that caused it (`failures` sorted by first_cause).

    When the only reports are peers that lost a rank, or that waited in vain for one, that rank never
    said a word itself: name it and show its own last log lines rather than the survivor's.
    """
    blamed = silent_peer(failures)
    if blamed is not None:
        rank, witness, died = blamed
        what = ("died or disconnected" if died
                else "made no progress (hung, or stuck before a collective its peers called)")
        return ExperimentFailed(f"experiment {run.id} failed: rank {rank} {what} "
                                f"(rank {witness.rank} saw: {witness.error})",
                                output_tail=worker_log_tail(run, rank), logdir=run.logdir, rank=rank, report=witness)
    first = failures[0]
    if first.rank is None:
        return ExperimentFailed(f"experiment {run.id} failed: {first.error}", logdir=run.logdir, report=first)
    return ExperimentFailed(f"experiment {run.id} failed: rank {first.rank} raised {first.error}",
                            traceback=first.traceback, output_tail=first.tail, logdir=run.logdir, rank=first.rank,
                            report=first)


def late_ranks(late: list[int], finished: list[RankReport], run: FailedRun, late_after_s: float) -> ExperimentFailed:
    """The error for ranks that did not return long after a peer did (hung, or waiting on a peer)."""
    first: Any = finished[0].rank if finished else "?"
    names = ", ".join(str(r) for r in late)
    tails = "\n".join(f"--- rank {r}, last lines of logs/worker_{r}.log:\n{worker_log_tail(run, r) or '(nothing)'}"
                      for r in late)
    return ExperimentFailed(f"experiment {run.id} failed: rank(s) {names} did not return within "
                            f"{late_after_s:.0f} s after rank {first} had (setting late_rank_s); they were "
                            "stopped. A rank that stops calling the collectives its peers call, or hangs in "
                            "its own code, looks like this", output_tail=tails, logdir=run.logdir)
