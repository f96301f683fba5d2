"""Task side: run the user's function inside a Spark task with its output captured and its run
context set, and turn whatever happens into a JSON-safe report for the driver.

Failures of the function are reported, not raised: a raised error would make Spark retry the task
and run the training again.

A returned file goes into the run directory as hops put it there: uploaded under its base name, the
value replaced by its project-relative path (``Experiments/<id>/model.npz``), and the local original
removed. Which strings are files: a path (absolute, or relative to the function's working directory)
of a file the function wrote while it ran, anywhere on the local disk, or the value of a key ending in
``_file`` (``{"model_file": "/data/model.npz"}``); a file it did not write is copied but never removed.
Any other string is recorded as it is, even when a file of that name exists: hops would delete a
returned input file (a training CSV), and fail the whole run for a string with a '/' in it.
"""

from __future__ import annotations

import io
import math
import numbers
import os
import posixpath
import shutil
import sys
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from hopsml import layout
from hopsml.errors import SerializationError, TrialStopped
from hopsml.fs import Storage
from hopsml.launcher import seeds
from hopsml.launcher.channel import TaskChannel
from hopsml.launcher.messages import Failing, Finished, Metric, Output, RankReport, to_wire
from hopsml.launcher.spec import TaskSpec
from hopsml.launcher.task.recorded import recorded
from hopsml.layout import RunDir
from hopsml.tracking.run_context import TrialReporter, active_run

TAIL_LINES = 30
FILE_KEY_SUFFIX = "_file"   # a returned value under such a key names a file to copy into the run
_MTIME_SLACK_S = 1.0        # file times may be this much coarser than the clock
_LAUNCHER_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))   # hopsml/launcher


class _Tee(io.TextIOBase):
    """A text stream that writes to the log file, keeps a tail, and streams whole lines to the driver."""

    def __init__(self, log_file: io.TextIOBase, channel: TaskChannel | None, rank: int | None) -> None:
        self._file, self._channel, self._rank = log_file, channel, rank
        self._partial = ""
        self._lock = threading.Lock()
        self.tail: deque[str] = deque(maxlen=TAIL_LINES)

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        with self._lock:
            self._file.write(text)
            lines = (self._partial + text).split("\n")
            self._partial = lines.pop()
            for line in lines:
                self.tail.append(line)
                if self._channel is not None:
                    self._channel.send(to_wire(Output(self._rank, line)))
        return len(text)

    def log_only(self, text: str) -> None:
        """Write `text` to the log file (and the tail) without streaming it to the driver."""
        with self._lock:
            self._file.write(text)
            self.tail.extend(text.rstrip("\n").split("\n"))

    def flush(self) -> None:
        with self._lock:
            self._file.flush()

    def close_partial(self) -> None:
        if self._partial:
            self.write("\n")


