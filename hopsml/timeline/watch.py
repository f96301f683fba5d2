"""The driver's side of a run's timeline: the ranks' batches in (stragglers, system peaks), and at the end what
goes into the record (`finish`: the merged trace, the stragglers named, each rank's peak system metrics)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from hopsml.fs import Storage
from hopsml.layout import RunDir
from hopsml.timeline import merge
from hopsml.timeline.stragglers import StragglerSettings, StragglerWatch

logger = logging.getLogger(__name__)


@dataclass
class RunWatch:
    """What the driver learns from the ranks' timeline batches while the run goes."""

    announce: Callable[[str], None] | None = None
    settings: StragglerSettings = field(default_factory=StragglerSettings)
    stragglers: StragglerWatch = field(init=False)
    peaks: dict[int, dict[str, float]] = field(default_factory=dict)
    batches: int = 0
    collectives: bool = False  # whether the ranks sent ops of hopsml's collectives (what stragglers are named by)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self.stragglers = StragglerWatch(self.settings, self.announce)

    def add(self, rank: int, size: int, ops: Sequence[Sequence[int]], system: dict[str, float] | None) -> None:
        """One rank's batch."""
        with self._lock:
            self.batches += 1
            self.collectives = self.collectives or (bool(ops) and size > 1)
            if system:
                mine = self.peaks.setdefault(rank, {})
                for key, value in system.items():
                    mine[key] = max(mine.get(key, value), float(value))
        if ops:
            self.stragglers.add(rank, size, ops)

    def finish(self, storage: Storage, run_dir: RunDir) -> dict[str, Any]:
        """Merge the ranks' parts into the run's trace; the record's fields: timeline, stragglers (when several
        ranks met in hopsml's collectives), system (each rank's peaks, and where its samples over time are)."""
        stragglers = self.stragglers.summary() if self.collectives else None
        with self._lock:
            peaks = {str(rank): {k: round(v, 1) for k, v in values.items()}
                     for rank, values in sorted(self.peaks.items())}
        timeline: dict[str, Any] = {"enabled": True}
        system: dict[str, Any] = {"peaks": peaks}
        try:
            timeline["trace"] = merge.merge(storage, run_dir, {"stragglers": stragglers["named"] if stragglers else []})
            system["samples"] = run_dir.timeline_system
        except merge.TimelineError as exc:
            timeline["problem"] = str(exc)
        except Exception as exc:  # noqa: BLE001 - the run finished; a trace that cannot be written is noted
            logger.warning("the run's timeline could not be merged: %s", exc)
            timeline["problem"] = f"{type(exc).__name__}: {exc}"
        fields = {"timeline": timeline, "system": system}
        return fields if stragglers is None else {**fields, "stragglers": stragglers}
