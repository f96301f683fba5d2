"""Progress of long work: a bar on a terminal, a widget in a notebook, a few plain lines elsewhere.

    with spark_progress(spark, "prepare table 'iris'", steps=9) as progress:
        progress.step("read")            # the bar counts steps: its total never changes
        ... Spark jobs ...

Without ``steps`` the bar counts finished Spark tasks and shows no total (the jobs still to come
are unknown, and a total that grows reads as a hang). The jobs started inside the block run in
their own job group, so the Spark UI names the work too.

Where the output goes decides the display (``progress_bar``): a terminal gets tqdm's bar; a Jupyter
kernel gets tqdm's widget when ipywidgets is installed, else plain lines; anything else (a log
file, CI output, a pipe) gets plain lines, at most one per quarter of the work (or per minute when
the total is unknown), never carriage returns.
"""

from __future__ import annotations

import importlib.util
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, TextIO

_POLL_S = 0.5
_LINE_EVERY_S = 60.0   # plain lines without a total: at most one a minute


def _task_counts(tracker: Any, group: str, seen: dict[int, tuple[int, int]]) -> tuple[int, int]:
    """(finished, total) tasks over every stage of the group's jobs so far."""
    for job_id in tracker.getJobIdsForGroup(group):
        job = tracker.getJobInfo(job_id)
        for stage_id in (job.stageIds if job else []):
            stage = tracker.getStageInfo(stage_id)
            if stage is not None:
                seen[stage_id] = (stage.numCompletedTasks, stage.numTasks)
    return sum(done for done, _ in seen.values()), sum(total for _, total in seen.values())


def _in_notebook() -> bool:
    """True inside a Jupyter kernel (not a plain IPython terminal)."""
    shell = sys.modules.get("IPython")
    if shell is None:
        return False
    try:
        ip = shell.get_ipython()
    except AttributeError:
        return False
    return ip is not None and "IPKernelApp" in getattr(ip, "config", {})


def display_kind(stream: TextIO | None = None) -> str:
    """'widget', 'terminal' or 'lines': how progress is shown where ``stream`` (stderr) goes."""
    stream = stream if stream is not None else sys.stderr
    if _in_notebook():
        return "widget" if importlib.util.find_spec("ipywidgets") is not None else "lines"
    isatty = getattr(stream, "isatty", None)
    try:
        return "terminal" if isatty is not None and isatty() else "lines"
    except ValueError:  # a closed stream
        return "lines"


class LineProgress:
    """The tqdm calls hopsml uses (``n``, ``total``, ``update``, ``set_postfix``, ``refresh``,
    ``close``), written as a few whole lines: at the start, at each quarter, and at the end."""

    def __init__(self, total: int | None = None, desc: str = "", unit: str | None = "it", disable: bool = False,
                 stream: TextIO | None = None, **_: object) -> None:
        self.total, self.desc, self.unit, self.disable = total, desc, unit, disable
        self.n = 0
        self._stream = stream
        self._postfix = ""
        self._started = self._last_line = time.monotonic()
        self._quarter = 0
        self._closed = False
        self._say("started", counts=False)  # nothing is counted yet: "0 tasks" would read as nothing to do

    def _say(self, what: str, counts: bool = True) -> None:
        if self.disable:
            return
        stream = self._stream if self._stream is not None else sys.stderr
        if not counts:
            print(f"{self.desc}: {what}", file=stream, flush=True)
            return
        count = f"{self.n}/{self.total}" if self.total is not None else f"{self.n}"
        postfix = f", {self._postfix}" if self._postfix else ""
        elapsed = time.monotonic() - self._started
        unit = self.unit if (self.total if self.total is not None else self.n) == 1 else f"{self.unit}s"
        counted = f"{count} {unit}{postfix}, " if self.unit is not None else ""  # no unit: nothing is counted
        print(f"{self.desc}: {what} ({counted}{elapsed:.1f} s)", file=stream, flush=True)
        self._last_line = time.monotonic()

    def update(self, n: int = 1) -> None:
        self.n += n
        self.refresh()

    def set_postfix(self, refresh: bool = True, **values: object) -> None:
        self._postfix = ", ".join(f"{k}={v}" for k, v in values.items())
        if refresh:
            self.refresh()

    def refresh(self) -> None:
        if self._closed:
            return
        if self.total:
            quarter = min(4, int(4 * self.n / self.total))
            if 0 < quarter < 4 and quarter > self._quarter:
                self._quarter = quarter
                self._say(f"{25 * quarter}%")
        elif time.monotonic() - self._last_line >= _LINE_EVERY_S:
            self._say("running")

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._say("stopped" if self.total is not None and self.n < self.total else "done")


