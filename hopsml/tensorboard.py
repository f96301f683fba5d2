"""TensorBoard and per-step metrics inside a run (hops-compatible `logdir()`, plus `log()`)."""

from __future__ import annotations

from typing import Any, Mapping

from hopsml.errors import HopsmlError
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
