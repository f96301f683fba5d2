"""The one exception family of hopsml: every message says what went wrong and what to do."""

from __future__ import annotations

from enum import Enum
from typing import TypeVar


class HopsmlError(Exception):
    """Root of every error hopsml raises on purpose."""


class SettingsError(HopsmlError, ValueError):
    """A setting has a wrong value; the message names the setting and where it came from."""


class InvalidNameError(HopsmlError, ValueError):
    """A name that would become part of a path is empty or contains a separator or '..'."""


class NameTooLongError(InvalidNameError):
    """A name (or the path it makes) is longer than the filesystem accepts."""


class StorageError(HopsmlError, OSError):
    """The project root cannot be reached, read or written."""


class ResourceNotFoundError(HopsmlError, FileNotFoundError):
    """A file the user asked to version or copy does not exist."""


class ExperimentNotFoundError(HopsmlError, LookupError):
    """No experiment with the given id exists under the project."""


class SerializationError(HopsmlError, TypeError):
    """A training function returned something hopsml cannot record."""


class ExperimentFailed(HopsmlError, RuntimeError):
    """The training function raised; carries its traceback and last output lines, and as data the rank the
    failure is blamed on (`rank`) with the report that says so (`report`, a launcher.messages.RankReport:
    that rank's own, or the peer's whose collective error blamed it)."""

    def __init__(self, message: str, *, traceback: str = "", output_tail: str = "",
                 logdir: str | None = None, rank: int | None = None, report: object | None = None) -> None:
        parts = [message]
        if traceback:
            parts.append("Traceback from the function:\n" + traceback.rstrip())
        if output_tail:
            parts.append("Last output lines:\n" + output_tail.rstrip())
        super().__init__("\n\n".join(parts))
        self.traceback = traceback
        self.output_tail = output_tail
        self.logdir = logdir
        self.rank = rank
        self.report = report


class ModelError(HopsmlError, ValueError):
    """A model cannot be exported or found as asked; the message says what to change."""


class FeatureStoreError(HopsmlError, ValueError):
    """A feature group, view or training dataset cannot do what was asked; the message names the group, the
    column or the key, and what to do."""


class ClusterError(HopsmlError, RuntimeError):
    """The Spark cluster cannot run what was asked (too few slots, missing GPUs, ...)."""


class ExecutorStackError(HopsmlError, RuntimeError):
    """An executor's Python, hopsml or another package the run needs differs from the driver's."""


class AuthenticationError(HopsmlError, ConnectionError):
    """A peer did not prove it knows the experiment's secret."""


TextEnum = TypeVar("TextEnum", bound=Enum)


class Blame(str, Enum):
    """What the peer a collective error blames did: its connection dropped (DIED), it made no progress within
    the timeout (STUCK), or something wrote to its connection (TAMPERED)."""

    DIED = "died"
    STUCK = "stuck"
    TAMPERED = "tampered"

    @classmethod
    def of(cls, value: object) -> Blame | None:
        """The member named by `value` (a member or its text), None for None or a kind this version lacks."""
        return member_of(cls, value)


def member_of(kind: type[TextEnum], value: object) -> TextEnum | None:
    """The member of the text-valued enum `kind` that `value` (a member or its text) names; None for None or a
    text this version does not know (data from a newer peer).

    >>> member_of(Blame, "died"), member_of(Blame, "exploded"), member_of(Blame, None)
    (<Blame.DIED: 'died'>, None, None)
    """
    try:
        return kind(value) if isinstance(value, str) else None
    except ValueError:
        return None


class CollectiveError(HopsmlError, RuntimeError):
    """A collective operation failed: a peer died, timed out or sent mismatched data.

    `kind` and `peer` say what is known of the cause, as data for the driver's blame policy (never
    parsed back out of the message): the peer that `DIED` (its connection dropped), was `STUCK` (made no
    progress within the timeout) or whose connection was `TAMPERED` with; None where no peer is to blame.
    """

    DIED, STUCK, TAMPERED = Blame.DIED, Blame.STUCK, Blame.TAMPERED

    def __init__(self, message: str, *, peer: int | None = None, kind: str | None = None) -> None:
        super().__init__(message)
        self.peer = peer
        self.kind = Blame.of(kind)

    def __reduce__(self) -> tuple[object, ...]:
        # keyword-only fields survive pickling (a rank's error crosses process boundaries)
        return _collective_error, (str(self), self.peer, self.kind)


class JobError(HopsmlError, RuntimeError):
    """A named job or one of its executions cannot do what was asked (missing, failed, timed out); the message
    names the job and the execution, and a failed execution's message ends with the last lines of its logs."""

    def __init__(self, message: str, *, job: str | None = None, execution: int | None = None,
                 log_tail: str = "", reason: str | None = None) -> None:
        super().__init__(message + (f"\n\nLast log lines:\n{log_tail.rstrip()}" if log_tail.strip() else ""))
        self.job = job
        self.execution = execution
        self.log_tail = log_tail
        self.reason = reason or message   # in a few words, what a listing shows

    def __reduce__(self) -> tuple[object, ...]:
        # keyword-only fields survive pickling (an Airflow worker may pickle the error)
        return _job_error, (str(self), self.job, self.execution)


class NotOfferedError(HopsmlError, NotImplementedError):
    """A member of the hopsworks SDK (hsfs, hsml, hopsworks) that hopsml does not offer; the message names the member
    and, where hopsml has one, what to use instead."""


class NotInRunError(HopsmlError, RuntimeError):
    """A function meant for use inside a running experiment was called outside one."""


class TrialStopped(BaseException):
    """Raised inside a trial when the search told it to stop early.

    A BaseException, like KeyboardInterrupt, so that a training loop's `except Exception` does not
    swallow it; hopsml catches it and records the trial as EARLY_STOPPED with its partial result.
    """


def _collective_error(message: str, peer: int | None, kind: str | None) -> CollectiveError:
    return CollectiveError(message, peer=peer, kind=kind)


def _job_error(message: str, job: str | None, execution: int | None) -> JobError:
    return JobError(message, job=job, execution=execution)