def progress_bar(total: int | None = None, desc: str = "", unit: str | None = "it", leave: bool = True,
                 disable: bool = False, kind: str | None = None) -> Any:
    """A progress display suited to where the output goes (see the module docstring); a unit of None counts
    nothing (the display shows the time only)."""
    kind = kind or display_kind()
    if kind == "lines":
        return LineProgress(total=total, desc=desc, unit=unit, disable=disable)
    if kind == "widget":
        from tqdm.notebook import tqdm as notebook_tqdm

        return notebook_tqdm(total=total, desc=desc, unit=unit or "it", leave=leave, disable=disable)
    from tqdm import tqdm as terminal_tqdm

    return terminal_tqdm(total=total, desc=desc, unit=unit or "it", leave=leave, disable=disable)


class SparkProgress:
    """What ``spark_progress`` yields: ``step(name)`` advances a bar of known steps."""

    def __init__(self, bar: Any, steps: int | None) -> None:
        self.bar, self.steps = bar, steps
        self._lock = threading.Lock()
        self._current: str | None = None

    def step(self, name: str) -> None:
        """Mark the start of the next step (only when the block was given ``steps``)."""
        if self.steps is None:
            return
        with self._lock:
            if self._current is not None and self.bar.n < self.steps:
                self.bar.n += 1   # the step before this one is done
            self._current = name
            self.bar.set_postfix(step=name, refresh=True)

    def _tasks_done(self, done: int, total: int) -> None:
        with self._lock:
            if self.steps is None:
                self.bar.n = done
                self.bar.refresh()


@contextmanager
def spark_progress(spark: Any, description: str, enabled: bool = True, steps: int | None = None,
                   since: float | None = None) -> Iterator[SparkProgress]:
    """Show the progress of the Spark work inside the block; quiet when not `enabled`. `since` (a
    time.monotonic() value) is when the work began, if before the block: the time shown counts from it.

    `spark` is a hopsml.cluster.handle.SparkHandle. With ``steps`` the display counts the steps the block
    announces with ``progress.step(name)`` (a fixed total); without, it counts finished Spark tasks, with
    no total (Spark Connect cannot count them: there the bar shows only the time)."""
    group = f"hopsml-{uuid.uuid4().hex[:12]}"
    tracker = spark.status_tracker()
    stop = threading.Event()
    bar = progress_bar(total=steps, desc=description, unit="step" if steps else "task" if tracker else None,
                       disable=not enabled, leave=False)
    progress = SparkProgress(bar, steps)
    if since is not None:   # both bars keep their start as a number of seconds
        earlier = max(0.0, time.monotonic() - since)
        if isinstance(bar, LineProgress):
            bar._started -= earlier
        elif hasattr(bar, "start_t"):
            bar.start_t -= earlier
    seen: dict[int, tuple[int, int]] = {}

    def poll() -> None:
        while tracker is not None and not stop.wait(_POLL_S):
            progress._tasks_done(*_task_counts(tracker, group, seen))

    thread = threading.Thread(target=poll, name="hopsml-progress", daemon=True)
    with spark.job_group(group, description):
        thread.start()
        try:
            yield progress
            if steps is not None:
                bar.n = steps
        finally:
            stop.set()
            thread.join(timeout=10 * _POLL_S)
            if tracker is not None and not thread.is_alive():   # the tasks that finished since the last poll
                progress._tasks_done(*_task_counts(tracker, group, seen))
            bar.close()
