"""One trace for the run: every rank's part (`timeline/rank-<r>.json`) merged into `timeline/trace.json`, with
times shifted to start at 0 and the clock alignment (each rank's offset and its error bound) in the metadata; and
the system samples of every rank taken out of it into `timeline/system.json` (`system_series`), small enough for
the web view to chart without reading the trace."""

from __future__ import annotations

import json
import logging
import os
import re
from typing import Any

from hopsml.errors import ResourceNotFoundError
from hopsml.fs import Storage
from hopsml.layout import TIMELINE_SYSTEM, TIMELINE_TRACE, RunDir

logger = logging.getLogger(__name__)

_PART = re.compile(r"rank-(\d+)\.json$")


class TimelineError(ResourceNotFoundError):
    """A run has no timeline to show."""


def parts(storage: Storage, run_dir: RunDir) -> dict[int, str]:
    """The rank parts a run has, by rank."""
    found = {}
    for path in storage.ls(run_dir.timeline):
        match = _PART.search(path)
        if match:
            found[int(match.group(1))] = path
    return found


def new_part(folder: str, rank: int, world_size: int) -> str:
    """The file for a rank's part in a local timeline folder that a search trial's earlier runs (rungs it
    was promoted from) may have filled: `rank-<rank + k * world_size>.json`, k the runs before, so every
    run keeps its part and each rank of a run counts only its own files (no race between ranks)."""
    index = rank
    while os.path.exists(os.path.join(folder, f"rank-{index}.json")):
        index += world_size
    return os.path.join(folder, f"rank-{index}.json")


def merge_traces(traces: dict[int, dict[str, Any]], extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """The parts (by rank) as one trace, starting at ts 0; `extra` goes into the metadata."""
    events: list[dict[str, Any]] = []
    ranks: list[dict[str, Any]] = []
    for rank in sorted(traces):
        part = traces[rank]
        events.extend(part.get("traceEvents", []))
        ranks.extend(part.get("metadata", {}).get("ranks", []))
    timed = [e["ts"] for e in events if e.get("ph") != "M"]
    origin = int(min(timed)) if timed else 0
    for event in events:
        if event.get("ph") != "M":
            event["ts"] = round(event["ts"] - origin, 3)
    errors = [r["clock_error_ns"] for r in ranks if r.get("clock_error_ns") is not None]
    metadata = {
        "hopsml_timeline": 1,
        "clock": "the driver's wall clock; each rank's offset measured at connect by min-round-trip pings",
        "origin_unix_us": origin,
        "clock_error_bound_us": round(max(errors) / 1000, 3) if errors else None,
        "ranks": ranks,
        **(extra or {}),
    }
    return {"traceEvents": events, "displayTimeUnit": "ms", "metadata": metadata}


def system_series(trace: dict[str, Any]) -> dict[str, Any]:
    """Each rank's system samples in a merged trace (its "system" counter events) as columns: seconds since the
    trace's origin ("t_s") and one list per metric (None where a sample lacks it), by rank.

    >>> system_series({"traceEvents": [{"ph": "C", "name": "system", "pid": 0, "ts": 2e6, "args": {"cpu_pct": 50}},
    ...                                {"ph": "C", "name": "system", "pid": 0, "ts": 0, "args": {"rss_mib": 9}}],
    ...                "metadata": {"origin_unix_us": 5}})["ranks"]
    {'0': {'t_s': [0.0, 2.0], 'cpu_pct': [None, 50], 'rss_mib': [9, None]}}
    """
    samples: dict[int, list[tuple[float, dict[str, Any]]]] = {}
    for event in trace.get("traceEvents", []):
        if event.get("ph") == "C" and event.get("name") == "system" and isinstance(event.get("args"), dict):
            samples.setdefault(int(event["pid"]), []).append((float(event["ts"]), event["args"]))
    ranks: dict[str, dict[str, list[Any]]] = {}
    for rank in sorted(samples):
        rows = sorted(samples[rank], key=lambda sample: sample[0])
        keys = sorted({key for _, values in rows for key in values})
        ranks[str(rank)] = {"t_s": [round(ts / 1e6, 3) for ts, _ in rows],
                            **{key: [values.get(key) for _, values in rows] for key in keys}}
    return {"hopsml_system": 1, "origin_unix_us": trace.get("metadata", {}).get("origin_unix_us"), "ranks": ranks}


def merge(storage: Storage, run_dir: RunDir, extra: dict[str, Any] | None = None) -> str:
    """Merge the run's rank parts into its trace.json (and their system samples into system.json); returns the
    trace's root-relative path."""
    found = parts(storage, run_dir)
    if not found:
        raise TimelineError(f"the run {storage.uri(run_dir.path)} has no timeline (no {run_dir.timeline}/rank-*.json): "
                            "it ran with timeline=False, or before hopsml recorded timelines; run it again "
                            "with timeline=True")
    traces = {}
    for rank, path in found.items():
        try:
            traces[rank] = json.loads(storage.read_bytes(path))
        except ValueError as exc:
            logger.warning("the timeline part of rank %d (%s) cannot be read (%s); the trace leaves it out",
                           rank, storage.uri(path), exc)
    target = run_dir.timeline_trace
    trace = merge_traces(traces, extra)
    storage.write_bytes(target, json.dumps(trace, separators=(",", ":")).encode())
    storage.write_bytes(run_dir.timeline_system, json.dumps(system_series(trace), separators=(",", ":")).encode())
    return target


__all__ = ["TIMELINE_SYSTEM", "TIMELINE_TRACE", "TimelineError", "merge", "merge_traces", "parts", "system_series"]