@contextmanager
def captured_output(path: str, channel: TaskChannel | None, rank: int | None,
                    native: bool = False) -> Iterator[_Tee]:
    """Send this process's stdout/stderr to `path` and the driver for the duration of the block.

    With `native`, file descriptors 1 and 2 go to `path` too (output of C code, os.write, a fatal
    error's traceback); only for a process of its own, since the descriptors are the process's."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    saved = sys.stdout, sys.stderr
    with open(path, "a", buffering=1, encoding="utf-8", errors="replace") as log_file:
        saved_fds = _redirect_native(log_file) if native else None
        tee = _Tee(log_file, channel, rank)
        sys.stdout = sys.stderr = tee
        try:
            yield tee
        finally:
            tee.close_partial()
            sys.stdout, sys.stderr = saved
            if saved_fds is not None:
                _restore_native(saved_fds)


def _redirect_native(log_file: io.TextIOBase) -> tuple[int, int]:
    """Point descriptors 1 and 2 at `log_file`; returns copies of the old ones for _restore_native."""
    for stream in (sys.__stdout__, sys.__stderr__):
        if stream is not None:
            stream.flush()
    saved = os.dup(1), os.dup(2)
    os.dup2(log_file.fileno(), 1)
    os.dup2(log_file.fileno(), 2)
    return saved


def _restore_native(saved: tuple[int, int]) -> None:
    os.dup2(saved[0], 1)
    os.dup2(saved[1], 2)
    os.close(saved[0])
    os.close(saved[1])


def _json_safe(value: object, where: str) -> Any:
    """Numbers, strings, booleans, None, lists and dicts of them; numpy/cupy scalars and arrays converted."""
    if value is None or isinstance(value, (str, bool, int)):
        return value
    if isinstance(value, numbers.Real):
        number = float(value)
        return number if math.isfinite(number) else str(number)
    if hasattr(value, "tolist") and callable(value.tolist):  # numpy / cupy arrays and scalars
        return _json_safe(value.tolist(), where)
    if isinstance(value, dict):
        return {str(k): _json_safe(v, f"{where}[{k!r}]") for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v, f"{where}[{i}]") for i, v in enumerate(value)]
    raise SerializationError(f"{where} is a {type(value).__name__}, which hopsml cannot record; return "
                             "numbers, strings, lists or dicts of them, or the path of a file you wrote")


def normalise_result(value: object, storage: Storage, run_dir: RunDir, *, started: float | None = None,
                     run_local_dir: str | None = None) -> dict[str, Any]:
    """The function's return value as a dict, with the files it returned moved into the run dir.

    A string is taken for a file to keep when its key ends in ``_file``, or when it names a file
    written since ``started`` (a ``time.time()``), absolute or relative to the current directory; see the
    module's docstring for what happens to it. A file in
    ``run_local_dir`` (the run's own folder) is in the run already and only named. Every other string
    is recorded unchanged.
    """
    if value is None:
        return {}
    if not isinstance(value, dict):
        if isinstance(value, bool) or not isinstance(value, numbers.Real) and not hasattr(value, "item"):
            raise SerializationError(f"the function returned a {type(value).__name__}; return a number "
                                     "(the metric) or a dict of metrics and file paths")
        value = {"metric": value}
    run_folder = os.path.realpath(run_local_dir) if run_local_dir else None
    result = {}
    for key, item in value.items():
        if isinstance(item, str) and item and "\n" not in item and "\x00" not in item:
            item = _kept_file(str(key), item, storage, run_dir, started, run_folder)
        result[str(key)] = _json_safe(item, f"return value [{key!r}]")
    return result


def _inside(path: str, folder: str | None) -> bool:
    return folder is not None and os.path.commonpath([path, folder]) == folder


def project_relative(storage: Storage, run_dir: RunDir, rel: str) -> str:
    """How hops names a file of the run: relative to the project (``Experiments/<id>/model.npz``), which
    every hopsml.hdfs function and model.export resolve; the URI for a run outside any project."""
    project = run_dir.project
    if project is None:
        return storage.uri(rel)
    return posixpath.relpath(rel, layout.project_dir(project))


def _kept_file(key: str, item: str, storage: Storage, run_dir: RunDir, started: float | None,
               run_folder: str | None) -> str:
    """Where the file `item` names went, when it is one to keep (see normalise_result); else `item`."""
    marked = key.endswith(FILE_KEY_SUFFIX)
    if not marked and started is None:
        return item
    path = os.path.realpath(os.path.expanduser(item))  # a relative path: from where the function ended
    if not os.path.isfile(path):
        if marked:
            print(f"hopsml: return value {key!r} names {item!r}, which is not a file; recorded as text")
        return item
    written = started is not None and os.stat(path).st_mtime >= started - _MTIME_SLACK_S
    if not (marked or written):
        return item  # a file the function did not write: not ours to copy, let alone remove
    if run_folder is not None and _inside(path, run_folder):  # the run's own folder: in the run already
        return project_relative(storage, run_dir, layout.join(
            run_dir.path, os.path.relpath(path, run_folder).replace(os.sep, "/")))
    target = run_dir.file(os.path.basename(path))
    local_target = storage.local_path(target)
    if local_target is not None and os.path.realpath(local_target) == path:  # the run's file, by its full path
        return project_relative(storage, run_dir, target)
    root = storage.local_path()
    if root is not None and _inside(path, os.path.realpath(root)):
        return item  # a file of the project (a local root) stays where the function put it
    _keep_file(path, storage, target)
    if written:
        os.remove(path)  # as hops: the run holds the file now; the task's disk does not keep a copy
    return project_relative(storage, run_dir, target)


def _keep_file(path: str, storage: Storage, target: str) -> None:
    """Copy the local file `path` to `target` (root-relative), replacing a file of that name."""
    local_target = storage.local_path(target)
    if local_target:
        os.makedirs(os.path.dirname(local_target), exist_ok=True)
        shutil.copyfile(path, local_target)
    else:
        storage.upload(path, target)


def _trial_reporter(channel: TaskChannel | None, trial: int | None) -> TrialReporter | None:
    """A trial's metrics go to the driver as `Metric` messages; its answer, a `Stop`, ends the trial."""
    if channel is None or trial is None:
        return None

    def report(step: int, values: Mapping[str, float]) -> bool:
        channel.send(to_wire(Metric(trial, step, dict(values))))
        return channel.stop_requested()
    return report


def run_function(fn: Callable[..., Any], kwargs: dict[str, Any], spec: TaskSpec, *, rank: int = 0,
                 world_size: int = 1, write_metrics: bool = True, native_output: bool = False,
                 timeline: bool = False) -> dict[str, Any]:
    """Run `fn(**kwargs)` as one rank of a run; returns its RankReport in wire form (a Spark task's value).

    `native_output` also captures descriptors 1 and 2 (see captured_output): for a child process only.
    `timeline` records the function's timeline (its spans, reader waits, checkpoint saves, system metrics) into
    `timeline/rank-<rank>.json` and sends its system samples to the driver (hopsml.timeline)."""
    started = time.monotonic()
    channel = TaskChannel.connect(spec.channel_address, spec.secret) if spec.channel_address else None
    run_dir = RunDir(spec.run_dir)
    tee = None
    try:
        with active_run(spec.storage, run_dir, rank=rank, world_size=world_size, write_metrics=write_metrics,
                        trial=spec.trial, report=_trial_reporter(channel, spec.trial),
                        local_logdir=spec.local_logdir, seed=spec.seed,
                        sync_interval_s=spec.settings.sync_interval_s,
                        stale_after_s=spec.settings.lost_after_s) as ctx:
            log_path = os.path.join(ctx.local_dir, spec.log_name)
            with captured_output(log_path, channel, rank if world_size > 1 else None,
                                 native=native_output) as tee:
                try:
                    started_at = time.time()
                    seeded = seeds.seed_generators(spec.seed, fn) if spec.seed is not None else {}
                    # a run's rank (launch, the TensorFlow verbs) reports to the driver as it goes; a search's
                    # trial (spec.timeline) writes a part of its own per job
                    with (recorded(rank, world_size, spec) if timeline
                          else _timeline(spec.timeline, rank, world_size, ctx.local_dir)):
                        value = fn(**kwargs)
                    report = RankReport(True, result=normalise_result(
                        value, spec.storage, run_dir, started=started_at, run_local_dir=ctx.local_dir),
                        seeded=seeded)
                except TrialStopped as stop:
                    print(f"hopsml: {stop}")
                    report = RankReport(True, stopped=True, result=ctx.last_metrics)
                except BaseException as exc:  # noqa: BLE001 - everything is reported to the driver
                    report = _failure(exc, tail="\n".join(tee.tail))
                    # the traceback goes to the log; the driver gets it once, in the error it raises
                    tee.log_only(report.traceback)
                    print(f"hopsml: the function raised {report.error}")
                    if channel is not None:  # the cause reaches the driver before the slow final upload
                        channel.send(to_wire(Failing(report.where(rank, spec.trial))))
    except BaseException as exc:  # noqa: BLE001 - storage trouble while saving the run's files
        report = _failure(exc, tail="\n".join(tee.tail) if tee is not None else "")
    report = report.where(rank, spec.trial, round(time.monotonic() - started, 3))
    if channel is not None:
        channel.send(to_wire(Finished(report)))  # at once: a failure stops the other ranks
        channel.close()
    return report.to_wire()


@contextmanager
def _timeline(enabled: bool, rank: int, world_size: int, folder: str) -> Iterator[None]:
    """Record the function's timeline into `folder`/timeline/, as a part of its own: a trial run again (a
    promoted rung) adds a part beside the earlier ones."""
    if not enabled:
        yield
        return
    from hopsml.timeline.merge import new_part
    from hopsml.timeline.rank_timeline import rank_timeline

    target = os.path.join(folder, layout.TIMELINE)

    def write_part(data: bytes) -> None:
        os.makedirs(target, exist_ok=True)
        with open(new_part(target, rank, world_size), "wb") as out:
            out.write(data)

    with rank_timeline(rank, world_size, write_part=write_part):
        yield


def _is_launcher_frame(frame: Any) -> bool:
    return os.path.abspath(frame.f_code.co_filename).startswith(_LAUNCHER_DIR + os.sep)


def _failure(exc: BaseException, tail: str) -> RankReport:
    """A failure report whose traceback starts at the user's code, not at hopsml's wrapper."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None and _is_launcher_frame(tb.tb_frame):
        tb = tb.tb_next
    error = f"{type(exc).__name__}: {exc}"
    if isinstance(exc, (SystemExit, KeyboardInterrupt)):
        error = f"{type(exc).__name__} raised by the function"
    return RankReport.failure(exc, error, "".join(traceback.format_exception(type(exc), exc, tb)), tail)
