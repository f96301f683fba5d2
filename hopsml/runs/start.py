"""What a run needs at its start, below both the engine and the search loop: the settings resolved once
(`Start.of`), the checks made before Spark starts, and the function made to travel to the executors.

The full settings start Spark, and the run's snapshot (config.RunSettings) goes in the TaskSpec to every
task, so no rank reads settings of its own.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from hopsml import config
from hopsml.cluster import local_modules, preflight, session, shipping
from hopsml.cluster.handle import SparkHandle
from hopsml.errors import HopsmlError
from hopsml.fs import Storage
from hopsml.launcher import seeds
from hopsml.launcher.driver import check_shippable, ship_by_value
from hopsml.launcher.spec import TaskSpec
from hopsml.net import Network
from hopsml.runs import rerun
from hopsml.runs.request import RunRequest
from hopsml.tracking.record import ExperimentRun


@dataclass(frozen=True)
class Start:
    """What a verb resolved before its run: the settings (once), the snapshot for the tasks, the storage."""

    settings: config.Settings
    snapshot: config.RunSettings
    storage: Storage
    checks: preflight.Preflight  # what each task does first: check its executor's stack, install the modules
    seed: int  # the run's seed: every rank and trial seeds its generators from it

    @classmethod
    def of(cls, settings: config.Settings, train_fn: Callable[..., Any], seed: int | None = None) -> Start:
        stack = preflight.driver_stack(train_fn) if settings.check_versions else None
        checks = preflight.Preflight(stack, local_modules.collect(train_fn))
        return cls(settings, config.RunSettings.of(settings), Storage(settings.root), checks, seeds.resolve(seed))

    @property
    def network(self) -> Network:
        """Where the driver's channel and the ranks listen."""
        return Network(self.snapshot.network_interface, self.snapshot.port_range)

    def spark(self) -> SparkHandle:
        """The Spark to run on (a session started with these settings when none runs)."""
        return SparkHandle.of(session.get_or_create(self.settings))

    def start_run(self, spark: SparkHandle, request: RunRequest, **fields: object) -> ExperimentRun:
        """Claim the run directory and write the RUNNING record (`fields` go into it, over the request's)."""
        fields = {"description": request.description, "metric_key": request.metric_key, **fields}
        # rerun_of, in a rerun
        fields.update(rerun.link(self.storage, self.settings.project, request.name, request.train_fn))
        return ExperimentRun.start(self.storage, self.settings.project, spark.app_id, name=request.name,
                                   fn=request.train_fn, versioned_resources=request.versioned_resources,
                                   heartbeat_s=self.snapshot.heartbeat_s,
                                   user=self.snapshot.user, spark_conf=spark.conf(),
                                   spark_version=spark.version, modules=self.checks.modules,
                                   python_environment=shipping.describe(packed=session.shipped()), seed=self.seed,
                                   **fields)

    def spec(self, run_dir: str, channel: Any, **fields: Any) -> TaskSpec:
        """A task's spec, with the channel's address and secret and the run's settings snapshot."""
        return TaskSpec(self.storage, run_dir, channel.address, channel.secret, settings=self.snapshot,
                        seed=self.seed, **fields)


def check_function(train_fn: object, args_dict: object, name: str,
                   versioned_resources: Iterable[str] | None = None) -> dict[str, Any]:
    """What can be checked before Spark starts (seconds): the function, its arguments, the name, the files."""
    ExperimentRun.check_arguments(name, versioned_resources)
    if not callable(train_fn):
        raise HopsmlError(f"train_fn must be a function, got {type(train_fn).__name__}")
    if args_dict is not None and not isinstance(args_dict, dict):
        raise HopsmlError(f"args_dict must be a dict of keyword arguments, got {type(args_dict).__name__}")
    return dict(args_dict or {})


def ship(train_fn: Callable[..., Any], args: dict[str, Any] | None = None) -> None:
    """Make the function travel to the executors, or fail now naming what cannot."""
    ship_by_value(train_fn)
    check_shippable(train_fn, args)
