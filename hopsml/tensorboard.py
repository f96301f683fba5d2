"""TensorBoard and per-step metrics inside a run (hops-compatible `logdir()`, plus `log()`)."""

from __future__ import annotations

from typing import Any, Mapping

from hopsml.tracking import context


def logdir() -> str:
    """The local folder TensorBoard event files of this run go to (mirrored to the run directory)."""
    return context.current().tensorboard_dir


def log(metrics: Mapping[str, Any], step: int | None = None) -> None:
    """Record scalar metrics for one step: a line per value in metrics.jsonl and TensorBoard events.

    Only rank 0 of a distributed run writes (unless asked otherwise); on other ranks it does nothing.
    In a search with early stopping, the values also go to the driver, which may stop the trial here.
    """
    context.current().log(metrics, step)
