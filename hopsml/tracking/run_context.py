"""The run a piece of code is inside: set by the launcher around the user's function, read by
`tensorboard.logdir()`, `tensorboard.log()` and the collective helpers. Importable without pyspark."""

from __future__ import annotations

import contextvars
import logging
import os
import shutil
import tempfile
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from hopsml import config
from hopsml.errors import HopsmlError, NotInRunError, TrialStopped
from hopsml.fs import Storage
from hopsml.layout import RunDir
from hopsml.tracking.metrics import MetricsLogger
from hopsml.tracking.staging import StagedRun

log = logging.getLogger(__name__)

TENSORBOARD_SYNC_S = 30.0  # how often a local_logdir folder is copied into the run while the function runs

# In a search: hands a step's values to the driver and says whether the driver asked the trial to stop.
TrialReporter = Callable[[int, Mapping[str, float]], bool]

_current: contextvars.ContextVar[RunContext | None] = contextvars.ContextVar("hopsml_run", default=None)


@dataclass
class RunContext:
    """Where one running function writes: a local working folder mirrored to the run directory."""

    storage: Storage
    run_dir: RunDir
    local_dir: str
    rank: int = 0
    world_size: int = 1
    write_metrics: bool = True
    trial: int | None = None  # index of this trial in a search
    report: TrialReporter | None = None  # a trial's link to the driver's early stopping
    local_logdir: bool = False  # hops' local_logdir: TensorBoard writes to a local folder, copied in at the end
    seed: int | None = None  # the run's seed (hopsml.data.reader shuffles from it when given none)
    _metrics: MetricsLogger | None = field(default=None, repr=False)
    _staged: StagedRun | None = field(default=None, repr=False)
    _local_tensorboard: str | None = field(default=None, repr=False)
    _sync_stop: threading.Event = field(default_factory=threading.Event, repr=False)
    _sync_thread: threading.Thread | None = field(default=None, repr=False)

    def sync(self) -> None:
        """Copy what the run wrote so far to its directory now (HDFS, S3 roots; a no-op on local ones):
        call it after writing a checkpoint, so a killed task keeps it."""
        if self._staged is not None:
            self._staged.sync()

    @property
    def run_tensorboard_dir(self) -> str:
        """The run's own tensorboard/ folder (in the local working folder of the run)."""
        return os.path.join(self.local_dir, "tensorboard")

    @property
    def tensorboard_dir(self) -> str:
        """Where TensorBoard events go now: the run's tensorboard/, or with local_logdir a folder on
        this machine's disk that is copied into it when the function ends."""
        if not self.local_logdir:
            return self.run_tensorboard_dir
        if self._local_tensorboard is None:
            self._local_tensorboard = tempfile.mkdtemp(prefix="hopsml-tensorboard-")
            self._sync_thread = threading.Thread(target=self._sync_periodically, args=(self._local_tensorboard,),
                                                 name="hopsml-tensorboard-sync", daemon=True)
            self._sync_thread.start()
        return self._local_tensorboard

    def _sync_periodically(self, source: str) -> None:
        """While the function runs, copy the local TensorBoard folder in now and then, so a TensorBoard
        on the run directory shows progress (a copy costs little: event files are small)."""
        while not self._sync_stop.wait(TENSORBOARD_SYNC_S):
            try:
                shutil.copytree(source, self.run_tensorboard_dir, dirs_exist_ok=True)
            except OSError as exc:  # a file being rotated away: the next round or the final copy gets it
                log.debug("copying %s into the run failed for now: %s", source, exc)

    def collect_local_tensorboard(self) -> None:
        """Copy the local TensorBoard folder (local_logdir=True) into the run's tensorboard/."""
        if self._local_tensorboard is None:
            return
        source, self._local_tensorboard = self._local_tensorboard, None
        self._sync_stop.set()
        if self._sync_thread is not None:
            self._sync_thread.join(TENSORBOARD_SYNC_S)
        try:
            shutil.copytree(source, self.run_tensorboard_dir, dirs_exist_ok=True)
        finally:
            shutil.rmtree(source, ignore_errors=True)

    @property
    def metrics(self) -> MetricsLogger | None:
        """The per-step metrics writer; None on ranks that do not write metrics."""
        if not self.write_metrics:
            return None
        if self._metrics is None:
            self._metrics = MetricsLogger(os.path.join(self.local_dir, "metrics.jsonl"), self.tensorboard_dir)
        return self._metrics


    @property
    def last_metrics(self) -> dict[str, float]:
        """The latest value of each metric logged so far (the partial result of a stopped trial)."""
        return dict(self._metrics.last) if self._metrics is not None else {}

    def log(self, metrics: Mapping[str, Any], step: int | None) -> None:
        """Write metrics (on ranks that write them); in a search, report them and obey a stop."""
        writer = self.metrics
        if writer is None:
            return
        step = writer.log(metrics, step)
        if self.report is not None and self.report(step, {k: writer.last[k] for k in metrics}):
            raise TrialStopped(f"trial {self.trial} stopped early at step {step}")


def current() -> RunContext:
    """The active run, or a NotInRunError saying how to get one."""
    ctx = _current.get()
    if ctx is None:
        raise NotInRunError("this works only inside a function run by hopsml (experiment.launch, "
                            "experiment.allreduce or a search); call it from your training function")
    return ctx


def current_or_none() -> RunContext | None:
    return _current.get()


def _seconds(name: str, given: float | None) -> float:
    """A setting in seconds; inside a task a bad value falls back to its default with a warning."""
    try:
        return float(config.value(name, given))
    except HopsmlError as exc:
        default = float(config.default(name))
        log.warning("%s Using %s=%s instead.", exc, name, default)
        return default


@contextmanager
def active_run(storage: Storage, run_dir: RunDir, *, rank: int = 0, world_size: int = 1,
               write_metrics: bool = True, trial: int | None = None, report: TrialReporter | None = None,
               local_logdir: bool = False, sync_interval_s: float | None = None,
               stale_after_s: float | None = None, seed: int | None = None) -> Iterator[RunContext]:
    """Make a run current; on exit close its writers and collect a local TensorBoard folder. On a remote root its
    files are written in a local staging folder, copied to the run directory every `sync_interval_s` (setting) and
    at the end, and the folder is removed, also when the run fails or its process dies (a staging folder left by
    a process dead for `stale_after_s`, the lost_after_s setting, is swept). A task passes both from its run's
    settings snapshot; None reads this process's settings (a run context made outside a task)."""
    local_dir = storage.local_path(run_dir.path)
    staged = None
    if local_dir is None:
        staged = StagedRun(storage, run_dir.path, _seconds("sync_interval_s", sync_interval_s),
                           stale_after_s=_seconds("lost_after_s", stale_after_s))
        local_dir = staged.dir
    try:
        os.makedirs(local_dir, exist_ok=True)
        ctx = RunContext(storage, run_dir, local_dir, rank, world_size, write_metrics, trial, report,
                         local_logdir, seed, _staged=staged)
        token = _current.set(ctx)
    except BaseException:
        if staged is not None:
            staged.close()
        raise
    try:
        yield ctx
    finally:
        _current.reset(token)
        try:
            if ctx._metrics is not None:
                ctx._metrics.close()
            ctx.collect_local_tensorboard()
        finally:
            if staged is not None:
                staged.close()
