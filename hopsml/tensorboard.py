"""TensorBoard and per-step metrics inside a run (hops-compatible `logdir()`, plus `log()`)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from hopsml.errors import HopsmlError
from hopsml.tracking import run_context


def logdir() -> str:
    """The local folder for this run's TensorBoard event files: the run's tensorboard/ (staged and
    uploaded when the root is remote), or, when the verb was given `local_logdir=True`, a folder on
    the executor's disk whose contents are copied into the run's tensorboard/ when the function ends.

    It ends with "/", as hops' does, so the hops idiom ``tensorboard.logdir() + "model.pt"`` writes
    inside the folder (and the file reaches the run), not beside it."""
    path = run_context.current().tensorboard_dir
    os.makedirs(path, exist_ok=True)  # as in hops, a folder to write into at once
    return os.path.join(path, "")


def log(metrics: Mapping[str, Any], step: int | None = None) -> None:
    """Record scalar metrics for one step: a line per value in metrics.jsonl and TensorBoard events.

    Only rank 0 of a distributed run writes (unless asked otherwise); on other ranks it does nothing.
    In a search with early stopping, the values also go to the driver, which may stop the trial here.
    """
    run_context.current().log(metrics, step)


class DebuggerUnavailableError(HopsmlError, NotImplementedError):
    """hops' TensorBoard debugger calls: the TensorFlow 1 debugger plugin they started no longer exists."""


_DEBUGGER_HINT = ("hops' {name}() restarted TensorBoard with the TensorFlow 1 debugger plugin "
                  "(--debugger_port), which TensorBoard 2 removed. Call "
                  "tf.debugging.experimental.enable_dump_debug_info(tensorboard.logdir()) in the training "
                  "function instead and open the Debugger V2 tab of TensorBoard on the run's tensorboard/ folder.")


def interactive_debugger() -> str:
    """Not available: raises DebuggerUnavailableError saying what replaces it in TensorFlow 2."""
    raise DebuggerUnavailableError(_DEBUGGER_HINT.format(name="interactive_debugger"))


def non_interactive_debugger() -> str:
    """Not available: raises DebuggerUnavailableError saying what replaces it in TensorFlow 2."""
    raise DebuggerUnavailableError(_DEBUGGER_HINT.format(name="non_interactive_debugger"))
