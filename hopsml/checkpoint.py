"""Checkpoints inside a run: rank 0 saves the training state, every rank loads the latest one.

    from hopsml import checkpoint

    def train():
        state, start = checkpoint.load() or ({"w": init()}, -1)   # a retried or resumed run continues
        for step in range(start + 1, steps):
            ...
            if step % 5 == 0:
                checkpoint.save(state, step)

Checkpoints are pickles in the run's `checkpoint/step-<N>.pkl`, written aside and renamed, and copied
to an HDFS/S3 root at once (not only at the end), so a run whose rank is killed loses at most the steps
since the last save. When `experiment.allreduce(..., retries=N)` starts the ranks again after one died,
or `resume=<experiment id>` starts a new run from an earlier one, `load()` returns the latest
checkpoint. Imports without pyspark.
"""

from __future__ import annotations

import os
import pickle
import re
from typing import Any

from hopsml.errors import HopsmlError
from hopsml.fs import Storage
from hopsml.layout import CHECKPOINT, join
from hopsml.timeline.recorder import CHECKPOINT as CHECKPOINT_SPAN
from hopsml.timeline.span import span
from hopsml.tracking.run_context import RunContext, current

_NAME = re.compile(r"step-(\d+)\.pkl$")


def _step_name(step: int) -> str:
    return f"step-{step:09d}.pkl"


def steps(storage: Storage, run_path: str) -> list[int]:
    """The steps with a checkpoint in a run directory, oldest first."""
    found = (_NAME.search(path) for path in storage.ls(join(run_path, CHECKPOINT)))
    return sorted(int(match.group(1)) for match in found if match)


def save(state: object, step: int, keep: int = 3) -> str | None:
    """Save `state` as the checkpoint of `step` (rank 0 only; other ranks return None at once) and
    keep the newest `keep`; returns the file's local path."""
    if not isinstance(step, int) or isinstance(step, bool) or step < 0:
        raise HopsmlError(f"checkpoint.save needs the step as a non-negative integer, got {step!r}")
    if keep < 1:
        raise HopsmlError(f"checkpoint.save keeps at least one checkpoint, got keep={keep}")
    ctx = current()
    if ctx.rank != 0:
        return None
    with span("checkpoint save", CHECKPOINT_SPAN, step=step):
        return _save(ctx, state, step, keep)


def _save(ctx: RunContext, state: object, step: int, keep: int) -> str:
    folder = os.path.join(ctx.local_dir, CHECKPOINT)
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, _step_name(step))
    with open(path + ".partial", "wb") as out:
        pickle.dump(state, out, protocol=pickle.HIGHEST_PROTOCOL)
    os.replace(path + ".partial", path)
    for name in sorted(n for n in os.listdir(folder) if _NAME.search(n))[:-keep]:
        os.remove(os.path.join(folder, name))
    ctx.sync()
    return path


def load() -> tuple[Any, int] | None:
    """The latest checkpoint of this run as (state, step), or None when there is none yet."""
    ctx = current()
    saved = steps(ctx.storage, ctx.run_dir.path)
    if not saved:
        return None
    data = ctx.storage.read_bytes(join(ctx.run_dir.path, CHECKPOINT, _step_name(saved[-1])))
    return pickle.loads(data), saved[-1]


def copy_latest(storage: Storage, source_run: str, target_run: str) -> int | None:
    """Copy the newest checkpoint of `source_run` into `target_run` (what `resume=` starts from)."""
    saved = steps(storage, source_run)
    if not saved:
        return None
    name = _step_name(saved[-1])
    storage.write_bytes(join(target_run, CHECKPOINT, name), storage.read_bytes(join(source_run, CHECKPOINT, name)))
    return saved[-1]
