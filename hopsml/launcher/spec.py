"""What every task of a run needs to know, made on the driver and pickled into the Spark closure: the
run's folder, the driver's channel, the run's settings snapshot and seed. Below the task side and the
timeline recorder that both read it."""

from __future__ import annotations

from dataclasses import dataclass, field

from hopsml import config
from hopsml.fs import Storage


@dataclass(frozen=True)
class TaskSpec:
    """What every task needs to know; pickled into the Spark closure (no live handles)."""

    storage: Storage
    run_dir: str
    channel_address: tuple[str, int] | None
    secret: bytes = field(repr=False)  # the run's channel key: never in a repr, log line or error
    log_name: str = "output.log"
    trial: int | None = None  # set for the trials of a search: its number, for the driver's bookkeeping
    trial_name: str | None = None  # and its parameters as its folder names them (lr=0.1&layers=2), for people
    local_logdir: bool = False  # tensorboard.logdir() on local disk, copied into the run at the end
    # The run's settings snapshot, made on the driver (the engine passes its own): ranks never read theirs.
    settings: config.RunSettings = field(default_factory=config.RunSettings.resolve)
    seed: int | None = None  # the run's seed: every generator the function uses starts from it (`seeds`)
    timeline: bool = False  # record the function's timeline (spans, system samples) into its folder's timeline/
